"""A public classroom server's boundaries (issue 15), against one real `panel serve` started the way a locked-down
service account runs it: a copy of the tree whose `kernels/__pycache__` cannot be created, HOME, XDG_CACHE_HOME
and NUMBA_CACHE_DIR pointing under a regular file (/dev/null/x: cannot be created, even by root), session ids
signed with a secret, and the README's classroom flags.

Scripted tabs then do what a browser's page never does: mint their own session token, switch on the disabled
"Measure on a live GPU" toggle, replace a chart's data, send a 2 MB string as a slider value, flood invalid
values, send a value between a slider's steps. Every wait is bounded; the server runs in its own process group.
"""
from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.explorable.served_app import free_port
from tests.explorable.test_serving import HOST, RECOMMENDED, TOKEN, Served, load_test_client

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
websockets = pytest.importorskip("websockets.asyncio.client", reason="the websockets package is not installed")

UNCREATABLE = "/dev/null/x"  # a path under a regular file: no one can create it
SECRET = secrets.token_urlsafe(32)
BROKEN_APP = "from explorable.page.layout import configure\nconfigure()\nraise RuntimeError('this page cannot be built')\n"


def locked_down_env(tree: Path, tmp: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BOKEH_", "NUMBA_"))}
    return {**env, "HOME": UNCREATABLE, "XDG_CACHE_HOME": UNCREATABLE, "NUMBA_CACHE_DIR": UNCREATABLE,
            "TMPDIR": str(tmp), "PYTHONPATH": str(tree), "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1",
            "BOKEH_SECRET_KEY": SECRET}


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> tuple[Path, Path]:
    """A copy of the installable tree that numba cannot write beside, and a writable temporary directory."""
    base = tmp_path_factory.mktemp("readonly")
    copy = base / "tree"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("engine", "kernels", "explorable", "assets"):
        shutil.copytree(ROOT / name, copy / name, ignore=ignore)
    shutil.copy(ROOT / "app.py", copy / "app.py")
    (copy / "broken.py").write_text(BROKEN_APP)
    (copy / "kernels" / "__pycache__").write_text("a file where numba wants a folder")
    tmp = base / "tmp"
    tmp.mkdir()
    return copy, tmp


@pytest.fixture(scope="module")
def server(tree):
    copy, tmp = tree
    port = free_port()
    args = [sys.executable, "-m", "panel", "serve", "app.py", "broken.py", "--port", str(port), "--address", HOST,
            "--allow-websocket-origin", f"{HOST}:{port}", "--session-ids", "signed", *RECOMMENDED]
    proc = subprocess.Popen(args, cwd=copy, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, env=locked_down_env(copy, tmp))
    log: list[str] = []
    ready = threading.Event()

    def pump():
        for line in proc.stdout:
            log.append(line.rstrip("\n"))
            if "Bokeh app running at" in line:
                ready.set()

    threading.Thread(target=pump, daemon=True).start()
    try:
        deadline = time.monotonic() + 120  # numba compiles into the fallback cache: ~10 s on 2 cores
        while not ready.wait(0.2):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail("the locked-down server did not start:\n" + "\n".join(log[-30:]))
        yield Served(port, proc, log)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)


def log_text(server: Served, since: int = 0) -> str:
    return "\n".join(server.log[since:])


async def tab(server: Served, query: str = ""):
    session = load_test_client().Session(server.url, query)
    await session.open(60)
    return session


def send_changes(session, *events) -> asyncio.Future:
    return session.send("PATCH-DOC", {"events": list(events)})


def changed(model_id: str, attr: str, new) -> dict:
    return {"kind": "ModelChanged", "model": {"id": model_id}, "attr": attr, "new": new}


async def pulled(session) -> dict:
    """The session's document as the server holds it now (PULL-DOC on the open connection)."""
    session.drain()
    await session.send("PULL-DOC-REQ", {})
    return (await session.expect("PULL-DOC-REPLY", 30)).content["doc"]


def find_models(doc_json, predicate) -> list[dict]:
    found = []

    def visit(node):
        if isinstance(node, dict):
            if node.get("type") == "object" and "id" in node and predicate(node):
                found.append(node)
            for v in node.values():
                visit(v)
        elif isinstance(node, list):
            for v in node:
                visit(v)

    visit(doc_json)
    return found


