"""Classroom load test: many browser-free sessions against `panel serve app.py`, on loopback only.

It starts its own server (127.0.0.1, a free port, the flags below), then speaks Bokeh's websocket protocol
the way a browser tab does (GET the page, take its session token, open /app/ws, PULL-DOC, say
"document_ready", PATCH-DOC a slider release) from one asyncio process, so the client costs little CPU
next to the server:

  open     60 sessions (GET + websocket + document), 8 at a time;
  idle     server RSS with every session open and idle, minus the baseline, per session;
  steady   each session releases --max-num-seqs or the pool slider at values nobody has tried (the server
           must re-run them), then "thinks" for a random 2-8 s (a class working through the article);
  burst    every session releases a slider at the same instant, each at a different new value (the worst
           case: 60 uncached runs at once);
  class    every session releases --max-num-seqs at the same instant to the same value, as a class following
           the guided steps does (one run, shared by every session through the cross-session cache; each
           session first puts back the pool the burst phase changed, so all are at one state);
  flood    one session sends --flood new values 10 ms apart (a script or a stuck key) while ten others
           release sliders: how many updates the server computes, and what the others wait;
  cycles   500 sessions opened and closed (4 at a time), server RSS sampled every 100, and once more after
           the server has discarded the closed sessions.

Latency is measured on the client from sending the release to receiving the server's resulting document
patch: "response" is the first patch that changes the readouts or the lanes (the run, readouts, lanes,
strips and log go out together); "curves" is the patch of the throughput curves (drawn just after).
RSS is VmRSS from /proc of the server and its children. Every loop is bounded in count and time, the whole
run by --deadline; every server is killed (its process group) on the way out. Exit status 0 when every
goal is met, 1 when one is missed.

    python benchmarks/load_test.py                          # the recommended flags, 60 sessions (~10 min)
    python benchmarks/load_test.py --cycles 100 --settle 0  # quicker
    python benchmarks/load_test.py --num-threads 4          # compare: a thread pool
    python benchmarks/load_test.py --processes 2            # compare: 2 servers behind a sticky proxy
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import secrets
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections import deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"  # loopback only: this script never talks to any other address
# The flags this script (and the README) recommend for a class; --server-args replaces them.
RECOMMENDED = ("--warm --plugins explorable.server.health --check-unused-sessions 10000 --unused-session-lifetime 70000 "
               "--session-ids signed --websocket-max-message-size 1048576")

try:
    from websockets.asyncio.client import connect as ws_connect
except ImportError:  # pragma: no cover
    sys.exit("the websockets package is needed: pip install 'websockets>=12'")


# -- the server --------------------------------------------------------------------------------------
_FLEET_SECRET = secrets.token_urlsafe(32)


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _process_tree(pid: int) -> Iterator[int]:
    """`pid` and every descendant still running (several with --num-procs)."""
    todo, seen = [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        yield p
        try:
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue


def rss_mib(pid: int) -> float:
    """VmRSS of `pid` and every descendant, in MiB; 0 if it is gone."""
    total_kib = 0
    for p in _process_tree(pid):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total_kib += int(line.split()[1])
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return total_kib / 1024


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) used so far by `pid` and every descendant; 0 if it is gone. On a machine
    shared with other work this is a fairer cost per update than wall time."""
    total = 0
    for p in _process_tree(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of proc(5))
        except (FileNotFoundError, ProcessLookupError, PermissionError, IndexError):
            continue
    return total / os.sysconf("SC_CLK_TCK")


