"""The first visit: a page at once while the simulator is prepared, the explorable swapped in when it is ready."""
from __future__ import annotations

import os
import sys
import threading
import time
import types

import panel as pn
import pytest
from bokeh.document import Document
from panel.io.state import set_curdoc

from explorable.page import startup


class FakeCallback:
    def __init__(self, fn):
        self.fn, self.stopped = fn, False

    def stop(self):
        self.stopped = True


@pytest.fixture
def preparing(monkeypatch):
    """The simulator not ready yet; periodic callbacks captured instead of scheduled."""
    done = threading.Event()
    callbacks = []
    monkeypatch.setattr(startup, "_done", done)
    monkeypatch.setattr(startup, "begin", lambda: None)
    monkeypatch.setattr(startup, "GRACE_S", 0.01)
    monkeypatch.setattr(pn.state, "add_periodic_callback",
                        lambda fn, period=500, **_: callbacks.append(FakeCallback(fn)) or callbacks[-1])
    return done, callbacks


def test_the_first_page_says_it_is_preparing_and_swaps_the_explorable_in(preparing):
    done, callbacks = preparing
    built = []
    page = startup.first_page(lambda: built.append(pn.pane.HTML("the explorable")) or built[-1], "A title")
    text = page.objects[0].objects[1].object
    assert built == [] and "Preparing the simulator" in text and ">A title</h1>" in text
    (check,) = callbacks
    check.fn()  # still preparing: nothing changes
    assert built == [] and not check.stopped
    done.set()
    check.fn()
    assert page.objects == built and check.stopped


def test_a_page_that_cannot_be_built_says_so_instead_of_preparing_for_ever(preparing):
    done, callbacks = preparing
    page = startup.first_page(lambda: 1 / 0)
    done.set()
    callbacks[0].fn()
    assert "could not be built: ZeroDivisionError" in page.objects[0].object


def test_once_ready_pages_open_directly(preparing):
    done, callbacks = preparing
    done.set()
    page = pn.pane.HTML("the explorable")
    assert startup.first_page(lambda: page) is page and callbacks == []


def test_panels_warm_up_waits_for_the_simulator_so_the_server_listens_ready(preparing, monkeypatch):
    done, callbacks = preparing
    doc = Document()
    doc._session_context = lambda: types.SimpleNamespace(server_context=None)  # what --warm's session has
    monkeypatch.setattr(startup, "wait", lambda timeout=None: done.set() or True)
    page = pn.pane.HTML("the explorable")
    with set_curdoc(doc):
        assert startup.first_page(lambda: page) is page
    assert done.is_set() and callbacks == []


def test_preparing_compiles_the_core_and_caches_the_default_run(monkeypatch):
    from engine import RunConfig
    from explorable.state import runs

    monkeypatch.setattr(startup, "_done", threading.Event())
    runs.run.cache_clear()
    startup._prepare()
    assert startup.ready()
    assert runs.is_cached(RunConfig())  # the default run is already there
    hits = runs.run.cache_info()["hits"]
    runs.run(RunConfig())
    assert runs.run.cache_info()["hits"] == hits + 1


class FakeChild:
    """A child process that exits with `returncode` as soon as it is waited for, having said `said`."""
    started: list = []
    events: list = []  # ("start" | "wait", part), in order
    pid = -1  # no such process: lowering its priority fails quietly, as for a child that has exited

    def __init__(self, args, returncode=0, said=b"", **kwargs):
        self.args, self.returncode = args, returncode
        kwargs["stderr"].write(said)
        FakeChild.started.append(self)
        FakeChild.events.append(("start", args[-1]))

    def wait(self, timeout=None):
        FakeChild.events.append(("wait", self.args[-1]))
        return self.returncode

    def poll(self):
        return self.returncode


