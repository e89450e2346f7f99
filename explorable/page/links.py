"""Links as course platforms and chat apps really write them: any query string opens a valid page.

Panel splits the request's URI on '?' and '#' and its host on ':' expecting one of each; a second '?'
(`/app?max_num_seqs=64?utm_source=lms`, `/app??`), a second '#' or an IPv6 host fails the page before any
of our code runs. `tolerant_location_params` normalises the URI first: the first '?' starts the query, any
later '?' is read as '&' (`has_second_question_mark` lets the page say so), the first '#' starts the fragment.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import panel.io.location as panel_location
import param

from explorable.state.control_specs import snap_to_step

_panel_location_params: Callable[..., dict] = panel_location._get_location_params
SECOND_QUESTION_MARK_NOTICE = "The link had a second '?'; it was read as '&' (one query, several settings)."


def normalise_uri(uri: str) -> str:
    """One '?' and at most one '#', in that order: later '?' become '&'; a '#' or '?' inside the fragment is
    percent-encoded."""
    path, hash_sign, fragment = uri.partition("#")
    fragment = fragment.replace("#", "%23").replace("?", "%3F")  # Panel splits on '?' before '#'

    head, question, query = path.partition("?")
    query = query.replace("?", "&")
    return head + question + query + hash_sign + fragment


def has_second_question_mark(uri: str | None) -> bool:
    return bool(uri) and uri.split("#", 1)[0].count("?") > 1


def tolerant_location_params(protocol: str | None, host: str | None, uri: str | None) -> dict:
    """Panel's `_get_location_params`, on a normalised URI, and never raising for an odd host or URI."""
    try:
        return _panel_location_params(protocol, host, normalise_uri(uri) if uri else uri)
    except ValueError:  # an IPv6 host ('[::1]:5006') has more than one ':'; keep the path and query
        return _panel_location_params(protocol, None, normalise_uri(uri) if uri else uri)


def install() -> None:
    """Make Panel's Location parse links with `tolerant_location_params` (Panel 1.9.4: `Location.from_request`)."""
    panel_location._get_location_params = tolerant_location_params


def snap_link_values(state: param.Parameterized, link: dict[str, str], controls: Iterable[str]) -> list[str]:
    """Put a link's numbers on their controls' steps, as the sliders are (in place); a notice for each moved.

    Values that are not numbers in range are left for `apply_query` to refuse with its own notice.
    """
    notices = []
    for name in controls:
        p = state.param[name]
        step = getattr(p, "step", None)
        if name not in link or not isinstance(p, param.Number) or not step or p.bounds is None:
            continue
        try:
            value = float(str(link[name]).strip())
        except (ValueError, OverflowError):
            continue
        lo, hi = p.bounds
        if not (math.isfinite(value) and lo <= value <= hi):
            continue
        snapped = snap_to_step(value, lo, hi, step)
        if snapped != value:
            shown = int(snapped) if isinstance(p, param.Integer) else snapped
            link[name] = str(shown)
            notices.append(f"The link set {name} to {value:.10g}; it moves in steps of {step:g}, so it is {shown:g}.")
    return notices
