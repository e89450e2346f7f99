"""Hot loops: the numba scheduler core, and (for live mode) paged-attention kernels.

Where numba keeps its compiled code is chosen here, before numba is imported: numba's own choices (the
NUMBA_CACHE_DIR it is given, `__pycache__` beside the source, the user's cache directory) when one of them
is writable, else a private folder under the system's temporary directory, else no cache at all (compiled
in every process). A read-only install with no writable home then still serves pages and runs the CLI.
"""
from __future__ import annotations

import logging
import os
import sys
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)


def _writable_dir(path: Path) -> bool:
    """Can numba keep files here? (Creates it if needed; tries a real file: root ignores permission bits.)"""
    try:
        path.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=path).close()
        return True
    except OSError:
        return False


def _user_cache_dir() -> Path:
    # numba's UserWideCacheLocator uses appdirs' user_cache_dir: $XDG_CACHE_HOME/numba or ~/.cache/numba.
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "numba"


def _choose_compiled_code_cache() -> bool:
    """Set NUMBA_CACHE_DIR if numba's own places are not writable; False when nothing is (compile uncached)."""
    given = os.environ.get("NUMBA_CACHE_DIR", "")
    if given and _writable_dir(Path(given)):
        return True
    # numba skips an unusable NUMBA_CACHE_DIR and tries these next, in this order.
    if _writable_dir(Path(__file__).parent / "__pycache__") or _writable_dir(_user_cache_dir()):
        return True
    fallback = Path(tempfile.gettempdir()) / f"continuous-batching-numba-{os.getuid() if hasattr(os, 'getuid') else 0}"
    if _writable_dir(fallback):
        os.environ["NUMBA_CACHE_DIR"] = str(fallback)
        log.warning("numba: no writable cache place (%s); caching compiled code in %s",
                    f"NUMBA_CACHE_DIR={given[:80]!r}" if given else "read-only install, unwritable home", fallback)
        if "numba" in sys.modules:  # imported already: numba read the variable at import
            from numba.core import config

            config.CACHE_DIR = str(fallback)
        return True
    os.environ.pop("NUMBA_CACHE_DIR", None)
    log.warning("numba: no writable cache place, not even %s; compiling without a cache (slower first run)",
                fallback)
    return False


# Whether the kernels' @njit use numba's on-disk cache (scheduler_core reads it).
CACHE_COMPILED: bool = _choose_compiled_code_cache()
