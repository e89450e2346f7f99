"""What a reader feels on the static build: headless Chromium over loopback, no server behind the page.

Serves an export (`--site DIR`, made by `python -m explorable.export`; without it, a small one is built into a
temporary folder) with Python's `http.server` on 127.0.0.1, then measures in headless Chromium
(/usr/bin/chromium or $CHROMIUM, driven by Playwright):
  first render   from navigation start to the readouts on screen, in a fresh browser context (empty cache),
                 and to the page's script being ready for clicks (its first state file fetched)
  click          a click to the readouts' numbers changed on screen, timed inside the page
                 (performance.now() before the click, polled every animation frame), for
                   stop    --max-num-seqs stop buttons, walking through every stop (a new state file each time)
                   toggle  the KV cache allocation toggle
                   step    the guided steps, in order and around again
                   traffic step   the steps under traffic (its tab first), in order and around again
                   traffic rate   the request-rate stops at the first step under traffic
                   prefix step    the steps with prefix caching, in order and around again
                 (the last three where the export holds those guides: `--guides`, the default)
Every figure: median and 95th percentile over --repeats. Goals: first render <= 1 s (median); click ->
readout p95 <= 100 ms. Requests to any other host are refused and counted (there must be none).

    python benchmarks/static_feel.py [--site DIR] [--repeats 20] [--loads 5] [--width 1280]

Exits 2 when the site cannot be built or the browser cannot start, 1 when a change never reached the screen.
"""
from __future__ import annotations

import argparse
import functools
import http.server
import os
import re
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from urllib.parse import urlparse

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"]
SMALL_GRID = ["max_num_seqs=8,64,256,512", "pool_gib=2,16", "declared_multiple=1,4", "spread=1,16",
              "burstiness=1", "max_num_batched_tokens=1024,8192", "system_prompt_len=0,1024", "turns=1,2"]
READOUTS = '[data-readout="throughput_tok_s"] .readout-value'

# Click `button`, then wait (one check per animation frame) until the readouts' text differs; ms taken.
CLICK_JS = """async ([button]) => {
  // The readouts live in a shadow root that Panel may replace on an update: keep the one found while it is
  // still on the page, search the page again when it is not.
  const find = (root) => root.querySelector('.readouts') ? root :
    [...root.querySelectorAll('*')].map(e => e.shadowRoot && find(e.shadowRoot)).find(Boolean);
  const values = () => {
    let root = window.__cbReadouts;
    if (!root || !root.host || !root.host.isConnected || !root.querySelector('.readouts')) {
      root = window.__cbReadouts = find(document);
    }
    return root.querySelector('.readouts').textContent;
  };
  const before = values();
  const t0 = performance.now();
  button.click();
  const deadline = t0 + 10000;
  while (values() === before) {
    if (performance.now() > deadline) return -1;
    await new Promise(r => requestAnimationFrame(r));
  }
  return performance.now() - t0;
}"""


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *_):
        pass


def serve(folder: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(folder)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}/index.html"