class Server:
    """`panel serve app.py` on 127.0.0.1 in its own process group, with its log kept."""

    def __init__(self, num_threads: int, extra: str, start_timeout: float, log_path: str | None = None):
        self.log_path = log_path
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}"
        self.args = [sys.executable, "-m", "panel", "serve", "app.py", "--port", str(self.port), "--address", HOST,
                     "--allow-websocket-origin", f"{HOST}:{self.port}"]
        if num_threads > 0:
            self.args += ["--num-threads", str(num_threads)]
        self.args += shlex.split(extra)
        self.start_timeout = start_timeout
        self.log: deque[str] = deque(maxlen=400)
        self.tracebacks = 0
        self.problems: list[str] = []
        self.errors = 0
        self.proc: subprocess.Popen | None = None

    @property
    def command(self) -> str:
        return shlex.join(["panel", *self.args[3:]])

    def start(self) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "NO_PROXY": "*", "no_proxy": "*"}
        # --session-ids signed needs the server's secret (the README exports one); every process of a fleet
        # gets the same, as behind a proxy.
        env.setdefault("BOKEH_SECRET_KEY", _FLEET_SECRET)
        self.proc = subprocess.Popen(self.args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, start_new_session=True, env=env)
        ready = threading.Event()

        def pump():
            keep = 0
            sink = open(self.log_path, "w") if self.log_path else None
            for line in self.proc.stdout:
                if sink:
                    sink.write(line)
                    sink.flush()
                self.log.append(line.rstrip())
                if "Traceback" in line:
                    self.tracebacks += 1
                if " ERROR" in line or "ERROR:" in line:
                    self.errors += 1
                    keep = 120 if len(self.problems) < 400 else 0  # the first few, with their tracebacks
                if keep:
                    self.problems.append(line.rstrip())
                    keep -= 1
                if "Bokeh app running at" in line:
                    ready.set()

        threading.Thread(target=pump, daemon=True, name="server-log").start()
        t0 = time.monotonic()
        while not ready.wait(0.2):
            if self.proc.poll() is not None or time.monotonic() - t0 > self.start_timeout:
                self.stop()
                raise RuntimeError("panel serve did not start:\n" + "\n".join(list(self.log)[-30:]))
        self.start_s = time.monotonic() - t0

    def rss(self) -> float:
        return rss_mib(self.proc.pid) if self.proc else 0.0

    def cpu(self) -> float:
        return cpu_s(self.proc.pid) if self.proc else 0.0

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        except ProcessLookupError:
            pass


# -- one browser-free session ------------------------------------------------------------------------
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never an environment proxy
DOCUMENT_READY = {"kind": "MessageSent", "msg_type": "bokeh_event",
                  "msg_data": {"type": "event", "name": "document_ready", "values": {"type": "map"}}}
TOKEN = re.compile(r'"token"\s*:\s*"([A-Za-z0-9_\-.=]+)"')


def http_get(url: str, timeout: float) -> tuple[int, str]:
    assert url.startswith(f"http://{HOST}:"), url
    with _NO_PROXY.open(url, timeout=timeout) as r:
        return r.status, r.read().decode("utf-8", "replace")


@dataclass
class Msg:
    msgtype: str
    content: dict
    t: float  # when its last frame arrived (perf_counter)
    header: dict = field(default_factory=dict)


def walk_ids(doc_json: dict) -> dict:
    """Ids the test needs from a PULL-DOC reply: sliders by css class, the readouts pane, curve data."""
    found = {"sliders": {}, "start": {}, "readouts": None, "curves": set(), "lanes": set()}

    def visit(node, inside: str | None):
        if isinstance(node, dict):
            if node.get("type") == "object" and "id" in node:
                attrs = node.get("attributes", {})
                classes = attrs.get("css_classes") or []
                if isinstance(classes, list):
                    for c in classes:
                        if isinstance(c, str) and c.startswith("ctl-") and node.get("name") == "Slider":
                            found["sliders"][c[4:]] = node["id"]
                            found["start"][c[4:]] = attrs.get("value")  # as the page opened
                    if "run-readouts" in classes:  # the run's readouts (not the latency pane)
                        found["readouts"] = node["id"]
                    if "curves" in classes:
                        inside = "curves"
                    elif "lane-chart" in classes:
                        inside = "lanes"
                if inside and node.get("name") in ("ColumnDataSource", "Span"):
                    found[inside].add(node["id"])
                for v in attrs.values():
                    visit(v, inside)
            else:  # maps, arrays, and references ({"id": ...}: defined where they first appeared)
                for v in node.values():
                    visit(v, inside)
        elif isinstance(node, list):
            for v in node:
                visit(v, inside)

    visit(doc_json.get("roots", []), None)
    return found


