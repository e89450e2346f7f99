"""The process's baseline is frozen out of garbage collection once, when no page is alive, and an ended page's
reference cycles are collected first rather than frozen with it (explorable.server.long_lived)."""
from __future__ import annotations

import asyncio
import gc
import weakref

import pytest
from bokeh.document import Document
from panel.io.document import _cleanup_doc

from explorable.server import long_lived


class _Node:
    """Stands for a page's objects: they refer to each other, so only the cycle collector frees them."""

    def __init__(self):
        self.me = self


@pytest.fixture
def loop(monkeypatch):
    """A fresh event loop for the callbacks long_lived schedules, the simulator taken as prepared; the process
    unfrozen and reset afterwards."""
    monkeypatch.setattr(long_lived.startup, "ready", lambda: True)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    yield loop
    loop.close()
    asyncio.set_event_loop(None)
    gc.unfreeze()
    long_lived._alive.clear()
    long_lived._frozen = False


def _page() -> tuple[Document, weakref.ref]:
    doc = Document()
    cycle = _Node()
    doc.on_session_destroyed(lambda _context, held=cycle: None)  # the page's objects, held by its document
    return doc, weakref.ref(cycle)


def _end(doc: Document, loop: asyncio.AbstractEventLoop) -> None:
    _cleanup_doc(doc)  # runs the session-destroyed callbacks, as the server does when a session ends
    loop.run_until_complete(asyncio.sleep(0.01))


def test_freezes_once_the_last_page_has_ended_and_not_before(loop):
    first, _ = _page()
    second, _ = _page()
    long_lived.track(first)
    long_lived.track(second)
    _end(first, loop)
    assert not long_lived.frozen() and gc.get_freeze_count() == 0  # the second page is still alive
    _end(second, loop)
    assert long_lived.frozen() and gc.get_freeze_count() > 0


def test_an_ended_pages_cycles_are_collected_not_frozen(loop):
    doc, cycle = _page()
    long_lived.track(doc)
    gc.disable()  # only the collection before the freeze may free the page
    try:
        _cleanup_doc(doc)
        del doc  # what the server does with an ended session's document
        assert cycle() is not None  # reference cycles: alive until a collection finds them
        loop.run_until_complete(asyncio.sleep(0.01))
        assert long_lived.frozen()
        assert cycle() is None, "the ended page was frozen instead of collected"
    finally:
        gc.enable()


def test_a_page_opened_after_the_freeze_is_not_tracked(loop):
    doc, _ = _page()
    long_lived.track(doc)
    _end(doc, loop)
    assert long_lived.frozen()
    later, _ = _page()
    long_lived.track(later)
    assert not long_lived._alive  # nothing left to wait for: the freeze happens once per process


def test_no_freeze_before_the_simulator_is_prepared(loop, monkeypatch):
    prepared = False
    monkeypatch.setattr(long_lived.startup, "ready", lambda: prepared)
    monkeypatch.setattr(long_lived, "SETTLE_S", 0.01)
    doc, _ = _page()
    long_lived.track(doc)
    _end(doc, loop)
    assert not long_lived.frozen()  # numba's core, loaded later, would be left out of the baseline
    prepared = True
    loop.run_until_complete(asyncio.sleep(0.05))
    assert long_lived.frozen()


def test_a_readers_page_is_frozen_out_only_after_its_teardown_has_settled(loop, monkeypatch):
    monkeypatch.setattr(long_lived, "SETTLE_S", 0.05)
    doc, _ = _page()
    long_lived.track(doc)
    long_lived._ended(id(doc), warm_up=False)  # a served session's end
    loop.run_until_complete(asyncio.sleep(0.01))
    assert not long_lived.frozen()
    loop.run_until_complete(asyncio.sleep(0.1))
    assert long_lived.frozen()
