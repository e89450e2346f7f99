"""What one page open sends, and how many copies of assets/explorable.css ride along, without a browser.

Starts `panel serve app.py` on 127.0.0.1 (a free port, no extra flags), then does what a browser tab does:
GET /app (the page's HTML), open /app/ws, PULL-DOC (the whole document as JSON), say "document_ready" and
collect the PATCH-DOC messages that follow for --settle seconds (Panel's onload work, the URL rewrite).
It prints the bytes of each part (websocket text frames as sent: `panel serve` compresses websocket
messages only with --websocket-compression-level, so without it these are the bytes on the wire; the
HTML is as served, before any gzip) and how many times the full CSS text appears in each. A copy counts wherever the complete sheet text appears: inside
a JSON string value (a Bokeh stylesheet) or verbatim in the HTML (Panel's global_css <style>).

It also serialises the same page built in-process (the PULL-DOC-REPLY Bokeh would send for it), which
needs no server, counts its models, and times the server CPU that building and serialising one page costs
(--builds pages in one process; a page open is mostly this).

    python benchmarks/page_payload.py            # served + in-process
    python benchmarks/page_payload.py --no-serve # in-process only (with the server CPU one page costs)
    python benchmarks/page_payload.py --query '?max_num_seqs=64&pool_gib=1&spread=32&max_num_batched_tokens=1024'
"""
from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _load_test():
    """benchmarks/load_test.py's server runner and HTTP helpers (loopback only)."""
    spec = importlib.util.spec_from_file_location("cb_load_test", ROOT / "benchmarks" / "load_test.py")
    module = sys.modules.setdefault(spec.name, importlib.util.module_from_spec(spec))
    if not hasattr(module, "Server"):
        spec.loader.exec_module(module)
    return module


def css_text() -> str:
    return (ROOT / "assets" / "explorable.css").read_text()


def json_copies(node, css: str) -> int:
    """Strings in a parsed JSON tree that hold the full CSS text."""
    if isinstance(node, str):
        return node.count(css)
    if isinstance(node, dict):
        return sum(json_copies(v, css) for v in node.values())
    if isinstance(node, list):
        return sum(json_copies(v, css) for v in node)
    return 0


def page_message():
    """A page built as a served session builds it (its document current), and the PULL-DOC-REPLY text the
    server would send for it: (document, text)."""
    import panel as pn
    from bokeh.document import Document
    from bokeh.protocol import Protocol
    from panel.io.state import set_curdoc

    from explorable.page.layout import build_app

    doc = Document()
    with set_curdoc(doc):
        doc.add_root(pn.panel(build_app(sync=False)).get_root(doc))
        text = Protocol().create("PULL-DOC-REPLY", "request-id", doc).content_json
    return doc, text


def in_process(builds: int = 0) -> dict:
    """The page's document serialised by Bokeh, without a server; with `builds`, the server CPU one page open
    costs (building its views and models, and the PULL-DOC-REPLY), timed over that many more pages."""
    import gc
    import statistics

    from explorable.page.layout import configure

    configure()
    doc, text = page_message()  # also the first page of the process: imports and caches are warm after it
    out = {"bytes": len(text.encode()), "copies": json_copies(json.loads(text), css_text()), "models": len(doc.models)}
    cpu = []
    for _ in range(builds):
        gc.collect()  # the pages before this one are garbage: each page pays only for its own
        t0 = time.thread_time()  # this thread's CPU: the server's event loop (the curves' worker runs beside it)
        page_message()
        cpu.append(time.thread_time() - t0)
    if cpu:
        out["cpu_ms"] = (1000 * statistics.median(cpu), 1000 * min(cpu))
    return out