class Session:
    """A browser tab without a browser: GET, websocket, PULL-DOC, then PATCH-DOC slider releases."""

    def __init__(self, base: str, query: str = ""):
        assert base.startswith(f"http://{HOST}:"), "loopback only"
        self.base, self.query = base, query
        self.ws = None
        self.queue: asyncio.Queue[Msg] = asyncio.Queue()
        self.reader: asyncio.Task | None = None
        self.ids: dict = {}
        self.values: dict = {}
        self.errors: list[str] = []

    async def open(self, timeout: float) -> float:
        t0 = time.perf_counter()
        status, page = await asyncio.get_running_loop().run_in_executor(
            None, http_get, f"{self.base}/app{self.query}", timeout)
        token = TOKEN.search(page)
        if status != 200 or not token:
            raise RuntimeError(f"GET /app gave {status} and {'a' if token else 'no'} session token")
        host = self.base.split("//", 1)[1]
        self.ws = await asyncio.wait_for(ws_connect(
            f"ws://{host}/app/ws", subprotocols=["bokeh", token.group(1)], origin=self.base, proxy=None,
            compression=None, max_size=256 << 20, max_queue=None, open_timeout=timeout,
            ping_interval=None), timeout)  # a browser sends no pings of its own (it answers the server's)
        self.reader = asyncio.create_task(self._read())
        await self.expect("ACK", timeout)
        await self.send("PULL-DOC-REQ", {})
        reply = await self.expect("PULL-DOC-REPLY", timeout)
        self.ids = walk_ids(reply.content["doc"])
        if not self.ids["readouts"] or not {"max_num_seqs", "pool_gib"} <= set(self.ids["sliders"]):
            raise RuntimeError(f"the page's models were not found: {self.ids}")
        # bokehjs says so once every view has rendered; Panel holds back data updates (and runs its onload
        # callbacks, here the URL rewrite) until then.
        await self.send("PATCH-DOC", {"events": [DOCUMENT_READY]})
        await self.expect("OK", timeout)
        return time.perf_counter() - t0

    async def _read(self) -> None:
        ws = self.ws
        try:
            while True:
                header = json.loads(await ws.recv())
                await ws.recv()  # metadata
                content = await ws.recv()
                for _ in range(2 * int(header.get("num_buffers", 0) or 0)):
                    await ws.recv()  # buffer header, buffer payload
                t = time.perf_counter()
                kind = header.get("msgtype", "")
                parsed = json.loads(content) if kind in ("PATCH-DOC", "PULL-DOC-REPLY", "ERROR", "ACK", "OK") else {}
                if kind == "ERROR":
                    self.errors.append(str(parsed.get("text", parsed))[:200])
                self.queue.put_nowait(Msg(kind, parsed, t, header))
        except Exception as exc:  # closed: the waiters time out or see the closed socket
            if not isinstance(exc, asyncio.CancelledError):
                self.errors.append(f"reader stopped: {type(exc).__name__}: {exc}")
            return

    async def send(self, msgtype: str, content: dict) -> None:
        header = {"msgid": uuid.uuid4().hex[:16], "msgtype": msgtype}
        await self.ws.send(json.dumps(header))
        await self.ws.send("{}")
        await self.ws.send(json.dumps(content))

    async def expect(self, msgtype: str, timeout: float) -> Msg:
        deadline = time.perf_counter() + timeout
        while True:
            left = deadline - time.perf_counter()
            if left <= 0:
                raise TimeoutError(f"no {msgtype} within {timeout:g} s")
            msg = await asyncio.wait_for(self.queue.get(), left)
            if msg.msgtype == msgtype:
                return msg

    def drain(self) -> None:
        while not self.queue.empty():
            self.queue.get_nowait()

    async def release(self, name: str, value, timeout: float) -> tuple[float, float | None]:
        """Let go of slider `name` at `value`; (response s, curves s or None). Raises TimeoutError."""
        sid = self.ids["sliders"][name]
        self.drain()
        events = [{"kind": "ModelChanged", "model": {"id": sid}, "attr": attr, "new": value}
                  for attr in ("value", "value_throttled")]  # what bokehjs sends when a drag ends
        t0 = time.perf_counter()
        await self.send("PATCH-DOC", {"events": events})
        self.values[name] = value
        response = curves = None
        deadline = t0 + timeout
        watched_response = {self.ids["readouts"], *self.ids["lanes"]}
        while curves is None:
            left = deadline - time.perf_counter()
            if left <= 0:
                if response is None:
                    raise TimeoutError(f"no response to {name}={value} within {timeout:g} s")
                break
            try:
                msg = await asyncio.wait_for(self.queue.get(), left)
            except asyncio.TimeoutError:
                continue
            if msg.msgtype != "PATCH-DOC":
                continue
            touched = {ev.get("model", {}).get("id") for ev in msg.content.get("events", [])
                       if isinstance(ev.get("model"), dict)}
            if response is None and touched & watched_response:
                response = msg.t - t0
            if touched & self.ids["curves"]:
                curves = msg.t - t0
                if response is None:
                    response = curves
        return response, curves

    async def close(self) -> None:
        if self.ws is not None:
            try:
                await asyncio.wait_for(self.ws.close(), 5)
            except Exception:
                pass
        if self.reader is not None:
            self.reader.cancel()


