"""The page's URL, the one place a link becomes settings: reading the query (`link_query`), putting its numbers
on their controls' steps, applying each value to its control (a bad one falls back with a notice), keeping
the address bar in step with the controls, and the share link. Every control is a RunConfig field, named as
in the engine and vLLM, so a course page can link to one exact state. (A link Panel itself could not read,
with a second '?' or an odd host, is made readable by explorable.patches.odd_links.)
"""
from __future__ import annotations

import html
import json
import math
import weakref
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import parse_qsl, urlencode

import panel as pn
import param

from engine.settings import parse_bool
from explorable.patches.text_updates import TextHTML
from explorable.state import runs
from explorable.state.control_specs import CONTROL_SPECS, SLO_CONTROLS, URL_CONTROLS, config_fields, snap_to_step
from explorable.state.store import CONTROLS, ExplorableState
from explorable.views.assets import stylesheet
from explorable.views.state_view import StateView

SECOND_QUESTION_MARK_NOTICE = "The link had a second '?'; it was read as '&' (one query, several settings)."


def link_query(location: Any) -> dict[str, str]:
    """The raw text of a link's settings, by name (the last value of a repeated name; a second '?' read as '&').

    Not Panel's parsed `query_params`: it turns 'true' and 400-digit numbers into values `apply_query` must not
    meet."""
    search = (getattr(location, "search", None) or "").lstrip("?").replace("?", "&")
    return dict(parse_qsl(search, keep_blank_values=True))


def has_second_question_mark(uri: str | None) -> bool:
    return bool(uri) and uri.split("#", 1)[0].count("?") > 1


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


# -- link values ----------------------------------------------------------------------------------
def parse_control(state: ExplorableState, name: str, raw: Any) -> Any:
    """Turn a link value into a valid value of control `name`, or raise ValueError saying what is allowed."""
    p = state.param[name]
    text = raw.strip() if isinstance(raw, str) else raw
    if _unset(p, text):
        return None  # an optional control left to its default (the pool from pool_gib; the model's own length)
    if isinstance(p, param.Boolean):
        if isinstance(text, bool):
            return text
        if isinstance(text, (int, float)) and text in (0, 1):
            return bool(text)
        try:
            return parse_bool(text)
        except (AttributeError, ValueError):
            raise ValueError("true or false") from None
    if isinstance(p, param.Selector):
        choices = list(p.objects)
        labels = dict(p.names or {})  # display labels of a dict-declared Selector
        for choice in choices:
            if isinstance(text, str) and text.lower() == str(choice).lower():
                return choice
        for label, choice in labels.items():
            if isinstance(text, str) and text.lower() == label.lower():
                return choice
        raise ValueError("one of " + ", ".join(str(c) for c in choices))
    if p.allow_None and (text is None or (isinstance(text, str) and text.lower() in ("", "none", "null"))):
        return None  # an optional control left empty (the two-number form's fields)
    lo, hi = p.bounds
    is_int = isinstance(p, param.Integer)
    what = f"{'a whole number' if is_int else 'a number'} from {lo:,g} to {hi:,g}"
    if isinstance(text, bool):
        raise ValueError(what)
    try:
        number = float(text)
    except (TypeError, ValueError, OverflowError):  # float(10**400) overflows
        raise ValueError(what) from None
    if not math.isfinite(number) or not lo <= number <= hi or (is_int and not number.is_integer()):
        raise ValueError(what)
    return int(number) if is_int else number


_UNSET_WORDS = ("", "none", "null", "default")


def _unset(p: param.Parameter, text: Any) -> bool:
    """Does a link say "unset" for an optional control (one whose default is None)?"""
    optional = p.default is None and (getattr(p, "allow_None", False) or None in (getattr(p, "objects", None) or []))
    return optional and (text is None or (isinstance(text, str) and text.lower() in _UNSET_WORDS))


