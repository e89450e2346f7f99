"""What a reader feels after a click: a real `panel serve app.py`, headless Chromium, click -> readout changed.

Starts `panel serve app.py` on a free loopback port, opens the page in headless Chromium (Playwright
driving /usr/bin/chromium, or $CHROMIUM), and for four kinds of change times the click (or key press)
until the readouts' text has changed on screen:
  stop      a --max-num-seqs stop button (64 <-> 256)
  slider    a pool_gib slider release (one arrow key on its handle: 16 <-> 16.5 GiB)
  toggle    the KV cache allocation toggle (on demand <-> reserve up front)
  step      a guided step (it sets several controls at once; with traffic on, the steps under traffic)
and, from Chrome's own counters (CDP `Performance.getMetrics`), the browser's work per update: the
deltas of TaskDuration, ScriptDuration, RecalcStyleDuration, LayoutDuration, RecalcStyleCount and Nodes
from just before the click until the page has been quiet (no websocket frame) for --quiet seconds.
With --query, every change starts from that URL state (with traffic on: the latency readouts, the
request-rate curve and lanes with arrivals update too, and all of the readouts are watched).
Every figure is a median and a 95th percentile over --repeats changes of each kind (after one unmeasured
warm-up change). Plots out of sight are painted when they come into sight (explorable.patches.paint_fix): at 1280x800
the window shows the controls, readouts and the top of the lanes; `--height 1400` puts every plot of the
default page in sight, so each update paints them all. Goals on 2 cores: p95 <= 150 ms for every kind, at 1280 px and on an emulated phone (issue 28); browser work (TaskDuration) <= 150 ms
per update (median).

    python benchmarks/browser_feel.py [--repeats 10] [--width 1280] [--quiet 0.6] [--query "arrival=rate&request_rate=8"]
    python benchmarks/browser_feel.py --phone "iPhone 13"       # an emulated phone (Playwright's device descriptor)
    python benchmarks/browser_feel.py --against ../before        # another checkout's page, side by side

On a phone (`--phone`, any of Playwright's device names: its viewport, device scale factor, touch and mobile
layout), each change is a tap (touch events through CDP) instead of a click. With `--against DIR`, a server of
that checkout runs beside this one and every kind of change is measured on both in turn, in one sitting: the
two columns of figures are printed side by side (this checkout first).

Exits 2 when the server or the browser cannot start, 1 when a change never reached the screen.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import parse_qs

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
METRICS = ("TaskDuration", "ScriptDuration", "RecalcStyleDuration", "LayoutDuration", "RecalcStyleCount", "Nodes")

# Finds elements through every shadow root (Panel renders each component in one). Matches may sit in several
# roots (with traffic on, the latency readouts are a pane of their own beside the six): every root that holds
# one is remembered, so a poll costs one querySelectorAll per such root, and the roots are searched again
# when one of them has left the page.
FIND_JS = """
window.__cbFind = (selector) => {
  window.__cbRoots = window.__cbRoots || {};
  const cached = window.__cbRoots[selector];
  if (cached && cached.every(root => root.isConnected !== false)) {
    const hits = cached.flatMap(root => [...root.querySelectorAll(selector)]);
    if (hits.length) return hits;
  }
  const stack = [document], roots = [], hits = [];
  while (stack.length) {
    const root = stack.pop();
    const found = root.querySelectorAll(selector);
    if (found.length) {
      roots.push(root);
      hits.push(...found);
    }
    for (const el of root.querySelectorAll('*')) if (el.shadowRoot) stack.push(el.shadowRoot);
  }
  if (roots.length) window.__cbRoots[selector] = roots;
  return hits;
};
window.__cbReadouts = () => window.__cbFind('[data-readout] .readout-value, [data-readout] .readout-delta')
  .map(e => e.textContent).join('|');