# -- the phases --------------------------------------------------------------------------------------
def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    xs = sorted(values)
    k = (len(xs) - 1) * q / 100
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def new_value(rng: random.Random, name: str, current):
    while True:
        v = rng.randint(1, 1024) if name == "max_num_seqs" else rng.randint(2, 160) / 2
        if v != current:
            return v


async def open_many(fleet, n: int, concurrency: int, timeout: float, query: str = "") -> tuple[list, list, int]:
    sem = asyncio.Semaphore(concurrency)
    sessions, times, failed = [], [], 0

    async def one(i):
        nonlocal failed
        async with sem:
            s = Session(fleet.url_for(i), query)
            try:
                times.append(await s.open(timeout))
                sessions.append(s)
            except Exception as exc:
                failed += 1
                print(f"  session {i} failed to open: {type(exc).__name__}: {exc}", file=sys.stderr)
                await s.close()

    await asyncio.gather(*(one(i) for i in range(n)))
    return sessions, times, failed


async def steady(sessions, args, rng_seed: int) -> dict:
    lat, curves, timeouts = [], [], 0
    stop_at = time.monotonic() + args.phase_limit

    async def student(i, s):
        nonlocal timeouts
        rng = random.Random(rng_seed * 1000 + i)
        await asyncio.sleep(rng.uniform(0, args.think_max))  # students do not move in lockstep
        for k in range(args.updates):
            if time.monotonic() > stop_at:
                return
            name = ("max_num_seqs", "pool_gib")[k % 2]
            if not await timed_release(s, name, rng, args, lat, curves):
                timeouts += 1
            await asyncio.sleep(rng.uniform(args.think_min, args.think_max))

    t0 = time.perf_counter()
    await asyncio.gather(*(student(i, s) for i, s in enumerate(sessions)))
    wall = time.perf_counter() - t0
    return {"lat": lat, "curves": curves, "timeouts": timeouts, "wall": wall}


async def timed_release(s, name: str, rng: random.Random, args, lat: list, curves: list) -> bool:
    """Release one slider at a fresh value; record its latencies. False if the server did not answer in time."""
    try:
        r, c = await s.release(name, new_value(rng, name, s.values.get(name)), args.update_timeout)
    except (TimeoutError, asyncio.TimeoutError):
        return False
    lat.append(r)
    if c is not None:
        curves.append(c)
    return True


async def burst(sessions, args, rng_seed: int) -> dict:
    lat, curves, timeouts = [], [], 0
    for b in range(args.bursts):
        name = ("max_num_seqs", "pool_gib")[b % 2]

        async def one(i, s):
            nonlocal timeouts
            rng = random.Random(rng_seed * 7919 + b * 1000 + i)
            if not await timed_release(s, name, rng, args, lat, curves):
                timeouts += 1

        await asyncio.gather(*(one(i, s) for i, s in enumerate(sessions)))
        await asyncio.sleep(1.0)
    return {"lat": lat, "curves": curves, "timeouts": timeouts}


CLASS_STEPS = (64, 8, 512, 128)  # --max-num-seqs values the guided steps visit


async def class_burst(sessions, args) -> dict:
    """Every session releases --max-num-seqs at the same instant to the same value, --bursts times.

    The burst phase left each session at a pool of its own; a class following the guided steps is at one
    state, so every session first puts the pool back where the page opened (untimed, a few at a time)."""
    lat, curves, timeouts = [], [], 0
    align = asyncio.Semaphore(4)

    async def back(s):
        async with align:
            start = s.ids["start"].get("pool_gib")
            if start is not None and s.values.get("pool_gib", start) != start:
                try:
                    await s.release("pool_gib", start, args.update_timeout)
                except (TimeoutError, asyncio.TimeoutError):
                    pass

    await asyncio.gather(*(back(s) for s in sessions))
    await asyncio.sleep(1.0)
    for b in range(args.bursts):
        value = CLASS_STEPS[b % len(CLASS_STEPS)]

        async def one(s):
            nonlocal timeouts
            try:
                r, c = await s.release("max_num_seqs", value, args.update_timeout)
            except (TimeoutError, asyncio.TimeoutError):
                timeouts += 1
                return
            lat.append(r)
            if c is not None:
                curves.append(c)

        await asyncio.gather(*(one(s) for s in sessions if s.values.get("max_num_seqs") != value))
        await asyncio.sleep(1.0)
    return {"lat": lat, "curves": curves, "timeouts": timeouts}


