"""Every change this project makes to a library's private code (Panel, Bokeh, BokehJS, Tornado), fenced here.

One module per patch. Each says what it works around and names the library versions it was written against
(`TESTED`: the lowest version tried, and the first release line it was not), and has `install()`,
`uninstall()` and `active()` (`switch()` below makes the three for a patch that its own code consults
where it is used). Nothing outside this package names a private attribute of those libraries
(tests/test_architecture.py checks it); where a library offers a public way (Panel's `pn.io.hold`, a route
of our own), that is used instead.

`install()` below applies them all, once per process. A library outside a patch's tested range is not
patched: one log line says so (naming the versions, the ranges tested and the patches left out), and that
library's own behaviour stays (every patch is a speed-up or a workaround the page can live without: it builds
and answers clicks with any of them off). An operator can turn patches off by name with
EXPLORABLE_PATCHES_OFF=name,name (or `all`) to rule one out after an upgrade.
"""
from __future__ import annotations

import importlib.metadata
import logging
import os
from types import ModuleType
from typing import Callable

log = logging.getLogger(__name__)

NAMES = ("paint_fix", "prompt_writes", "crossed_changes", "prompt_changes", "inline_arrays", "odd_links",
         "text_updates", "direct_styles", "stylesheet_models", "panel_cleanup", "aria_names")
OFF_VARIABLE = "EXPLORABLE_PATCHES_OFF"


def switch(doc: str = "") -> tuple[Callable[[], None], Callable[[], None], Callable[[], bool]]:
    """`install`, `uninstall` and `active` for a patch its own code consults where it is used (a flag: nothing
    in the library is replaced when it is installed). `doc`: what installing it changes, for `install`."""
    on = [False]

    def install() -> None:
        on[0] = True

    def uninstall() -> None:
        on[0] = False

    def active() -> bool:
        return on[0]

    install.__doc__ = doc or None
    return install, uninstall, active


def modules() -> list[ModuleType]:
    """Every patch module, in NAMES order."""
    import importlib

    return [importlib.import_module(f"{__name__}.{name}") for name in NAMES]


def installed_version(library: str) -> str:
    """The installed version of `library` ('' when it is not installed)."""
    try:
        return importlib.metadata.version(library)
    except importlib.metadata.PackageNotFoundError:
        return ""


def _release(text: str) -> tuple[int, ...]:
    """'3.9.2' -> (3, 9, 2); a pre-release or local suffix ('3.10.0.dev5', '1.9.4+g1') is cut at its first letter."""
    parts = []
    for piece in text.split("."):
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        parts.append(int(digits))
        if len(digits) < len(piece):
            break
    return tuple(parts)


def in_range(version: str, tested: tuple[str, str]) -> bool:
    """Is `version` at least tested[0] and below tested[1] (a release line: '1.10' excludes 1.10.0 and later)?"""
    low, high = (_release(v) for v in tested)
    mine = _release(version)
    return bool(mine) and low <= mine < high


def untested(module: ModuleType) -> list[tuple[str, str]]:
    """(library, installed version) for each library `module` patches whose version is outside its tested range."""
    out = []
    for library, tested in module.TESTED.items():
        version = installed_version(library)
        if not in_range(version, tested):
            out.append((library, version or "(not installed)"))
    return out


def turned_off() -> set[str]:
    """The patches EXPLORABLE_PATCHES_OFF names ('all': every one)."""
    words = {w.strip() for w in os.environ.get(OFF_VARIABLE, "").split(",") if w.strip()}
    return set(NAMES) if "all" in words else words & set(NAMES)


def name_of(module: ModuleType) -> str:
    return module.__name__.rsplit(".", 1)[1]


_reported: set[tuple[str, str]] = set()  # (library, version) already said in this process


def install() -> dict[str, bool]:
    """Apply every patch whose libraries are in its tested range (idempotent); {name: active} for each.

    A library outside a patch's range leaves that patch out (uninstalled, should it have been in), and one
    log line names the libraries, the ranges tested and the patches left out (once per process)."""
    off = turned_off()
    outside: dict[tuple[str, str], set[tuple[str, str]]] = {}  # (library, version) -> {(low, high)}
    left_out = []
    for module in modules():
        untested_here = untested(module)
        for library, version in untested_here:
            outside.setdefault((library, version), set()).add(module.TESTED[library])
        if untested_here:
            left_out.append(name_of(module))
        if untested_here or name_of(module) in off:
            module.uninstall()
        else:
            module.install()
    news = sorted(key for key in outside if key not in _reported)
    if news:
        _reported.update(news)
        ranges = {key: ", ".join(f"{lo} to before {hi}" for lo, hi in sorted(outside[key])) for key in news}
        said = "; ".join(f"{library} {version} (tested: {ranges[library, version]})" for library, version in news)
        log.warning("explorable.patches: %s outside the versions these patches were tested on; left out, so "
                    "the library keeps its own behaviour (the page works, some updates cost more): %s", said,
                    ", ".join(left_out))
    return active()


def active() -> dict[str, bool]:
    """{name: installed now} for every patch."""
    return {name_of(module): module.active() for module in modules()}