"""

# Starts watching the readouts; resolves with the ms from now until their new text has been drawn: the first
# DOM change to the readouts that alters their text, then the frame that paints it. Mutation observers on
# the roots that hold readouts see the change when it happens at no cost in between (polling every few ms
# was itself a large share of the browser's work while it waited); a slow poll covers a readout pane that
# Bokeh re-rendered into a new root.
ARM_JS = """(timeoutMs) => {
  const before = window.__cbReadouts();
  const t0 = performance.now();
  const roots = window.__cbRoots['[data-readout] .readout-value, [data-readout] .readout-delta'] || [];
  window.__cbDone = new Promise((resolve) => {
    let seen = false, timer = null;
    const observers = [];
    const stop = () => { clearTimeout(timer); observers.forEach(o => o.disconnect()); };
    const check = () => {
      if (seen || window.__cbReadouts() === before) return seen;
      seen = true;
      stop();
      // Changed: the time is taken once the frame that draws the new text has been rendered.
      requestAnimationFrame(() => setTimeout(() => resolve(performance.now() - t0), 0));
      return true;
    };
    for (const root of roots) {
      const observer = new MutationObserver(check);
      observer.observe(root, {subtree: true, childList: true, characterData: true});
      observers.push(observer);
    }
    const poll = () => {
      if (check()) return;
      if (performance.now() - t0 > timeoutMs) {
        stop();
        return resolve(-1);
      }
      timer = setTimeout(poll, 50);
    };
    poll();
  });
  return before;
}"""


# The element a click at (x, y) reaches, through shadow roots (Panel draws every component in one).
HIT_JS = """([x, y]) => {
  let el = document.elementFromPoint(x, y);
  while (el && el.shadowRoot) {
    const inner = el.shadowRoot.elementFromPoint(x, y);
    if (!inner || inner === el) break;
    el = inner;
  }
  return el;
}"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`panel serve app.py` of checkout `root` (this one by default) on loopback, that checkout first on the
    import path."""

    def __init__(self, start_timeout: float, root: Path = ROOT):
        self.port = free_port()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "panel", "serve", "app.py", "--port", str(self.port), "--address", "127.0.0.1",
             "--allow-websocket-origin", f"127.0.0.1:{self.port}"],
            cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.log: list[str] = []
        ready = threading.Event()

        def pump():
            for line in self.proc.stdout:
                self.log.append(line)
                if "Bokeh app running at" in line:
                    ready.set()

        threading.Thread(target=pump, daemon=True).start()
        if not ready.wait(start_timeout):
            self.stop()
            raise RuntimeError("panel serve did not start:\n" + "".join(self.log[-20:]))
        self.url = f"http://127.0.0.1:{self.port}/app"

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


class Feel:
    """One open page, a CDP session on it, and a clock for websocket traffic."""

    def __init__(self, page, quiet: float, timeout: float):
        self.page, self.quiet, self.timeout = page, quiet, timeout
        self.cdp = page.context.new_cdp_session(page)
        self.cdp.send("Performance.enable")
        self.last_frame = time.monotonic()
        page.on("websocket", lambda ws: ws.on("framereceived", self._frame))
        self.last_nodes = None

    def _frame(self, _payload) -> None:
        self.last_frame = time.monotonic()

    def metrics(self) -> dict[str, float]:
        got = {m["name"]: m["value"] for m in self.cdp.send("Performance.getMetrics")["metrics"]}
        return {k: got.get(k, 0.0) for k in METRICS}

    def settle(self) -> None:
        """Wait until no websocket frame has arrived for `quiet` seconds (bounded by the timeout)."""
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            self.page.wait_for_timeout(50)
            if time.monotonic() - self.last_frame >= self.quiet:
                return

    def change(self, act: "Action") -> tuple[float, dict[str, float]]:
        """(ms from the action until the readouts changed, browser work deltas until quiet)."""
        self.settle()
        act.prepare()
        self.page.wait_for_timeout(100)  # the hover's restyle is the pointer arriving, not the update
        before = self.metrics()
        self.page.evaluate(ARM_JS, int(self.timeout * 1000))
        act.fire()
        ms = self.page.evaluate("window.__cbDone")
        self.settle()
        after = self.metrics()
        return ms, {k: after[k] - before[k] for k in METRICS}


def traffic_on(query: str) -> bool:
    """Whether a --query state has requests arriving over time (the steps then walk the traffic steps)."""
    return parse_qs(query).get("arrival", ["all-at-once"])[-1] != "all-at-once"


class Action:
    """One change a reader makes: `prepare()` brings the pointer (or the keyboard focus) to the control, as a
    reader's hand does before the click; `fire()` is the click (or key press) itself.

    The click is the browser's own input: a mouse press and release at the button's centre, sent through CDP
    (`Input.dispatchMouseEvent`), which is what a reader's click produces. Playwright's `locator.click()` first
    runs its own checks in the page (visible, stable over two frames, not covered: `elementsFromPoint`, scroll
    into view): 5-25 ms of the page's main thread per change in two runs that differed only in this. A reader's
    click never costs them, and the work counters would charge them to the update; here they run in
    `prepare()`, before the counters are read."""

    def __init__(self, page, cdp, locator, key: str | None = None, touch: bool = False):
        self.page, self.cdp, self.locator, self.key, self.touch = page, cdp, locator, key, touch
        self.x = self.y = 0.0

    def prepare(self) -> None:
        if self.key is not None:
            self.locator.focus()
            return
        self.locator.scroll_into_view_if_needed()
        box = None
        for _ in range(50):  # until the button has stopped moving (a section above it may still be drawn)
            last, box = box, self.locator.bounding_box()
            if box is not None and box == last:
                break
            self.page.wait_for_timeout(100)
        if box is None:
            raise RuntimeError(f"{self.locator} is not on the page")
        self.x, self.y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
        # What a reader's click there would hit (through the shadow roots) must be this button, not something
        # drawn over it (a tooltip, a notice): Playwright's click checked that, and so does this.
        hit = self.page.evaluate_handle(HIT_JS, [self.x, self.y])
        if not self.locator.evaluate("(el, hit) => el === hit || el.contains(hit)", hit):
            raise RuntimeError(f"something covers {self.locator} at ({self.x:.0f}, {self.y:.0f})")
        if not self.touch:  # a finger does not hover before it taps
            self.cdp.send("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": self.x, "y": self.y})

    def fire(self) -> None:
        if self.key is not None:
            self.page.keyboard.press(self.key)
            return
        if self.touch:  # a tap: the browser makes the click of it, as a phone's does
            point = [{"x": self.x, "y": self.y}]
            self.cdp.send("Input.dispatchTouchEvent", {"type": "touchStart", "touchPoints": point})
            self.cdp.send("Input.dispatchTouchEvent", {"type": "touchEnd", "touchPoints": []})
            return
        for kind in ("mousePressed", "mouseReleased"):
            self.cdp.send("Input.dispatchMouseEvent", {"type": kind, "x": self.x, "y": self.y, "button": "left",
                                                       "clickCount": 1})


def actions(page, cdp, traffic: bool = False, touch: bool = False) -> dict[str, list[Action]]:
    """Each kind of change as a list of actions that alternate between two (or more) states. With traffic on,
    the guided steps are the steps under traffic: the article's steps would switch traffic off."""
    def button(css: str, label: str) -> Action:
        return Action(page, cdp, page.locator(f"{css} button").filter(
            has_text=re.compile(rf"^\s*{re.escape(label)}\s*$")), touch=touch)

    def key(css: str, which: str) -> Action:
        return Action(page, cdp, page.locator(f"{css} .noUi-handle"), key=which)

    if traffic:
        steps = [button(".traffic-step-button", f"{i}. {t}") for i, t in
                 ((1, "Traffic arrives"), (2, "Past the knee"), (3, "A cap buys smooth tokens"),
                  (4, "Smaller chunks, steadier streams"), (5, "A preemption is a stall"))]
    else:
        steps = [button(".step-button", f"{i}. {t}") for i, t in
                 ((2, "Cap at 64"), (3, "Static batching"), (4, "Reserve up front"), (7, "Memory wall"),
                  (1, "As shipped"))]
    return {
        "stop": [button(".stop-max_num_seqs", "64"), button(".stop-max_num_seqs", "256")],
        "slider": [key(".ctl-pool_gib", "ArrowRight"), key(".ctl-pool_gib", "ArrowLeft")],
        "toggle": [button(".ctl-allocation", "reserve up front"), button(".ctl-allocation", "on demand")],
        "step": steps,
    }


