"""What a few scripted tabs can do to a classroom server: `panel serve app.py` with the README's flags, on loopback.

One probe student releases the --max-num-seqs slider once a second, at values the class has already visited
(a class follows the same steps), before, during and after the attack, and the script reports what the probe
waits. The attack, in three parts:

  flood    --tabs scripted tabs each send a slider value nobody has asked for (a random float on
           spread, pool_gib, declared_multiple or an integer on --max-num-seqs) every --interval s, for --flood s;
  data     --data-tabs tabs replace every chart's data source with --data-numbers numbers each (JSON, under
           Bokeh's 20 MB message limit unless the server sets a lower one);
  strings  --strings messages carrying a --string-mib MiB string as a slider value;
  uploads  --upload-tabs tabs each upload the largest file "Your workload" reads (2 MB, 100,000 rows) every
           --upload-interval s for --uploads s, and one sends a file over the limit.

Printed: the probe's response p50/p95 before, during the flood and during the uploads (goal p95 <= 1 s each),
the server's memory growth
(goal <= 300 MB), the growth of its log (goal <= 1 MB) and how long after the attack the server is back to
normal (goal <= 5 s: the probe answered as fast as before the attack and the server's CPU back near idle).
Sessions are browser-free tabs from benchmarks/load_test.py; the server runs in its own process group and is
killed on the way out; the whole run is bounded by --deadline. Exit status 0 when every goal is met, 1 if not.

    python benchmarks/attack.py                         # ~2 minutes
    python benchmarks/attack.py --server-args "--warm"  # compare: without the README's flags
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from load_test import RECOMMENDED as README_FLAGS  # noqa: E402  (the README's classroom flags)
from load_test import Server, Session, largest_upload, open_many, pct  # noqa: E402  (the load test's server and tabs)
PROBE_VALUES = (1, 8, 32, 64, 128, 256, 512)  # the --max-num-seqs stops the guided steps use
SLIDERS = ("spread", "pool_gib", "declared_multiple", "max_num_seqs")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, in seconds (0 if it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


class Monitor:
    """Samples the server's RSS and CPU every 0.25 s in the background."""

    def __init__(self, server: Server):
        self.server, self.samples = server, []  # (t, rss MiB, cpu s)
        self.task: asyncio.Task | None = None

    async def run(self) -> None:
        while True:
            self.samples.append((time.monotonic(), self.server.rss(), cpu_seconds(self.server.proc.pid)))
            await asyncio.sleep(0.25)

    def start(self) -> None:
        self.task = asyncio.create_task(self.run())

    def peak_rss(self, t0: float, t1: float) -> float:
        return max((r for t, r, _ in self.samples if t0 <= t <= t1), default=0.0)

    def cpu_share(self, t0: float, t1: float) -> float:
        inside = [(t, c) for t, _, c in self.samples if t0 <= t <= t1]
        if len(inside) < 2:
            return float("nan")
        return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


class Probe:
    """The student: one release a second at visited values; records (time sent, response s)."""

    def __init__(self, session: Session, timeout: float):
        self.session, self.timeout, self.records = session, timeout, []
        self.stop = False

    async def run(self) -> None:
        i = 0
        while not self.stop:
            started = time.monotonic()
            value = PROBE_VALUES[i % len(PROBE_VALUES)]
            i += 1
            try:
                response, _ = await self.session.release("max_num_seqs", value, self.timeout)
            except (TimeoutError, asyncio.TimeoutError):
                response = float("inf")
            self.records.append((started, response))
            await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - started)))

    def between(self, t0: float, t1: float) -> list[float]:
        return [r for t, r in self.records if t0 <= t < t1]


async def send_raw(session: Session, msgtype: str, content: str) -> bool:
    """A message with a prebuilt content string (a 15 MB payload is built once, not per message)."""
    try:
        await session.ws.send(json.dumps({"msgid": uuid.uuid4().hex[:16], "msgtype": msgtype}))
        await session.ws.send("{}")
        await session.ws.send(content)
        return True
    except Exception:  # the server closed this connection (a message over its size limit)
        return False


