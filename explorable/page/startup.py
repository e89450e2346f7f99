"""The first visit after an install: numba compiles the scheduler core (about 17 s of CPU with an empty cache,
once, split between two child processes that take about 12 s side by side; later processes load it from
disk in a fraction of a second) and the default setting is run. That happens in a background thread, so
the first reader sees a page at once, saying what is going on, and the explorable swaps itself in when it
is ready. Every later page finds the work done and opens directly.
"""
from __future__ import annotations

import contextlib
import html
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
import typing
from collections.abc import Callable, Iterator
from pathlib import Path

import panel as pn

from explorable.views.assets import stylesheet

log = logging.getLogger(__name__)

CHECK_EVERY_MS = 250  # how often a waiting page looks whether the simulator is ready
# How long a first page waits for the simulator before it shows the placeholder: loading the compiled core
# from numba's cache takes about 0.3 s, so a server restarted on an existing install opens pages directly.
GRACE_S = 0.5
COMPILE_TIMEOUT_S = 300

_done = threading.Event()
_lock = threading.Lock()
_thread: threading.Thread | None = None


# Compiled code numba keeps on disk for the core's entry point (one index file per cached function).
_CORE_INDEX = "scheduler_core.run_to_completion-*.nbi"


def _compiled_code_is_cached() -> bool:
    """Does numba's on-disk cache (wherever kernels chose to keep it) hold the core? A cheap look for its
    index file: a stale one (the source changed) only means the compile happens in this process."""
    import kernels  # chooses the cache place (setting NUMBA_CACHE_DIR if it must) when first imported

    given = os.environ.get("NUMBA_CACHE_DIR")  # numba uses it alone when set (kernels checked it is writable)
    places = [Path(given)] if given else [Path(kernels.__file__).parent / "__pycache__", kernels._user_cache_dir()]
    return any(next(place.rglob(_CORE_INDEX), None) is not None for place in places if place.is_dir())


# engine.precompile's two parts, run at once (named here: importing engine.precompile imports numba, which
# would delay starting them).
PRECOMPILE_PARTS = ("passes", "helpers")


def _yield_to_the_server(pid: int) -> None:
    """Let the compile have only CPU time nothing else wants (Linux's SCHED_IDLE, else the lowest priority):
    the reader's first page, the browser drawing it and other pages come first. A server's Python uses one
    core at most, so on two cores the compile still gets one; only a machine kept busy by other work starves
    it, and then COMPILE_TIMEOUT_S hands what is missing to the server."""
    try:
        os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))
        return
    except (AttributeError, OSError):  # no SCHED_IDLE here (or not allowed)
        pass
    try:
        os.setpriority(os.PRIO_PROCESS, pid, 19)
    except (AttributeError, OSError):  # no priorities here either, or it has exited: normal priority
        pass


def _last_line(said) -> str:
    said.seek(0)
    lines = said.read().decode(errors="replace").strip().splitlines()
    return lines[-1][:200] if lines else "no message"


