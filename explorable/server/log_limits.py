"""Bounded server logs: no record longer than a few hundred characters, and the same message at most a few
times per window, with a count of what was held back.

Bokeh logs the whole message it failed to handle (`%r` of a 19 MB string is a 19 MB line) and Panel logs a
link value it cannot parse; a script repeating either would fill the disk. `install()` puts one filter on
the handlers of the loggers a served app writes to; it changes records, never the code that logs them.
"""
from __future__ import annotations

import logging
import re
import reprlib
import threading
import time

MAX_MESSAGE = 500  # characters of one record's message
MAX_TRACEBACK = 3000  # characters of its traceback: the head (where) and the tail (what)
BURST, WINDOW_S = 5, 60.0  # the same message at most BURST times per WINDOW_S
UNLIMITED = ("tornado.access",)  # one line per HTTP request: an operator's record, bounded by requests
# A page that went away while the server wrote to it (asyncio reports each pending write with two chained
# tracebacks): nothing to fix, so one short line.
CLOSED = ("WebSocketClosedError", "StreamClosedError")
_DIGITS = re.compile(r"\d+")
LOGGERS = ("", "bokeh", "panel", "tornado")

_short = reprlib.Repr()
_short.maxstring = _short.maxother = 200
_short.maxlevel, _short.maxlist, _short.maxdict = 2, 6, 6


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]} ...[{len(text) - limit:,} characters cut]... {text[-half:]}"


def _safe(arg):
    """A log argument as at most ~200 characters (never the whole of a client's payload)."""
    if isinstance(arg, (int, float)) and not isinstance(arg, bool):
        return arg if abs(arg) < 1e300 else "<huge number>"
    if isinstance(arg, (str, bytes)):
        return _cut(arg if isinstance(arg, str) else repr(arg[:400]), 200)
    try:
        return _short.repr(arg)
    except Exception:  # a repr that raises (a 5,000-digit int inside, a broken object)
        return f"<{type(arg).__name__}>"


class BoundedRecords(logging.Filter):
    """Cuts records to size and holds back repeats of one message (logger, level, format string)."""

    def __init__(self) -> None:
        super().__init__("")
        self._lock = threading.Lock()
        self._seen: dict[tuple, list] = {}  # key -> [window start, count in window, held back]

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "_bounded", False):  # several handlers share one record
            return True
        if record.exc_info and type(record.exc_info[1]).__name__ in CLOSED:
            record.msg, record.args, record.exc_info = "a page's connection closed while the server wrote to it", None, None
        elif "exception=WebSocketClosedError()" in str(record.msg)[:400]:
            record.msg, record.args, record.exc_info = "a page's connection closed while the server wrote to it", None, None
        if record.name not in UNLIMITED:
            key = (record.name, record.levelno, _DIGITS.sub("#", str(record.msg)[:120]))
            now = time.monotonic()
            with self._lock:
                if len(self._seen) > 4096:  # keys are format strings: a few dozen in practice
                    self._seen.clear()
                slot = self._seen.setdefault(key, [now, 0, 0])
                if now - slot[0] > WINDOW_S:
                    held, slot[:] = slot[2], [now, 0, 0]
                else:
                    held = 0
                slot[1] += 1
                if slot[1] > BURST:
                    slot[2] += 1
                    return False
            prefix = f"[{held:,} more like the next were not logged in the last {WINDOW_S:.0f} s] " if held else ""
        else:
            prefix = ""
        try:
            args = record.args
            if isinstance(args, tuple):
                args = tuple(_safe(a) for a in args)
            elif isinstance(args, dict):
                args = {k: _safe(v) for k, v in args.items()}
            message = str(record.msg) % args if args else str(record.msg)
        except Exception:
            message = _cut(str(record.msg), MAX_MESSAGE)
        record.msg, record.args = prefix + _cut(message, MAX_MESSAGE), None
        if record.exc_info and not record.exc_text:
            record.exc_text = _cut(logging.Formatter().formatException(record.exc_info), MAX_TRACEBACK)
        record._bounded = True
        return True


_FILTER = BoundedRecords()


def install() -> None:
    """Put the filter on every handler of the loggers a served app writes to (idempotent)."""
    for name in LOGGERS:
        for handler in logging.getLogger(name).handlers:
            if _FILTER not in handler.filters:
                handler.addFilter(_FILTER)