def open_page(page, url: str, timeout: float) -> float:
    """Open a fresh page; seconds until its readouts and lanes are drawn (the first page of a fresh server
    may wait `timeout` s for the simulator to be prepared and the state's runs computed)."""
    t0 = time.perf_counter()
    page.goto(url, timeout=timeout * 1000)
    page.locator('[data-readout="throughput_tok_s"] .readout-value').wait_for(timeout=timeout * 1000)
    page.locator(".lane-chart canvas").first.wait_for(timeout=timeout * 1000)
    page.evaluate(FIND_JS)
    return time.perf_counter() - t0


def show_guide(page, label: str) -> None:
    """Choose guide `label`'s tab where the page shows one guide at a time (a page with every guide stacked has
    no tabs: nothing to do)."""
    tab = page.locator(".guide-tabs button").filter(has_text=re.compile(rf"^\s*{re.escape(label)}\s*$"))
    if tab.count() and tab.first.is_visible() and "bk-active" not in (tab.first.get_attribute("class") or ""):
        tab.first.click()
        page.wait_for_timeout(300)


def measure_kind(feel: Feel, page, kind: str, repeats: int, deadline: float, traffic: bool = False,
                 touch: bool = False):
    """(latencies, work deltas) of `repeats` changes of one kind after one warm-up, or why it failed."""
    if kind == "step":
        show_guide(page, "Under traffic" if traffic else "All at once")
    acts = actions(page, feel.cdp, traffic, touch)[kind]
    latency, work = [], []
    for i in range(repeats + 1):
        if time.monotonic() > deadline:
            return f"out of time after {i} changes (--budget)"
        ms, delta = feel.change(acts[i % len(acts)])
        if ms < 0:
            return f"change {i} did not reach the readouts in {feel.timeout:g} s"
        if i:  # the first change of each kind warms caches; not measured
            latency.append(ms)
            work.append(delta)
    return latency, work