def _compile_in_subprocesses() -> None:
    """Compile what the default page runs into numba's cache in child processes: numba's compiler is Python
    and holds the GIL for seconds, which would keep this server from answering the first reader (its page,
    the placeholder). The two parts compile side by side (engine.precompile); this process then loads the
    result in a fraction of a second, and compiles itself whatever a failed child left out."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    deadline = time.monotonic() + COMPILE_TIMEOUT_S
    children: list[tuple[str, subprocess.Popen, typing.IO[bytes]]] = []
    failures: list[str] = []
    try:
        for part in PRECOMPILE_PARTS:
            said = tempfile.TemporaryFile()  # (a file, not a pipe: nothing has to drain it meanwhile)
            try:
                child = subprocess.Popen([sys.executable, "-m", "engine.precompile", part], env=env,
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=said)
            except OSError as exc:
                said.close()
                failures.append(f"{part}: {type(exc).__name__}")
                continue
            children.append((part, child, said))
            _yield_to_the_server(child.pid)
        for part, child, said in children:
            try:
                child.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                failures.append(f"{part}: not done after {COMPILE_TIMEOUT_S:g} s")
            else:
                if child.returncode:
                    failures.append(f"{part}: {_last_line(said)}")
    finally:
        for _part, child, said in children:
            if child.poll() is None:
                child.kill()
                child.wait()
            said.close()
    if failures:
        log.warning("compiling the simulator in child processes failed (%s); what is missing is compiled in "
                    "the server", "; ".join(failures))


@contextlib.contextmanager
def _one_compile_at_a_time() -> Iterator[None]:
    """Across this user's server processes (`--num-procs`, several servers at once): the first to find the
    cache empty compiles, the others wait for it (then find the cache full) rather than compile the same."""
    try:
        import fcntl
    except ImportError:  # not on this platform: each process compiles
        yield
        return
    uid = os.getuid() if hasattr(os, "getuid") else 0
    with open(Path(tempfile.gettempdir()) / f"continuous-batching-compile-{uid}.lock", "a+b") as lock:
        deadline = time.monotonic() + COMPILE_TIMEOUT_S
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError:
                if time.monotonic() > deadline:  # a stuck holder: go on without the lock
                    break
                time.sleep(CHECK_EVERY_MS / 1000)
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                fcntl.flock(lock, fcntl.LOCK_UN)


def _prepare() -> None:
    try:
        import kernels

        if kernels.CACHE_COMPILED and not _compiled_code_is_cached():
            with _one_compile_at_a_time():
                if not _compiled_code_is_cached():  # (another server process may have compiled it meanwhile)
                    _compile_in_subprocesses()
        from explorable.state import runs# (imports numba: after the children have started)

        runs.warm()  # compiles the numba core, or loads it from numba's cache, and runs the default setting
    except Exception:  # the page will build anyway and show the problem where it always would
        log.exception("preparing the simulator failed")
    finally:
        _done.set()


def begin() -> None:
    """Start preparing the simulator in the background, once per process; returns at once."""
    global _thread
    with _lock:
        if _thread is None:
            _thread = threading.Thread(target=_prepare, name="prepare-simulator", daemon=True)
            _thread.start()


def ready() -> bool:
    return _done.is_set()


def wait(timeout: float | None = None) -> bool:
    """Block until the simulator is prepared (starting it if need be); False if `timeout` ran out first."""
    begin()
    return _done.wait(timeout)


def _warming_up() -> bool:
    """`panel serve --warm` (and the /liveness page check) build a page with no server behind the session."""
    doc = pn.state.curdoc
    context = doc.session_context if doc is not None else None
    return context is not None and context.server_context is None


def placeholder(title: str = "") -> pn.viewable.Viewable:
    heading = f'<h1 style="font-size:1.6rem;margin:8px 0 4px">{html.escape(title)}</h1>' if title else ""
    return pn.Row(
        pn.indicators.LoadingSpinner(value=True, size=28, margin=(14, 10)),
        pn.pane.HTML(
            f'<div class="preparing" data-preparing="1">{heading}<p><b>Preparing the simulator.</b> The first page '
            "after an install compiles vLLM's scheduler rules to machine code, which takes about 20 seconds, once. "
            "The explorable appears here by itself.</p></div>",
            stylesheets=[stylesheet()], sizing_mode="stretch_width", margin=(0, 10),
        ),
        sizing_mode="stretch_width", margin=10,
    )


def first_page(build: Callable[[], pn.viewable.Viewable], title: str = "") -> pn.viewable.Viewable:
    """The page to serve: `build()` once the simulator is ready; until then a placeholder that swaps it in."""
    if _warming_up():
        wait()  # --warm: the server starts listening only when the first page would open at once
        return build()
    if wait(GRACE_S):
        return build()
    pn.state.location  # create the page's Location from this request, for the link's settings  # noqa: B018
    holder = pn.Column(placeholder(title), sizing_mode="stretch_width", margin=0)

    def swap() -> None:
        if not ready():
            return
        check.stop()
        try:
            holder.objects = [build()]
        except Exception as exc:  # say so on the page rather than leave "preparing" up for ever
            log.exception("building the page failed")
            holder.objects = [pn.pane.HTML(f"<p>The explorable could not be built: {type(exc).__name__}. "
                                           "Reload the page; if it persists, the server's log says why.</p>")]

    check = pn.state.add_periodic_callback(swap, period=CHECK_EVERY_MS)
    return holder