def with_class(css: str):
    return lambda node: css in (node.get("attributes", {}).get("css_classes") or [])


# -- a read-only install ------------------------------------------------------------------------------------
def test_the_locked_down_server_serves_pages_and_says_once_where_numba_caches(server, tree):
    _, tmp = tree
    notes = [line for line in server.log if "numba: no writable cache place" in line]
    assert len(notes) == 1 and str(tmp) in notes[0], "\n".join(server.log[-20:])
    assert server.get("/health?endpoint=/app")[0] == 200
    status, page = server.get("/app")
    assert status == 200 and TOKEN.search(page)
    assert "no locator available" not in log_text(server)


def test_the_cli_works_on_the_locked_down_install(server, tree):
    copy, tmp = tree
    env = locked_down_env(copy, tmp)
    for argv in (["--help"], ["run", "--help"], ["sweep", "--help"], ["live", "--help"]):
        done = subprocess.run([sys.executable, "-m", "engine", *argv], cwd=copy, env=env, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0 and "Traceback" not in done.stderr, (argv, done.stderr)
    done = subprocess.run([sys.executable, "-m", "engine", "run", "--json"], cwd=copy, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["finished_requests"] == 256


def test_with_no_writable_place_at_all_numba_compiles_without_a_cache(tree):
    copy, tmp = tree
    code = ("import tempfile; tempfile.tempdir = '/dev/null/x'\n"  # the system's temporary folder is gone too
            "import kernels, kernels.scheduler_core\n"
            "assert kernels.CACHE_COMPILED is False\n"
            "from engine.cli import main\n"
            "raise SystemExit(main(['run', '--help']))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=copy, env=locked_down_env(copy, tmp), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("compiling without a cache") == 1 and "Traceback" not in done.stderr


def test_a_page_that_cannot_be_built_fails_the_deep_health_check(server):
    assert server.get("/health?endpoint=/broken")[0] == 500
    assert server.get("/health?endpoint=/app")[0] == 200
    assert server.get("/health")[0] == 200


# -- signed session ids ---------------------------------------------------------------------------------------
def test_a_session_token_the_server_did_not_sign_is_refused(server):
    from bokeh.util.token import generate_jwt_token, generate_session_id

    forged_unsigned = generate_jwt_token(generate_session_id(signed=False), signed=False)
    other_key = secrets.token_urlsafe(32).encode()
    forged_signed = generate_jwt_token(generate_session_id(secret_key=other_key, signed=True), secret_key=other_key,
                                       signed=True)
    issued = TOKEN.search(server.get("/app")[1]).group(1)

    async def acknowledged(token: str) -> bool:
        try:
            async with websockets.connect(f"ws://{HOST}:{server.port}/app/ws", subprotocols=["bokeh", token],
                                          origin=server.url, proxy=None, open_timeout=20) as ws:
                header = json.loads(await asyncio.wait_for(ws.recv(), 20))
                return header.get("msgtype") == "ACK"
        except Exception:  # closed by the server, or refused outright
            return False

    assert asyncio.run(acknowledged(issued))
    assert not asyncio.run(acknowledged(forged_unsigned))
    assert not asyncio.run(acknowledged(forged_signed))
    assert server.get("/app?bokeh-session-id=" + get_unsigned_id())[0] == 403


def get_unsigned_id() -> str:
    from bokeh.util.token import generate_session_id

    return generate_session_id(signed=False)


# -- links ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("query, seqs", [("?max_num_seqs=64?utm_source=lms", 64), ("??", 256),
                                         ("?max_num_seqs=32??x=1#a#b", 32)])
def test_a_second_question_mark_opens_a_valid_page_with_a_notice(server, query, seqs):
    async def scenario():
        session = await tab(server, query)
        try:
            doc = await pulled(session)
        finally:
            await session.close()
        return doc

    doc = asyncio.run(scenario())
    (slider,) = find_models(doc, with_class("ctl-max_num_seqs"))
    assert slider["attributes"]["value"] == seqs
    text = json.dumps(find_models(doc, with_class("notices")))
    assert "a second" in text and "it was read as" in text


def test_a_link_value_between_steps_is_snapped_with_a_notice(server):
    async def scenario():
        session = await tab(server, "?spread=1.000000123&pool_gib=7.3")
        try:
            return await pulled(session)
        finally:
            await session.close()

    doc = asyncio.run(scenario())
    (spread,) = find_models(doc, with_class("ctl-spread"))
    (pool,) = find_models(doc, with_class("ctl-pool_gib"))
    assert spread["attributes"]["value"] == 1.0 and pool["attributes"]["value"] == 7.5
    text = json.dumps(find_models(doc, with_class("notices")))
    assert "steps of 0.5" in text


# -- only controls come from the browser -----------------------------------------------------------------------
def test_the_disabled_live_toggle_cannot_be_switched_on_by_a_crafted_message(server):
    async def scenario():
        session = await tab(server)
        try:
            doc = await pulled(session)
            (toggle,) = find_models(doc, with_class("live-toggle"))
            assert toggle["attributes"].get("disabled") is True, "this test needs a server without a GPU"
            await send_changes(session, changed(toggle["id"], "active", True))
            await session.release("max_num_seqs", 64, 30)  # a round trip after the crafted change
            return toggle["id"], await pulled(session)
        finally:
            await session.close()

    since = len(server.log)
    toggle_id, doc = asyncio.run(scenario())
    assert "Traceback" not in log_text(server, since)
    (toggle,) = find_models(doc, lambda n: n["id"] == toggle_id)
    assert toggle["attributes"].get("active") is not True
    assert "read off the GPU" not in json.dumps(doc)
    assert "Checkbox.active (disabled or hidden)" in log_text(server, since)


def test_a_chart_data_replacement_is_ignored(server):
    big = list(range(200_000))

    async def scenario():
        session = await tab(server)
        try:
            source = sorted(session.ids["lanes"])[0]
            await send_changes(session, {"kind": "ColumnDataChanged", "model": {"id": source}, "attr": "data",
                                         "data": {"type": "map", "entries": [["y", big], ["left", big]]},
                                         "cols": ["y", "left"]})
            await send_changes(session, changed(source, "data", {"type": "map", "entries": [["y", big]]}))
            response, _ = await session.release("max_num_seqs", 32, 30)
            doc = await pulled(session)
        finally:
            await session.close()
        return source, doc, response

    since = len(server.log)
    source, doc, response = asyncio.run(scenario())
    assert "Traceback" not in log_text(server, since)
    assert response < 30
    (cds,) = find_models(doc, lambda n: n["id"] == source)
    assert column_length(cds, "y") < len(big)
    text = log_text(server, since)
    assert "ColumnDataChanged" in text and "ColumnDataSource.data" in text
    assert str(big[:20])[1:-1] not in text  # no payload in the log


def column_length(cds: dict, name: str) -> int:
    """Rows of column `name` of a ColumnDataSource as a PULL-DOC reply encodes it (a list or an ndarray)."""
    data = cds["attributes"]["data"]
    entries = dict(data["entries"]) if isinstance(data, dict) and "entries" in data else data
    column = entries[name]
    if isinstance(column, dict) and column.get("type") == "ndarray":
        return int(column["shape"][0])
    return len(column)


def test_oversized_and_flooded_values_leave_the_log_small(server):
    async def scenario():
        session = await tab(server)
        try:
            seqs = session.ids["sliders"]["max_num_seqs"]
            await send_changes(session, changed(seqs, "value_throttled", "x" * 2_000_000))
            for i in range(300):
                await send_changes(session, changed(seqs, "value_throttled", f"bad{i}"))
            response, _ = await session.release("max_num_seqs", 16, 30)
        finally:
            await session.close()
        return response

    since = len(server.log)
    assert asyncio.run(scenario()) < 30
    added = server.log[since:]
    assert "Traceback" not in "\n".join(added)
    assert sum(len(line) + 1 for line in added) < 20_000, "\n".join(added[:20])
    assert max((len(line) for line in added), default=0) < 1_500
    assert "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx" not in "\n".join(added)
    assert server.proc.poll() is None


def test_a_crafted_value_between_steps_is_snapped(server):
    async def scenario():
        session = await tab(server)
        try:
            spread = session.ids["sliders"]["spread"]
            await send_changes(session, changed(spread, "value", 7.3), changed(spread, "value_throttled", 7.3))
            await session.release("max_num_seqs", 48, 30)
            return spread, await pulled(session)
        finally:
            await session.close()

    spread_id, doc = asyncio.run(scenario())
    (spread,) = find_models(doc, lambda n: n["id"] == spread_id)
    assert spread["attributes"]["value"] == 7.5