def build_small(folder: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    args = [sys.executable, "-m", "explorable.export", "--out", str(folder), "--quiet"]
    for item in SMALL_GRID:
        args += ["--stops", item]
    done = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        print(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "export failed", file=sys.stderr)
        sys.exit(2)


def stats(xs: list[float]) -> str:
    return f"median {np.median(xs):7.0f} ms   p95 {np.percentile(xs, 95):7.0f} ms   (n={len(xs)})"


def measure(url: str, repeats: int, loads: int, width: int) -> tuple[dict[str, list[float]], list[str]]:
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import sync_playwright

    refused: list[str] = []

    def guard(route):
        host = urlparse(route.request.url).hostname
        if route.request.url.startswith(("data:", "blob:")) or host == "127.0.0.1":
            route.continue_()
        else:
            refused.append(route.request.url)
            route.abort()

    out: dict[str, list[float]] = {"first render": [], "ready for clicks": [], "stop": [], "toggle": [], "step": [],
                                   "traffic step": [], "traffic rate": [], "prefix step": []}
    with sync_playwright() as p:
        try:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        except PlaywrightError as exc:  # no Chromium: say so in one line
            print(f"cannot start Chromium at {CHROMIUM}: {str(exc).splitlines()[0]}", file=sys.stderr)
            sys.exit(2)
        for _ in range(loads):
            context = browser.new_context(viewport={"width": width, "height": 900})
            page = context.new_page()
            page.route("**/*", guard)
            page.goto(url, wait_until="commit")
            page.wait_for_function(f"""() => {{
                const find = (root) => root.querySelector('{READOUTS}') ||
                  [...root.querySelectorAll('*')].map(e => e.shadowRoot && find(e.shadowRoot)).find(Boolean);
                return find(document);
            }}""", polling="raf", timeout=20000)
            out["first render"].append(page.evaluate("performance.now()"))
            page.evaluate("window.cbStatic.ready")
            out["ready for clicks"].append(page.evaluate("performance.now()"))
            context.close()

        context = browser.new_context(viewport={"width": width, "height": 900})
        page = context.new_page()
        page.route("**/*", guard)
        page.goto(url)
        page.evaluate("window.cbStatic.ready")

        def click(locator, kind: str) -> None:
            ms = page.evaluate(CLICK_JS, [locator.element_handle()])
            if ms < 0:
                print(f"a {kind} click never changed the readouts", file=sys.stderr)
                sys.exit(1)
            out[kind].append(ms)
            page.wait_for_timeout(150)  # let the page settle, as a reader would between clicks

        stops = page.locator(".stop-max_num_seqs button")
        # Only the stops the export computed: a button between them snaps to one (with a notice), and two
        # in a row that snap to the same state would change nothing on screen.
        grid = page.evaluate("window.CB_STATIC_CONFIG.stops.max_num_seqs")
        labels = [t.strip() for t in stops.all_text_contents() if t.strip() in grid]
        current = page.evaluate("window.cbStatic.values().max_num_seqs")
        walk = [lab for lab in labels if lab != current]
        for i in range(repeats):  # every stop in turn: each state's file is fetched on its first visit
            lab = walk[i % len(walk)]
            if lab == page.evaluate("window.cbStatic.values().max_num_seqs"):
                lab = walk[(i + 1) % len(walk)]
            click(stops.filter(has_text=re.compile(f"^{lab}$")), "stop")
        toggle = page.locator(".ctl-allocation button")
        for i in range(repeats):
            click(toggle.nth((i + 1) % 2), "toggle")
        steps = page.locator(".step-button button")
        n = steps.count()
        target = 0
        for _ in range(repeats):
            target = (target + 1) % n
            if "bk-active" in (steps.nth(target).get_attribute("class") or ""):
                target = (target + 1) % n  # the lit step is on screen already: a click on it changes nothing
            click(steps.nth(target), "step")

        def walk_steps(label: str, css: str, kind: str) -> None:
            tab = page.locator(".guide-tabs button").filter(has_text=label)
            if not tab.count():
                return  # an export without this guide (--guides)
            tab.click()
            page.wait_for_timeout(150)
            steps = page.locator(f".{css}-button button")
            n = steps.count()
            target = -1
            for _ in range(repeats):
                target = (target + 1) % n
                if "bk-active" in (steps.nth(target).get_attribute("class") or ""):
                    target = (target + 1) % n
                click(steps.nth(target), kind)

        walk_steps("Under traffic", "traffic-step", "traffic step")
        if out["traffic step"]:
            # From the first step under traffic, every request-rate stop the export holds there, in turn.
            page.locator(".guide-tabs button").filter(has_text="Under traffic").click()
            first = page.locator(".traffic-step-button button").first
            if "bk-active" not in (first.get_attribute("class") or ""):
                click(first, "traffic step")
            rates = page.locator(".stop-request_rate button")
            held = [float(x) for x in page.evaluate("window.CB_STATIC_CONFIG.stops.request_rate")]
            labels = [t.strip() for t in rates.all_text_contents() if float(t.strip().rstrip("/s")) in held]
            for i in range(repeats):
                now = float(page.evaluate("window.cbStatic.values().request_rate"))
                walk = [lab for lab in labels if float(lab.rstrip("/s")) != now]
                click(rates.filter(has_text=re.compile(f"^{re.escape(walk[i % len(walk)])}$")), "traffic rate")
        walk_steps("With prefix caching", "prefix-step", "prefix step")
        context.close()
        browser.close()
    return out, refused


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--site", type=Path, help="an export's folder (default: build a small one)")
    parser.add_argument("--repeats", type=int, default=20, help="clicks of each kind (default 20)")
    parser.add_argument("--loads", type=int, default=5, help="fresh page loads for first render (default 5)")
    parser.add_argument("--width", type=int, default=1280)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        site = args.site
        if site is None:
            site = Path(tmp) / "site"
            build_small(site)
        elif not (site / "index.html").is_file():
            print(f"--site {site}: no index.html (run python -m explorable.export --out {site})", file=sys.stderr)
            return 2
        httpd, url = serve(site)
        try:
            out, refused = measure(url, args.repeats, args.loads, args.width)
        finally:
            httpd.shutdown()
    print(f"static page {site} at {args.width} px, headless Chromium over loopback "
          f"(load average {os.getloadavg()[0]:.2f})")
    for kind, xs in out.items():
        if not xs:
            print(f"  {kind:<17} (not in this export)")
            continue
        goal = {"first render": "goal median <= 1000 ms", "ready for clicks": ""}.get(kind, "goal p95 <= 100 ms")
        print(f"  {kind:<17} {stats(xs)}   {goal}")
    print(f"  requests to other hosts: {len(refused)}")
    return 0 if not refused else 1


if __name__ == "__main__":
    sys.exit(main())