async def served(settle: float, timeout: float, query: str = "") -> dict:
    lt = _load_test()
    from websockets.asyncio.client import connect

    css = css_text()
    server = lt.Server(num_threads=0, extra="", start_timeout=90)
    server.start()
    try:
        t0 = time.perf_counter()
        status, page = lt.http_get(f"{server.url}/app{query}", timeout)
        assert status == 200, status
        token = lt.TOKEN.search(page).group(1)
        frames: dict[str, list[bytes]] = {}
        host = server.url.split("//", 1)[1]
        async with connect(f"ws://{host}/app/ws", subprotocols=["bokeh", token], origin=server.url, proxy=None,
                           compression=None, max_size=256 << 20, open_timeout=timeout) as ws:

            async def send(msgtype: str, content: dict) -> None:
                for part in ({"msgid": uuid.uuid4().hex[:16], "msgtype": msgtype}, {}, content):
                    await ws.send(json.dumps(part))

            async def read_one(deadline: float):
                header = await asyncio.wait_for(ws.recv(), max(deadline - time.perf_counter(), 0.001))
                await ws.recv()  # metadata
                content = await ws.recv()
                for _ in range(2 * int(json.loads(header).get("num_buffers", 0) or 0)):
                    await ws.recv()
                kind = json.loads(header)["msgtype"]
                raw = content.encode() if isinstance(content, str) else content
                frames.setdefault(kind, []).append(raw)
                return kind, raw

            deadline = time.perf_counter() + timeout
            while (await read_one(deadline))[0] != "ACK":
                pass
            await send("PULL-DOC-REQ", {})
            while (await read_one(deadline))[0] != "PULL-DOC-REPLY":
                pass
            await send("PATCH-DOC", {"events": [lt.DOCUMENT_READY]})
            settle_until = time.perf_counter() + settle
            while True:
                try:
                    await read_one(settle_until)
                except (asyncio.TimeoutError, TimeoutError):
                    break
        pull = frames["PULL-DOC-REPLY"][0]
        patches = frames.get("PATCH-DOC", [])
        return {
            "html_bytes": len(page.encode()), "html_copies": page.count(css),
            "pull_bytes": len(pull), "pull_copies": json_copies(json.loads(pull), css),
            "patch_count": len(patches), "patch_bytes": sum(len(p) for p in patches),
            "patch_copies": sum(json_copies(json.loads(p), css) for p in patches),
            "seconds": time.perf_counter() - t0, "tracebacks": server.tracebacks,
        }
    finally:
        server.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--no-serve", action="store_true", help="only the in-process serialisation")
    ap.add_argument("--settle", type=float, default=3.0, help="seconds to collect patches after document_ready")
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--query", default="", help="the link's query, e.g. '?max_num_seqs=64&pool_gib=1'")
    ap.add_argument("--builds", type=int, default=10, help="pages built in-process to time the server's CPU per page")
    args = ap.parse_args()
    css = css_text()
    print(f"assets/explorable.css: {len(css.encode()):,} bytes")
    local = in_process(args.builds)
    print(f"in-process PULL-DOC-REPLY: {local['bytes']:>9,} bytes, {local['copies']} full copies of the CSS, "
          f"{local['models']} models")
    if "cpu_ms" in local:
        print(f"server CPU per page built: {local['cpu_ms'][0]:>6.0f} ms median, {local['cpu_ms'][1]:.0f} ms least "
              f"({args.builds} pages built in one process, views + models + PULL-DOC-REPLY)")
    if args.no_serve:
        return
    r = asyncio.run(served(args.settle, args.timeout, args.query))
    if args.query:
        print(f"page opened at /app{args.query}")
    total = r["html_bytes"] + r["pull_bytes"] + r["patch_bytes"]
    print(f"GET /app HTML:             {r['html_bytes']:>9,} bytes, {r['html_copies']} full copies")
    print(f"PULL-DOC-REPLY:            {r['pull_bytes']:>9,} bytes, {r['pull_copies']} full copies")
    print(f"PATCH-DOC x{r['patch_count']:<3} ({args.settle:g} s):   {r['patch_bytes']:>9,} bytes, "
          f"{r['patch_copies']} full copies")
    print(f"one page open, total:      {total:>9,} bytes, "
          f"{r['html_copies'] + r['pull_copies'] + r['patch_copies']} full copies")
    if r["tracebacks"]:
        print(f"server logged {r['tracebacks']} traceback(s)")


if __name__ == "__main__":
    main()
