"""What every view of the page shares: the state it watches, and one way of answering a reader.

A view takes the page's `ExplorableState`, builds its panes and figures once (`build`), names the state's
parameters it follows (`watches`) and redraws from the state in `refresh`, which runs once at the start and
after every change of those parameters. Views never talk to each other: they read the state.

A reader's action (a click, a slider's release) is answered through `answer_reader`: everything the
callback changes, in every view, is held and leaves as one message (Panel's `pn.io.hold`), so the browser
restyles and lays the page out once per action, not once per view that changed.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

import panel as pn
import param

from explorable.state import background
from explorable.state.store import ExplorableState

F = TypeVar("F", bound=Callable[..., Any])


def answer_reader(callback: F) -> F:
    """`callback`, run with the page's changes held until it returns (one message to the browser); the curves'
    worker holds back meanwhile (explorable.state.background)."""
    @functools.wraps(callback)
    def held(*args: Any, **kwargs: Any) -> Any:
        background.foreground_busy()
        try:
            with pn.io.hold():
                return callback(*args, **kwargs)
        finally:
            background.foreground_busy()

    return held  # type: ignore[return-value]


class StateView(pn.viewable.Viewer):
    """A view of the page's state: built once, refreshed whenever a parameter it `watches` changes."""

    state = param.ClassSelector(class_=ExplorableState)
    watches: ClassVar[tuple[str, ...]] = ("trace",)

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.build()
        if self.watches:
            self.state.param.watch(self.changed, list(self.watches))
        self.refresh()

    def build(self) -> None:
        """Make the view's panes and figures (once, before the first refresh)."""

    def changed(self, *_events: param.parameterized.Event) -> None:
        """A watched parameter changed: redraw now (a view whose data takes a while may defer it)."""
        self.refresh()

    def refresh(self) -> None:
        """Draw the state as it is now."""