async def flood(sessions, args) -> dict:
    """One page sends `--flood` distinct max_num_seqs values 10 ms apart (a script, or a stuck key) while
    ten other pages release sliders as usual: does the flood queue up work that the others wait behind?"""
    flooder, others = sessions[0], sessions[1:11]
    sid = flooder.ids["sliders"]["max_num_seqs"]
    flooder.drain()
    lat: list[float] = []

    async def neighbour(i, s):
        rng = random.Random(100 + i)
        for _ in range(3):
            await asyncio.sleep(rng.uniform(0.0, 1.0))
            try:
                value = new_value(rng, "max_num_seqs", s.values.get("max_num_seqs"))
                response, _ = await s.release("max_num_seqs", value, args.update_timeout)
                lat.append(response)
            except TimeoutError:
                lat.append(float("inf"))

    values = [1024 - i for i in range(args.flood)]
    neighbours = [asyncio.create_task(neighbour(i, s)) for i, s in enumerate(others)]
    t0 = time.perf_counter()
    for v in values:
        await flooder.send("PATCH-DOC", {"events": [{"kind": "ModelChanged", "model": {"id": sid},
                                                     "attr": "value_throttled", "new": v}]})
        await asyncio.sleep(0.01)
    sent = time.perf_counter()
    await asyncio.gather(*neighbours)
    updates, last_update, shown = 0, sent, None
    while True:  # the flooder's readout updates, until the server has been quiet for 3 s
        try:
            msg = await asyncio.wait_for(flooder.queue.get(), 3.0)
        except asyncio.TimeoutError:
            break
        for ev in msg.content.get("events", []) if msg.msgtype == "PATCH-DOC" else []:
            if isinstance(ev.get("model"), dict) and ev["model"].get("id") == flooder.ids["readouts"]:
                updates += 1
                last_update = msg.t
                found = re.search(r'of ([\d,]+) slots', str(ev.get("new", "")))
                shown = int(found.group(1).replace(",", "")) if found else shown
    return {"sent": len(values), "send_s": sent - t0, "updates": updates, "lat": lat,
            "settled_s": max(0.0, last_update - sent), "final_ok": shown == values[-1], "shown": shown}


async def cycles(fleet: "Fleet", args) -> dict:
    samples = [(0, fleet.rss())]
    failed = 0
    sem = asyncio.Semaphore(args.cycle_concurrency)
    stop_at = time.monotonic() + args.phase_limit * 4
    done = 0

    async def one(i):
        nonlocal failed, done
        async with sem:
            if time.monotonic() > stop_at:
                return
            s = Session(fleet.url_for(i))
            try:
                await s.open(args.update_timeout)
            except Exception:
                failed += 1
            finally:
                await s.close()
            done += 1

    t0 = time.perf_counter()
    for start in range(0, args.cycles, args.sample_every):
        await asyncio.gather(*(one(i) for i in range(start, min(start + args.sample_every, args.cycles))))
        samples.append((done, fleet.rss()))
    wall = time.perf_counter() - t0
    # Closed sessions are discarded after --unused-session-lifetime, checked every --check-unused-sessions.
    await asyncio.sleep(args.settle)
    after_cleanup = fleet.rss()
    return {"samples": samples, "failed": failed, "wall": wall, "after_cleanup": after_cleanup, "done": done}


class Fleet:
    """One server, or K independent ones with sessions pinned round-robin (what a sticky proxy does)."""

    def __init__(self, args):
        self.servers = [Server(args.num_threads, args.server_args, args.start_timeout,
                               f"{args.server_log}.{k}" if args.server_log and args.processes > 1 else args.server_log)
                        for k in range(args.processes)]

    def start(self) -> None:
        for s in self.servers:
            s.start()
        self.start_s = max(s.start_s for s in self.servers)

    def url_for(self, i: int) -> str:
        return self.servers[i % len(self.servers)].url

    @property
    def command(self) -> str:
        cmd = self.servers[0].command
        return cmd if len(self.servers) == 1 else f"{len(self.servers)} x [{cmd}] (own ports, sessions pinned)"

    def rss(self) -> float:
        return sum(s.rss() for s in self.servers)

    def cpu(self) -> float:
        return sum(s.cpu() for s in self.servers)

    def alive(self) -> bool:
        return all(s.alive() for s in self.servers)

    @property
    def errors(self) -> int:
        return sum(s.errors for s in self.servers)

    @property
    def tracebacks(self) -> int:
        return sum(s.tracebacks for s in self.servers)

    @property
    def problems(self) -> list[str]:
        return [line for s in self.servers for line in s.problems]

    def stop(self) -> None:
        for s in self.servers:
            s.stop()