def test_a_cold_cache_is_compiled_in_two_child_processes_at_once_then_loaded_here(monkeypatch):
    """numba's compiler holds the GIL for seconds: with nothing cached, child processes compile (the server
    keeps answering pages meanwhile), the two parts side by side, and the server loads the result."""
    from engine.precompile import PARTS
    from explorable.state import runs

    monkeypatch.setattr(FakeChild, "started", [])
    monkeypatch.setattr(FakeChild, "events", [])
    monkeypatch.setattr(startup, "_done", threading.Event())
    monkeypatch.setattr(startup, "_compiled_code_is_cached", lambda: False)
    monkeypatch.setattr(startup.subprocess, "Popen", FakeChild)
    startup._prepare()
    assert startup.PRECOMPILE_PARTS == PARTS
    assert [child.args for child in FakeChild.started] == [
        [startup.sys.executable, "-m", "engine.precompile", part] for part in PARTS]
    # Both started before either is waited for: they run side by side.
    assert FakeChild.events == [("start", part) for part in PARTS] + [("wait", part) for part in PARTS]
    assert startup.ready() and runs.is_cached(runs.RunConfig())


def test_a_child_process_that_fails_leaves_the_compile_to_the_server(monkeypatch, caplog):
    monkeypatch.setattr(startup, "_done", threading.Event())
    monkeypatch.setattr(startup, "_compiled_code_is_cached", lambda: False)
    monkeypatch.setattr(startup.subprocess, "Popen", lambda args, **kw: FakeChild(
        args, returncode=1 if args[-1] == "helpers" else 0, said=b"Traceback\nMemoryError\n", **kw))
    startup._prepare()
    assert startup.ready() and "compiled in the server" in caplog.text
    assert "helpers: MemoryError" in caplog.text and "passes:" not in caplog.text  # the one that failed, why


def test_children_past_the_time_limit_are_stopped_and_reaped(monkeypatch, caplog):
    real_popen, started = startup.subprocess.Popen, []

    def slow(args, **kw):
        started.append(real_popen([sys.executable, "-c", "import time; time.sleep(60)"], **kw))
        return started[-1]

    monkeypatch.setattr(startup, "COMPILE_TIMEOUT_S", 0.5)
    monkeypatch.setattr(startup.subprocess, "Popen", slow)
    begun = time.monotonic()
    startup._compile_in_subprocesses()
    assert time.monotonic() - begun < 10
    assert len(started) == 2 and all(child.returncode is not None for child in started)  # killed and waited for
    assert "passes: not done after 0.5 s" in caplog.text and "helpers: not done" in caplog.text


def test_one_server_process_compiles_while_the_others_wait_for_it(monkeypatch):
    """`--num-procs 2` on a fresh install: the second process waits for the first one's compile, then finds the
    cache full and compiles nothing (four children on two cores would halve the speed of both)."""
    import fcntl

    cached = threading.Event()
    monkeypatch.setattr(startup, "_done", threading.Event())
    monkeypatch.setattr(startup, "_compiled_code_is_cached", cached.is_set)
    monkeypatch.setattr(startup.subprocess, "Popen", lambda *a, **k: pytest.fail("compiled twice"))
    lock_path = startup.Path(startup.tempfile.gettempdir()) / f"continuous-batching-compile-{os.getuid()}.lock"
    with open(lock_path, "a+b") as held:  # another process's compile under way
        fcntl.flock(held, fcntl.LOCK_EX)
        waiting = threading.Thread(target=startup._prepare)
        waiting.start()
        time.sleep(0.6)
        assert waiting.is_alive() and not startup.ready()  # waits for the lock
        cached.set()  # the other process's compile is done
        fcntl.flock(held, fcntl.LOCK_UN)
    waiting.join(10)
    assert startup.ready()


def test_a_warm_cache_is_found_and_not_compiled_again(monkeypatch):
    from explorable.state import runs

    runs.warm()  # this process's core is compiled and cached on disk by now
    assert startup._compiled_code_is_cached()
    monkeypatch.setattr(startup.subprocess, "Popen", lambda *a, **k: pytest.fail("compiled again"))
    monkeypatch.setattr(startup, "_done", threading.Event())
    startup._prepare()
    assert startup.ready()


def test_an_empty_numba_cache_dir_counts_as_cold(monkeypatch, tmp_path):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))  # numba looks only here when it is set
    assert not startup._compiled_code_is_cached()
    (tmp_path / "x" / "scheduler_core.run_to_completion-437.py311.nbi").parent.mkdir()
    (tmp_path / "x" / "scheduler_core.run_to_completion-437.py311.nbi").write_bytes(b"")
    assert startup._compiled_code_is_cached()