def pct(values, q) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q))


def measure(browser, server: Server, args, kinds: list[str], deadline: float, devices) -> tuple[dict, list, list]:
    """Every kind of change on `server`'s page: ({kind: (latencies, work)}, failures, page-load seconds)."""
    from playwright.sync_api import Error as PlaywrightError

    touch = args.phone is not None
    context = browser.new_context(**(devices[args.phone] if touch else
                                     {"viewport": {"width": args.width, "height": args.height}}))
    page = context.new_page()
    page.set_default_timeout(args.timeout * 1000)
    feel = Feel(page, args.quiet, args.timeout)
    rows, failed, load_s = {}, [], []
    for kind in kinds:
        url = server.url + (f"?{args.query}" if args.query else "")
        try:
            try:
                load_s.append(open_page(page, url, args.load_timeout))
            except PlaywrightError:  # a first page's websocket lost on a loaded machine: once more
                load_s.append(open_page(page, url, args.load_timeout))
            result = measure_kind(feel, page, kind, args.repeats, deadline, traffic_on(args.query), touch)
        except (PlaywrightError, RuntimeError) as exc:  # a control that is not there, a page that broke
            failed.append(f"{kind}: {str(exc).splitlines()[0]}")
            continue
        if isinstance(result, str):
            failed.append(f"{kind}: {result}")
        else:
            rows[kind] = result
    context.close()
    return rows, failed, load_s


def report_row(kind: str, latency, work) -> str:
    col = lambda k, scale=1000.0: [w[k] * scale for w in work]  # noqa: E731
    task = col("TaskDuration")
    return (f"{kind:<8} {statistics.median(latency):9.0f} {pct(latency, 95):9.0f} "
            f"{statistics.median(task):7.0f} {pct(task, 95):7.0f} "
            f"{statistics.median(col('ScriptDuration')):7.0f} {pct(col('ScriptDuration'), 95):7.0f} "
            f"{statistics.median(col('RecalcStyleDuration')):7.0f} {pct(col('RecalcStyleDuration'), 95):7.0f} "
            f"{statistics.median(col('LayoutDuration')):9.0f} {statistics.median(col('RecalcStyleCount', 1)):8.0f} "
            f"{statistics.median(col('Nodes', 1)):7.0f}")


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=10, help="measured changes of each kind")
    ap.add_argument("--width", type=int, default=1280)
    ap.add_argument("--height", type=int, default=800)
    ap.add_argument("--phone", default=None, metavar="DEVICE",
                    help="an emulated phone, by Playwright's device name ('iPhone 13', 'Pixel 7'): taps, not clicks")
    ap.add_argument("--against", type=Path, default=None, metavar="DIR",
                    help="another checkout's root: its page is measured too, in turn, and printed beside this one")
    ap.add_argument("--quiet", type=float, default=0.6, help="seconds without a websocket frame = update done")
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds one change may take")
    ap.add_argument("--kinds", default="stop,slider,toggle,step")
    ap.add_argument("--budget", type=float, default=600.0, help="seconds for the whole measurement")
    ap.add_argument("--load-timeout", type=float, default=120.0,
                    help="seconds a page may take to open (a fresh server prepares the simulator first)")
    ap.add_argument("--query", default="", help="URL state to start from, e.g. 'arrival=rate&request_rate=8' "
                    "(an update with traffic on)")
    return ap.parse_args()


