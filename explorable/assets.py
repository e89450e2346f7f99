"""Where the explorable's static files live (the repo's `assets/`), and the stylesheet every view shares."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

ASSETS_DIR = Path(__file__).resolve().parent.parent / "assets"


@lru_cache(maxsize=None)
def stylesheet() -> str:
    """The CSS text of assets/explorable.css (components render in shadow roots, so each gets it)."""
    return (ASSETS_DIR / "explorable.css").read_text()


@lru_cache(maxsize=None)
def logo_svg() -> str:
    return (ASSETS_DIR / "logo.svg").read_text()