def slope(values: list[float]) -> float:
    """Least-squares growth per step of `values` (0 for fewer than two)."""
    if len(values) < 2:
        return 0.0
    xs = range(len(values))
    mx, my = statistics.fmean(xs), statistics.fmean(values)
    return sum((x - mx) * (y - my) for x, y in zip(xs, values)) / sum((x - mx) ** 2 for x in xs)


async def main_async(args) -> int:
    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(max_workers=max(8, args.open_concurrency)))
    fleet = Fleet(args)
    print(f"server: {fleet.command}")
    fleet.start()
    rows: list[tuple[str, str, str, str]] = []
    ms = lambda xs, q: f"{1000 * pct(xs, q):.0f}"  # noqa: E731
    goal = lambda ok: "ok" if ok else "MISSED"  # noqa: E731
    # The server's CPU time over a phase (its idle pages included) divided by the releases answered in it.
    per_release = lambda cpu, ph: f"{1000 * cpu / max(len(ph['lat']), 1):.1f} ms ({cpu:.1f} s)"  # noqa: E731
    try:
        print(f"  started in {fleet.start_s:.1f} s; RSS {fleet.rss():.0f} MiB")
        # Warm-up: the first sessions of a process pay one-off costs (templates, caches) that are not per
        # session. They stay in the baseline (closed, not yet discarded) and so cancel out of the difference.
        warm, _, _ = await open_many(fleet, 2 * len(fleet.servers), 2 * len(fleet.servers), args.update_timeout)
        for s in warm:
            await s.release("max_num_seqs", 64, args.update_timeout)
            await s.close()
        await asyncio.sleep(args.idle_wait)
        base = fleet.rss()
        print(f"  baseline RSS {base:.1f} MiB")

        t0 = time.perf_counter()
        sessions, open_times, open_failed = await open_many(fleet, args.sessions, args.open_concurrency,
                                                            args.update_timeout)
        open_wall = time.perf_counter() - t0
        print(f"  opened {len(sessions)}/{args.sessions} sessions in {open_wall:.1f} s: open p50 "
              f"{pct(open_times, 50):.2f} s, p95 {pct(open_times, 95):.2f} s")
        await asyncio.sleep(args.idle_wait)
        idle = fleet.rss()
        per_session = (idle - base) / max(len(sessions), 1)
        print(f"  {len(sessions)} idle sessions: RSS {idle:.1f} MiB, {per_session:.2f} MiB per session")

        cpu0 = fleet.cpu()
        st = await steady(sessions, args, 1)
        cpu_steady = fleet.cpu() - cpu0
        print(f"  steady: {len(st['lat'])} releases in {st['wall']:.0f} s, {st['timeouts']} timed out; "
              f"response p50 {ms(st['lat'], 50)} ms, p95 {ms(st['lat'], 95)} ms")
        after_steady = fleet.rss()
        cpu0 = fleet.cpu()
        bu = await burst(sessions, args, 2)
        cpu_burst = fleet.cpu() - cpu0
        print(f"  burst: {len(bu['lat'])} releases, {bu['timeouts']} timed out; "
              f"response p50 {ms(bu['lat'], 50)} ms, p95 {ms(bu['lat'], 95)} ms")
        cpu0 = fleet.cpu()
        cl = await class_burst(sessions, args)
        cpu_class = fleet.cpu() - cpu0
        print(f"  class burst: {len(cl['lat'])} releases, {cl['timeouts']} timed out; "
              f"response p50 {ms(cl['lat'], 50)} ms, p95 {ms(cl['lat'], 95)} ms")
        fl = await flood(sessions, args)
        print(f"  flood: {fl['sent']} changes from one page in {fl['send_s']:.1f} s -> {fl['updates']} updates, "
              f"settled {fl['settled_s']:.1f} s after the last; neighbours p95 {ms(fl['lat'], 95)} ms")
        errors = [e for s in sessions for e in s.errors]
        for s in sessions:
            await s.close()

        cy = await cycles(fleet, args)
        print("  cycles: " + ", ".join(f"{n}: {r:.0f} MiB" for n, r in cy["samples"])
              + f"; {args.settle:.0f} s later {cy['after_cleanup']:.0f} MiB")
        # The first cycles fill the pool of closed-but-not-yet-discarded sessions (--unused-session-lifetime
        # worth of them) and the allocator's arenas; over the second half the RSS must stay level.
        half = [r for n, r in cy["samples"] if n >= cy["done"] / 2]
        growth = slope(half)
        flat = growth < 2.0 and (not half or cy["after_cleanup"] <= max(half) + 5)
        rate = len(st["lat"]) / st["wall"] if st["wall"] else float("nan")

        rows = [
            ("server", fleet.command, "", ""),
            ("CPU cores (client and server share them)", f"{len(os.sched_getaffinity(0))}", "", ""),
            ("server start (incl. --warm)", f"{fleet.start_s:.1f} s", "", ""),
            ("sessions opened / failed", f"{len(sessions)} / {open_failed}", "", ""),
            (f"  open ({args.open_concurrency} at a time): p50 / p95 / all",
             f"{pct(open_times, 50):.2f} / {pct(open_times, 95):.2f} / {open_wall:.1f} s", "", ""),
            (f"steady: releases (think {args.think_min:g}-{args.think_max:g} s)",
             f"{len(st['lat'])} in {st['wall']:.0f} s ({rate:.1f}/s)", "", ""),
            ("  response p50 / p95 / max", f"{ms(st['lat'], 50)} / {ms(st['lat'], 95)} / {ms(st['lat'], 100)} ms",
             "p95 < 1000 ms", goal(pct(st["lat"], 95) < 1.0 and st["timeouts"] == 0)),
            ("  curves p50 / p95", f"{ms(st['curves'], 50)} / {ms(st['curves'], 95)} ms", "", ""),
            ("  server CPU per release", per_release(cpu_steady, st), "", ""),
            ("  timed out", f"{st['timeouts']}", "0", goal(st["timeouts"] == 0)),
            (f"burst: all {len(sessions)} at once, {args.bursts} times", f"{len(bu['lat'])} releases", "", ""),
            ("  response p50 / p95 / max", f"{ms(bu['lat'], 50)} / {ms(bu['lat'], 95)} / {ms(bu['lat'], 100)} ms",
             "(worst case)", ""),
            ("  curves p50 / p95", f"{ms(bu['curves'], 50)} / {ms(bu['curves'], 95)} ms", "", ""),
            ("  server CPU per release", per_release(cpu_burst, bu), "", ""),
            ("  timed out", f"{bu['timeouts']}", "0", goal(bu["timeouts"] == 0)),
            (f"class burst: all {len(sessions)} at once to the same state, {args.bursts} times",
             f"{len(cl['lat'])} releases", "", ""),
            ("  response p50 / p95 / max", f"{ms(cl['lat'], 50)} / {ms(cl['lat'], 95)} / {ms(cl['lat'], 100)} ms",
             "p95 <= 1000 ms", goal(pct(cl["lat"], 95) <= 1.0 and cl["timeouts"] == 0)),
            ("  curves p50 / p95", f"{ms(cl['curves'], 50)} / {ms(cl['curves'], 95)} ms", "", ""),
            ("  server CPU per release", per_release(cpu_class, cl), "", ""),
            (f"flood: one page sends {fl['sent']} changes, 10 ms apart",
             f"{fl['updates']} updates computed, last shows {fl['shown']}", "the last value",
             goal(fl["final_ok"])),
            ("  settled after the last change", f"{fl['settled_s']:.1f} s", "", ""),
            ("  10 neighbours' responses p50 / p95", f"{ms(fl['lat'], 50)} / {ms(fl['lat'], 95)} ms", "p95 < 1000 ms",
             goal(pct(fl["lat"], 95) < 1.0)),
            ("RSS baseline (after warm-up)", f"{base:.0f} MiB", "", ""),
            (f"RSS with {len(sessions)} idle sessions", f"{idle:.0f} MiB", "", ""),
            ("  per idle session", f"{per_session:.2f} MiB ({per_session * 1.048576:.2f} MB)", "< 5 MB",
             goal(per_session * 1.048576 < 5)),
            ("RSS after steady + burst (runs cached)", f"{after_steady:.0f} MiB", "", ""),
            (f"open/close cycles ({args.cycle_concurrency} at a time)",
             f"{cy['done']} in {cy['wall']:.0f} s, {cy['failed']} failed", "", ""),
            (f"  RSS every {args.sample_every} cycles", " ".join(f"{r:.0f}" for _, r in cy["samples"]) + " MiB",
             "", ""),
            ("  growth over the second half", f"{growth:+.1f} MiB per {args.sample_every} cycles", "flat",
             goal(flat)),
            (f"  {args.settle:.0f} s after the last close", f"{cy['after_cleanup']:.0f} MiB", "", ""),
            ("server ERROR lines / tracebacks / alive", f"{fleet.errors} / {fleet.tracebacks} / {fleet.alive()}",
             "0 / 0 / True", goal(fleet.errors == 0 and fleet.tracebacks == 0 and fleet.alive())),
            ("protocol ERROR replies to clients", f"{len(errors)}", "0", goal(not errors)),
        ]
        return 0 if all(r[3] != "MISSED" for r in rows) else 1
    finally:
        fleet.stop()
        if rows:
            width = max(len(r[0]) for r in rows)
            vwidth = max(len(r[1]) for r in rows[1:])
            print()
            print(f"{'measure':<{width}}  {'value':<{vwidth}}  {'goal':<14}  result")
            print("-" * (width + vwidth + 30))
            for r in rows:
                if r[0] == "server":
                    print(f"{'server':<{width}}  {r[1]}")
                    continue
                print(f"{r[0]:<{width}}  {r[1]:<{vwidth}}  {r[2]:<14}  {r[3]}".rstrip())
        if fleet.problems:
            print("\nfirst server errors:\n" + "\n".join(fleet.problems[:240]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--sessions", type=int, default=60, help="concurrent sessions (default 60)")
    p.add_argument("--num-threads", type=int, default=0,
                   help="panel serve --num-threads (default 0: no thread pool, the recommendation; see README)")
    p.add_argument("--server-args", default=RECOMMENDED, help=f"other panel serve flags (default: {RECOMMENDED!r})")
    p.add_argument("--processes", type=int, default=1,
                   help="independent servers on their own ports, sessions pinned round-robin (default 1)")
    p.add_argument("--updates", type=int, default=8, help="slider releases per session in the steady phase")
    p.add_argument("--think-min", type=float, default=2.0, help="seconds between a session's releases, at least")
    p.add_argument("--think-max", type=float, default=8.0, help="... and at most")
    p.add_argument("--bursts", type=int, default=3, help="times every session releases at the same instant")
    p.add_argument("--flood", type=int, default=300, help="changes one page sends 10 ms apart in the flood phase")
    p.add_argument("--cycles", type=int, default=500, help="sessions opened and closed for the leak check")
    p.add_argument("--sample-every", type=int, default=100, help="RSS sample interval, in cycles")
    p.add_argument("--cycle-concurrency", type=int, default=4, help="sessions opening at once during the cycles")
    p.add_argument("--open-concurrency", type=int, default=8, help="sessions opening at once (the 60)")
    p.add_argument("--idle-wait", type=float, default=3.0, help="seconds idle before reading RSS")
    p.add_argument("--settle", type=float, default=90.0,
                   help="seconds after the cycles for closed sessions to be discarded (> lifetime + check interval)")
    p.add_argument("--update-timeout", type=float, default=30.0, help="seconds one open or release may take")
    p.add_argument("--phase-limit", type=float, default=180.0, help="seconds one phase may take (cycles: 4x)")
    p.add_argument("--start-timeout", type=float, default=90.0, help="seconds for the server to start")
    p.add_argument("--server-log", default=None, help="write the server's whole log to this file")
    p.add_argument("--deadline", type=float, default=1800.0, help="seconds for the whole run")
    args = p.parse_args()
    if not (11 <= args.sessions <= 500 and 1 <= args.flood <= 5000 and 0 <= args.cycles <= 5000 and 0 <= args.updates <= 100
            and 0 <= args.bursts <= 20 and args.sample_every >= 1 and 1 <= args.processes <= 8
            and 0 <= args.settle <= 600 and 0 < args.deadline <= 7200):
        p.error("out of the bounded ranges: sessions 11-500, flood 1-5000, cycles 0-5000, updates 0-100, bursts 0-20, "
                "processes 1-8, settle 0-600 s, deadline up to 7200 s")
    try:
        rc = asyncio.run(asyncio.wait_for(main_async(args), args.deadline))
    except asyncio.TimeoutError:
        print(f"stopped: the run passed --deadline {args.deadline:g} s", file=sys.stderr)
        rc = 2
    sys.exit(rc)


if __name__ == "__main__":
    main()