def main() -> int:
    args = parse_args()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("browser_feel: the playwright package is not installed (pip install -e '.[test]')", file=sys.stderr)
        return 2
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        print(f"browser_feel: no Chromium at {CHROMIUM} (set $CHROMIUM)", file=sys.stderr)
        return 2
    if args.against is not None and not (args.against / "app.py").is_file():
        print(f"browser_feel: --against {args.against}: no app.py there (a checkout's root)", file=sys.stderr)
        return 2
    trees = {"this": ROOT, **({"against": args.against.resolve()} if args.against else {})}
    servers: dict[str, Server] = {}
    try:
        for name, root in trees.items():
            servers[name] = Server(start_timeout=120, root=root)
    except RuntimeError as exc:
        print(f"browser_feel: {exc}", file=sys.stderr)
        for server in servers.values():
            server.stop()
        return 2

    results = {name: ({}, [], []) for name in servers}
    deadline = time.monotonic() + args.budget
    try:
        with sync_playwright() as p:
            if args.phone is not None and args.phone not in p.devices:
                print(f"browser_feel: --phone {args.phone!r} is not one of Playwright's devices", file=sys.stderr)
                return 2
            try:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            except Exception as exc:  # noqa: BLE001 - any launch failure is "cannot start"
                print(f"browser_feel: Chromium did not start: {exc}", file=sys.stderr)
                return 2
            for kind in args.kinds.split(","):  # each kind on every checkout in turn: the same sitting for both
                for name, server in servers.items():
                    rows, failed, load_s = measure(browser, server, args, [kind], deadline, p.devices)
                    results[name][0].update(rows)
                    results[name][1].extend(failed)
                    results[name][2].extend(load_s)
            browser.close()
    finally:
        for server in servers.values():
            server.stop()

    where = f"{args.phone} (emulated)" if args.phone else f"{args.width}x{args.height}"
    print(f"browser_feel: {where}, {args.repeats} changes per kind, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.2f}" + (f", from ?{args.query}" if args.query else ""))
    head = (f"{'change':<8} {'click->readout ms':>19} {'task ms':>15} {'script ms':>15} {'recalc ms':>15} "
            f"{'layout ms':>9} {'recalcs':>8} {'dNodes':>7}")
    ok = True
    for name, (rows, failed, load_s) in results.items():
        print(f"\n{name}: {trees[name]}  (page loads {', '.join(f'{x:.1f}' for x in load_s)} s)")
        print(head)
        print(f"{'':<8} {'median':>9} {'p95':>9} {'median':>7} {'p95':>7} {'median':>7} {'p95':>7} {'median':>7} "
              f"{'p95':>7} {'median':>9} {'median':>8} {'median':>7}")
        for kind, (latency, work) in rows.items():
            print(report_row(kind, latency, work))
        for line in failed:
            print(f"FAILED {line}")
        ok = ok and not failed
    if len(results) > 1:
        print("\nclick->readout p95 side by side (ms):")
        print(f"{'change':<8} " + " ".join(f"{name:>10}" for name in results))
        for kind in args.kinds.split(","):
            cells = [f"{pct(results[n][0][kind][0], 95):10.0f}" if kind in results[n][0] else f"{'-':>10}"
                     for n in results]
            print(f"{kind:<8} " + " ".join(cells))
    print("goals: click->readout p95 <= 150 ms for every kind (issue 28); task (browser work per update) median <= 150 ms")
    for name, server in servers.items():
        tracebacks = sum("Traceback" in line for line in server.log)
        if tracebacks:
            print(f"{name}: server logged {tracebacks} traceback(s); its log's tail:")
            print("".join(server.log[-40:]))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