def uncached_value(rng: random.Random, name: str):
    if name == "max_num_seqs":
        return rng.randint(1, 1024)
    lo, hi = {"spread": (1.0, 32.0), "pool_gib": (1.0, 80.0), "declared_multiple": (1.0, 8.0)}[name]
    return lo + (hi - lo) * rng.random() + 1e-7 * rng.random()  # never the same float twice


async def flood(tabs: list[Session], seconds: float, interval: float) -> int:
    """Every tab releases a slider at a value nobody asked for, every `interval` s, for `seconds`."""
    sent = 0

    async def one(k: int, tab: Session):
        nonlocal sent
        rng = random.Random(k)
        stop_at = time.monotonic() + seconds
        while time.monotonic() < stop_at:
            name = SLIDERS[rng.randrange(len(SLIDERS))]
            value = uncached_value(rng, name)
            events = [{"kind": "ModelChanged", "model": {"id": tab.ids["sliders"][name]}, "attr": attr, "new": value}
                      for attr in ("value", "value_throttled")]
            try:
                await tab.send("PATCH-DOC", {"events": events})
                sent += 1
            except Exception:
                return
            tab.drain()
            await asyncio.sleep(interval)

    await asyncio.gather(*(one(k, t) for k, t in enumerate(tabs)))
    return sent


async def replace_chart_data(tabs: list[Session], numbers: int) -> tuple[int, int]:
    """Each tab sends one ColumnDataChanged per chart source, `numbers` numbers per column."""
    column = json.dumps([random.Random(1).randrange(10**6)] * numbers)  # ~7 bytes a number
    sent = refused = 0
    for tab in tabs:
        for source in sorted(tab.ids["lanes"] | tab.ids["curves"]):
            content = ('{"events": [{"kind": "ColumnDataChanged", "model": {"id": "%s"}, "attr": "data", '
                       '"data": {"type": "map", "entries": [["x", %s], ["y", %s]]}, "cols": ["x", "y"]}]}'
                       % (source, column, column))
            if await send_raw(tab, "PATCH-DOC", content):
                sent += 1
            else:
                refused += 1
                break
        tab.drain()
    return sent, refused


async def oversized_strings(tabs: list[Session], count: int, mib: float) -> tuple[int, int]:
    text = "x" * int(mib * 2**20)
    sent = refused = 0
    for i in range(count):
        tab = tabs[i % len(tabs)]
        event = {"kind": "ModelChanged", "model": {"id": tab.ids["sliders"]["max_num_seqs"]},
                 "attr": "value_throttled", "new": text}
        if await send_raw(tab, "PATCH-DOC", json.dumps({"events": [event]})):
            sent += 1
        else:
            refused += 1
    return sent, refused


async def upload_repeatedly(tabs: list[Session], seconds: float, interval: float) -> tuple[int, int]:
    """Each tab uploads the largest file the page reads every `interval` s for `seconds`; then one tab sends a
    file one byte over the page's limit. Returns (uploads sent, connections closed by the server)."""
    content = largest_upload()
    sent = closed = 0

    async def one(tab: Session):
        nonlocal sent, closed
        stop_at = time.monotonic() + seconds
        while time.monotonic() < stop_at:
            try:
                await tab.upload("day.csv", content)
                sent += 1
            except Exception:
                closed += 1
                return
            tab.drain()
            await asyncio.sleep(interval)

    await asyncio.gather(*(one(t) for t in tabs))
    over = content + "QUJD"  # 3 more bytes than the largest: the guard drops it (the browser never sends it)
    try:
        await tabs[0].upload("over.csv", over)
        sent += 1
    except Exception:
        closed += 1
    return sent, closed


