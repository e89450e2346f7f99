"""Files the CLI writes (`--trace-out`, `--calibrate-out`): checked before any work starts, and written whole
or not at all (a temporary file beside the target, then a rename), so a full disk, a file-size limit or an
interrupted run never leaves half a JSON document where a script expects a whole one.
"""
from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from engine.config import ConfigError


def check_output_path(path: str | None, flag: str) -> None:
    """Raise ConfigError (one line) unless `path` can be written: not empty, its directory there and writable,
    and not something other than a regular file (a directory, a device, a FIFO)."""
    if path is None:
        return
    if not path.strip():
        raise ConfigError(f"{flag}: the path is empty")
    target = Path(path)
    shown = repr(path[:120])
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise ConfigError(f"{flag}: cannot use {shown} ({exc.strerror})") from None
    if mode is not None and not stat.S_ISREG(mode):
        raise ConfigError(f"{flag}: {shown} exists and is not a regular file")
    folder = target.parent
    if not folder.is_dir():
        raise ConfigError(f"{flag}: the directory of {shown} does not exist")
    try:  # the only honest writability test (root ignores permission bits)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=f".{target.name[:40]}.", suffix=".check")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ConfigError(f"{flag}: cannot write in the directory of {shown} ({exc.strerror})") from None


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write `text` to `path` through a temporary file in the same directory and a rename; on any failure the
    temporary file is removed and `path` is untouched."""
    target = Path(path)
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name[:40]}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