def apply_query(state: ExplorableState, query: Mapping[str, Any]) -> list[str]:
    """Apply a link's query to the controls; each bad value falls back to the default with a notice.

    Never raises. Unknown names are ignored (a course page may add its own). If the values are each fine
    but the mix cannot run (a pool too small for what it must reserve), the values the engine names fall
    back, and failing that every value from the link.
    """
    notices: list[str] = []
    accepted: dict[str, Any] = {}
    for name in URL_CONTROLS:
        if name not in query:
            continue
        raw = query[name]
        if isinstance(raw, (list, tuple)):  # ?x=1&x=2: the last one wins, as in most servers
            raw = raw[-1] if raw else ""
        try:
            accepted[name] = parse_control(state, name, raw)
        except ValueError as exc:
            default = state.param[name].default
            notices.append(
                f"The link set {name} to {_show(raw)}, which is not {exc}; using the default, {default}."
            )
    slo = {n: accepted.pop(n) for n in SLO_CONTROLS if n in accepted}  # not part of the run
    if slo:
        state.param.update(**slo)
    merged = {**state.control_values(), **accepted}
    problem = runs.config_problem(config_fields(merged))
    while problem and accepted:
        named = [n for n in accepted if n in problem] or list(accepted)
        for n in named:
            merged[n] = state.param[n].default
            accepted.pop(n)
        notices.append(
            f"The link's settings cannot run ({problem}); "
            f"using the default{'s' if len(named) > 1 else ''} for {', '.join(named)}."
        )
        problem = runs.config_problem(config_fields(merged))
    if "vllm_version" in accepted:  # first: it sets defaults that the link's own settings then override
        state.vllm_version = accepted.pop("vllm_version")
    if accepted:
        state.param.update(**accepted)
    for text in notices:
        state.add_notice(text)
    return notices


def _show(raw: Any) -> str:
    text = raw if isinstance(raw, str) else repr(raw)
    return repr(text[:40] + ("..." if len(text) > 40 else ""))


def sync_url(state: ExplorableState) -> None:
    """Read the link's query into the controls (bad values fall back with a notice), then keep the URL in step."""
    location = pn.state.location
    if location is None:
        return
    link = link_query(location)
    snapped = snap_link_values(state, link, CONTROLS)
    apply_query(state, link)
    request = getattr(getattr(pn.state.curdoc, "session_context", None), "request", None)
    if has_second_question_mark(getattr(request, "uri", None) or location.search):
        state.add_notice(SECOND_QUESTION_MARK_NOTICE)
    for text in snapped:
        state.add_notice(text)

    # From here on the URL only follows the state. (`Location.sync` would also read the link back into the
    # controls, re-applying what apply_query refused: `?pool_gib=true` passes param's bounds as 1 and then
    # breaks the slider.)
    def write_url(*_):
        location.search = "?" + urlencode(query_values(state))

    state.param.watch(write_url, list(URL_CONTROLS))
    # The browser keeps the URL it was opened with until the page has loaded; write the full, cleaned
    # query once it has, so the address bar names every control from the start.
    pn.state.onload(write_url)
    state.previous_summary = None  # a link opens a state; it is not a change from the defaults


# Page flags a link carries beside the controls (the projector view), per state: the URL keeps them.
_PAGE_FLAGS: weakref.WeakKeyDictionary[ExplorableState, dict[str, str]] = weakref.WeakKeyDictionary()


def query_values(state: ExplorableState) -> dict[str, str]:
    """Every control as its URL text (what Location.sync writes), then the page's flags. A link group (the
    two-number form) goes in whole while any of its members differs from its starting value, else not at all;
    an empty optional field never. A link never carries a file."""
    out = {}
    defaults = {name: state.param[name].default for name in URL_CONTROLS}
    used = {CONTROL_SPECS[n].link_group for n in URL_CONTROLS if getattr(state, n) != defaults[n]}
    for name in URL_CONTROLS:
        group = CONTROL_SPECS[name].link_group
        if group and (group not in used or getattr(state, name) is None):
            continue
        value = state.param[name].serialize(getattr(state, name))
        out[name] = value if isinstance(value, str) else json.dumps(value)  # an unset optional control: null
    out.update(_PAGE_FLAGS.get(state, {}))
    return out


def set_page_flags(state: ExplorableState, flags: dict[str, str]) -> None:
    _PAGE_FLAGS[state] = flags


def share_html(href: str) -> str:
    """The share link's text for a link to `href` (the static build fills in its own)."""
    return (f'<a class="share-link" href="{html.escape(href)}" target="_blank" rel="noopener">'
            "Open this exact state in a new tab</a> (copy its address to share it)")


class ShareLink(StateView):
    """A link to the page's exact state: in a course page's iframe the reader cannot see the address bar."""

    watches = (*URL_CONTROLS, "uploaded")

    def build(self) -> None:
        self.pane = TextHTML("", stylesheets=[stylesheet()], margin=(0, 12, 8, 12), sizing_mode="stretch_width",
                             css_classes=["share"], visible=pn.state.location is not None)

    def refresh(self) -> None:
        location = pn.state.location
        if location is None:
            return
        # Relative to the page itself, so it names the explorable's own server even inside an iframe.
        self.pane.object = share_html(f"{location.pathname or ''}?{urlencode(query_values(self.state))}") + (
            ' <span class="muted">(your file is not in the link: whoever opens it sees the starting workload)</span>'
            if self.state.uploaded is not None else "")

    def __panel__(self):
        return self.pane
