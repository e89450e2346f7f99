"""Links as course platforms and chat apps really write them open a page: Panel's reading of a request's URL
and of its query string never fails.

Panel splits the request's URI on '?' and '#' and its host on ':' expecting one of each, so a second '?'
(`/app?max_num_seqs=64?utm_source=lms`, `/app??`), a second '#' or an IPv6 host ('[::1]:5006') fails the page
before any of our code runs. `tolerant_location_params` normalises the URI first: the first '?' starts the
query, any later '?' is read as '&' (explorable.page.url tells the reader), the first '#' starts the fragment.
And Panel parses the query on every change of the address (`Location.query_params`) with `int()` on any text
`str.isdigit()` accepts: '?x=\u00b2' (any name) raised and blanked the page; `tolerant_parse_query` keeps such a
value as text.

Written against Panel 1.9.4: `panel.io.location._get_location_params` (read by `Location.from_request`) and
`panel.io.location.parse_query` (read by `Location.query_params`). Off: those links fail as Panel has them.
"""
from __future__ import annotations

from collections.abc import Callable
from urllib.parse import parse_qsl

import panel.io.location as panel_location

TESTED = {"panel": ("1.9.4", "1.10")}  # from the first version tried to the first release line not tried
_PLAIN_PARAMS: Callable[..., dict] = panel_location._get_location_params  # Panel's own
_PLAIN_QUERY: Callable[[str], dict] = panel_location.parse_query


def normalise_uri(uri: str) -> str:
    """One '?' and at most one '#', in that order: later '?' become '&'; a '#' or '?' inside the fragment is
    percent-encoded."""
    path, hash_sign, fragment = uri.partition("#")
    fragment = fragment.replace("#", "%23").replace("?", "%3F")  # Panel splits on '?' before '#'
    head, question, query = path.partition("?")
    query = query.replace("?", "&")
    return head + question + query + hash_sign + fragment


def tolerant_location_params(protocol: str | None, host: str | None, uri: str | None) -> dict:
    """Panel's `_get_location_params`, on a normalised URI, and never raising for an odd host or URI."""
    try:
        return _PLAIN_PARAMS(protocol, host, normalise_uri(uri) if uri else uri)
    except ValueError:  # an IPv6 host has more than one ':'; keep the path and query
        return _PLAIN_PARAMS(protocol, None, normalise_uri(uri) if uri else uri)


def tolerant_parse_query(query: str) -> dict:
    """Panel's parse_query, except that a value it chokes on stays text instead of failing the page, and a
    second '?' is read as '&'."""
    query = "?" + query.lstrip("?").replace("?", "&") if query else query
    try:
        return _PLAIN_QUERY(query)
    except ValueError:  # int() of '\u00b2', which str.isdigit() calls a digit
        return dict(parse_qsl(query[1:], keep_blank_values=True))


def install() -> None:
    panel_location._get_location_params = tolerant_location_params
    panel_location.parse_query = tolerant_parse_query


def uninstall() -> None:
    panel_location._get_location_params = _PLAIN_PARAMS
    panel_location.parse_query = _PLAIN_QUERY


def active() -> bool:
    return panel_location._get_location_params is tolerant_location_params