class OneServer:
    """What load_test.open_many expects of a fleet."""

    def __init__(self, server: Server):
        self.server = server

    def url_for(self, _i: int) -> str:
        return self.server.url


def back_to_normal(probe: Probe, monitor: Monitor, end: float, normal_s: float, idle_share: float) -> tuple[float, float]:
    """Seconds after `end` until (a) every later probe response is within `normal_s`, (b) the server's CPU share
    over a 1 s window is at most `idle_share`."""
    after = [(t, r) for t, r in probe.records if t >= end]
    latency_ok = next((t - end for i, (t, _) in enumerate(after) if all(r <= normal_s for _, r in after[i:])),
                      float("inf"))
    samples = [(t, c) for t, _, c in monitor.samples if t >= end]
    cpu_ok = float("inf")
    for i, (t, c) in enumerate(samples):
        later = [(t2, c2) for t2, c2 in samples[i:] if t2 - t <= 1.0]
        if len(later) >= 3 and (later[-1][1] - c) / (later[-1][0] - t) <= idle_share:
            cpu_ok = t - end
            break
    return latency_ok, cpu_ok


async def main_async(args) -> int:
    log_path = args.server_log or os.path.join(tempfile.mkdtemp(prefix="cb-attack-"), "server.log")
    server = Server(0, args.server_args, 120, log_path)
    print(f"server: {server.command}\n  log: {log_path}")
    server.start()
    monitor = Monitor(server)
    monitor.start()
    rows: list[tuple[str, str, str, str]] = []
    try:
        fleet = OneServer(server)
        (probe_session,), _, failed = await open_many(fleet, 1, 1, 60)
        for value in PROBE_VALUES:  # the class has visited these states
            await probe_session.release("max_num_seqs", value, 60)
        attackers, _, failed = await open_many(fleet, args.tabs, 4, 60)
        print(f"  opened the probe and {len(attackers)} attacker tabs ({failed} failed)")
        probe = Probe(probe_session, args.timeout)
        probe_task = asyncio.create_task(probe.run())

        await asyncio.sleep(args.baseline)
        rss0, log0, t_flood = server.rss(), os.path.getsize(log_path), time.monotonic()
        print(f"  baseline: probe p95 {pct(probe.between(0, t_flood), 95):.3f} s; RSS {rss0:.0f} MiB")
        sent = await flood(attackers, args.flood, args.interval)
        t_flood_end = time.monotonic()
        print(f"  flood: {sent} messages from {len(attackers)} tabs in {t_flood_end - t_flood:.0f} s; the probe's "
              "releases (s after the start: response ms): " + ", ".join(
                  f"{t - t_flood:.0f}: {1000 * r:.0f}" for t, r in probe.records if t_flood <= t < t_flood_end))
        data_sent, data_refused = await replace_chart_data(attackers[:args.data_tabs], args.data_numbers)
        print(f"  data: {data_sent} chart-data replacements sent, {data_refused} connections closed by the server")
        str_sent, str_refused = await oversized_strings(attackers[args.data_tabs:] or attackers, args.strings,
                                                        args.string_mib)
        print(f"  strings: {str_sent} sent, {str_refused} refused")
        t_uploads, rss_uploads = time.monotonic(), server.rss()
        uploaders = [t for t in attackers[-args.upload_tabs:] if t.ws is not None] if args.upload_tabs else []
        up_sent, up_closed = await upload_repeatedly(uploaders, args.uploads, args.upload_interval)
        await asyncio.sleep(min(10.0, args.after))  # the last files are read and their runs drawn
        t_uploads_end = time.monotonic()
        print(f"  uploads: {up_sent} files of 2 MB from {len(uploaders)} tabs in {t_uploads_end - t_uploads:.0f} s "
              f"({up_closed} connections closed); the probe's releases (s after the start: response ms): " + ", ".join(
                  f"{t - t_uploads:.0f}: {1000 * r:.0f}" for t, r in probe.records if t_uploads <= t < t_uploads_end))
        for tab in attackers:
            await tab.close()
        t_end = time.monotonic()
        await asyncio.sleep(args.after)
        probe.stop = True
        await asyncio.wait_for(probe_task, args.timeout + 5)
        t_done = time.monotonic()
        print("  after: the probe's releases (s after the attack: response ms): " + ", ".join(
            f"{t - t_end:.0f}: {1000 * r:.0f}" for t, r in probe.records if t >= t_end))

        base = probe.between(0, t_flood)
        uploading = probe.between(t_uploads, t_uploads_end)
        during = probe.between(t_flood, t_flood_end)
        attack_all = probe.between(t_flood, t_end)
        normal = max(1.5 * pct(base, 95), 0.25)
        latency_ok, cpu_ok = back_to_normal(probe, monitor, t_end, normal, args.idle_share)
        growth = monitor.peak_rss(t_flood, t_done) - rss0
        settled = server.rss() - rss0
        log_growth = os.path.getsize(log_path) - log0
        ms = lambda xs, q: f"{1000 * pct(xs, q):.0f}"  # noqa: E731
        goal = lambda ok: "ok" if ok else "MISSED"  # noqa: E731
        rows = [
            ("server", server.command, "", ""),
            ("CPU cores (client and server share them)", f"{len(os.sched_getaffinity(0))}", "", ""),
            ("probe before the attack: p50 / p95", f"{ms(base, 50)} / {ms(base, 95)} ms ({len(base)} releases)", "", ""),
            (f"flood: {len(attackers)} tabs, a new value every {args.interval:g} s for {args.flood:g} s",
             f"{sent} messages", "", ""),
            ("  probe during the flood: p50 / p95 / max",
             f"{ms(during, 50)} / {ms(during, 95)} / {ms(during, 100)} ms ({len(during)} releases)", "p95 <= 1000 ms",
             goal(pct(during, 95) <= 1.0)),
            ("  server CPU share during the flood", f"{monitor.cpu_share(t_flood, t_flood_end):.2f} cores", "", ""),
            (f"data: {args.data_tabs} tabs replace every chart's data ({args.data_numbers:,} numbers a column)",
             f"{data_sent} sent, {data_refused} connections closed", "", ""),
            (f"strings: {args.strings} x {args.string_mib:g} MiB as a slider value", f"{str_sent} sent, {str_refused} closed",
             "", ""),
            (f"uploads: {len(uploaders)} tabs, the largest file every {args.upload_interval:g} s for {args.uploads:g} s",
             f"{up_sent} sent, {up_closed} connections closed", "", ""),
            ("  probe during the uploads: p50 / p95 / max",
             f"{ms(uploading, 50)} / {ms(uploading, 95)} / {ms(uploading, 100)} ms ({len(uploading)} releases)",
             "p95 <= 1000 ms", goal(pct(uploading, 95) <= 1.0)),
            ("  server memory growth over the uploads (peak)",
             f"{monitor.peak_rss(t_uploads, t_uploads_end) - rss_uploads:+.0f} MiB", "", ""),
            ("  probe over the whole attack: p50 / p95 / max",
             f"{ms(attack_all, 50)} / {ms(attack_all, 95)} / {ms(attack_all, 100)} ms", "", ""),
            ("server memory: before / peak growth / growth at the end",
             f"{rss0:.0f} MiB / {growth:+.0f} MiB / {settled:+.0f} MiB", "<= 300 MB",
             goal(growth * 1.048576 <= 300)),
            ("server log growth over the attack", f"{log_growth / 1e6:.3f} MB", "<= 1 MB", goal(log_growth <= 1e6)),
            (f"back to normal after the attack (probe within {1000 * normal:.0f} ms)", f"{latency_ok:.1f} s",
             "<= 5 s", goal(latency_ok <= 5)),
            (f"  server CPU under {args.idle_share:g} cores (1 s window)", f"{cpu_ok:.1f} s after", "<= 5 s",
             goal(cpu_ok <= 5)),
            ("server alive / tracebacks in its log", f"{server.alive()} / {server.tracebacks}", "True / 0",
             goal(server.alive() and server.tracebacks == 0)),
        ]
        return 0 if all(r[3] != "MISSED" for r in rows) else 1
    finally:
        if monitor.task:
            monitor.task.cancel()
        server.stop()
        if rows:
            width = max(len(r[0]) for r in rows)
            vwidth = max(len(r[1]) for r in rows[1:])
            print(f"\n{'measure':<{width}}  {'value':<{vwidth}}  {'goal':<14}  result")
            print("-" * (width + vwidth + 30))
            for r in rows:
                if r[0] == "server":
                    print(f"{'server':<{width}}  {r[1]}")
                else:
                    print(f"{r[0]:<{width}}  {r[1]:<{vwidth}}  {r[2]:<14}  {r[3]}".rstrip())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--server-args", default=README_FLAGS, help="panel serve flags (default: %(default)r)")
    p.add_argument("--tabs", type=int, default=20, help="flooding tabs (default: %(default)s)")
    p.add_argument("--interval", type=float, default=0.2, help="seconds between one tab's values (default: %(default)s)")
    p.add_argument("--flood", type=float, default=30.0, help="seconds of flood (default: %(default)s)")
    p.add_argument("--data-tabs", type=int, default=4, help="tabs replacing chart data (default: %(default)s)")
    p.add_argument("--data-numbers", type=int, default=1_000_000,
                   help="numbers per column, two columns per message (default: %(default)s, ~15 MB)")
    p.add_argument("--strings", type=int, default=10, help="oversized string messages (default: %(default)s)")
    p.add_argument("--string-mib", type=float, default=19.0, help="size of each string (default: %(default)s MiB)")
    p.add_argument("--upload-tabs", type=int, default=2, help="tabs uploading the largest file (default: %(default)s)")
    p.add_argument("--uploads", type=float, default=30.0, help="seconds of uploads (default: %(default)s)")
    p.add_argument("--upload-interval", type=float, default=1.0,
                   help="seconds between one tab's uploads (default: %(default)s)")
    p.add_argument("--baseline", type=float, default=10.0, help="seconds of probe before the attack (default: %(default)s)")
    p.add_argument("--after", type=float, default=15.0, help="seconds of probe after the attack (default: %(default)s)")
    p.add_argument("--idle-share", type=float, default=0.3,
                   help="server CPU share counted as back to normal (default: %(default)s cores)")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds one probe release may take (default: %(default)s)")
    p.add_argument("--server-log", default=None, help="write the server's log here (default: a temporary file)")
    p.add_argument("--deadline", type=float, default=600.0, help="seconds for the whole run (default: %(default)s)")
    args = p.parse_args()
    if not (1 <= args.tabs <= 100 and 0.01 <= args.interval <= 10 and 1 <= args.flood <= 300
            and 0 <= args.data_tabs <= args.tabs and 0 <= args.data_numbers <= 5_000_000 and 0 <= args.strings <= 50
            and 0 < args.string_mib <= 50 and 0 < args.deadline <= 1800 and 0 <= args.upload_tabs <= args.tabs
            and 0 <= args.uploads <= 300 and 0.1 <= args.upload_interval <= 60):
        p.error("out of the bounded ranges: tabs 1-100, interval 0.01-10 s, flood 1-300 s, data-tabs <= tabs, "
                "data-numbers <= 5,000,000, strings <= 50, string-mib <= 50, deadline <= 1800 s")
    try:
        rc = asyncio.run(asyncio.wait_for(main_async(args), args.deadline))
    except asyncio.TimeoutError:
        print(f"stopped: the run passed --deadline {args.deadline:g} s", file=sys.stderr)
        rc = 2
    sys.exit(rc)


if __name__ == "__main__":
    main()
