"""WCAG 2.1 contrast of what axe-core cannot see (it reads the page's text, not what a canvas draws): each chart
mark that carries meaning stands out from its chart's ground by 3:1 or more (1.4.11 Non-text Contrast), and a
lane state's pattern from the state's own colour, so the pattern that tells it apart (1.4.1) can be seen."""
from __future__ import annotations

import pytest

from explorable.views import palette
from explorable.views.traffic_curve import TPOT_COLOUR

WHITE = "#ffffff"  # the ground of the strips, the curves and the request-rate curves


def luminance(colour: str) -> float:
    channels = [int(colour.lstrip("#")[i:i + 2], 16) / 255 for i in (0, 2, 4)]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast(a: str, b: str) -> float:
    high, low = sorted((luminance(a), luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def test_the_ratio_is_wcags():
    assert contrast("#000000", WHITE) == pytest.approx(21.0)
    assert contrast("#767676", WHITE) == pytest.approx(4.54, abs=0.01)


@pytest.mark.parametrize("state", range(len(palette.LANE_COLOURS)), ids=palette.LANE_LABELS)
def test_every_lane_state_stands_out_from_the_lane_ground(state):
    assert contrast(palette.LANE_COLOURS[state], palette.LANE_GROUND) >= 3.0


@pytest.mark.parametrize("state", [s for s, p in enumerate(palette.LANE_PATTERNS) if p.strip()],
                         ids=lambda s: palette.LANE_LABELS[s])
def test_each_lane_pattern_stands_out_from_its_states_colour(state):
    assert contrast(palette.HATCH_COLOURS[state], palette.LANE_COLOURS[state]) >= 3.0


@pytest.mark.parametrize("name, colour", [
    ("batch size line (TEAL)", palette.TEAL), ("KV cache line and throughput curves (CURVE)", palette.CURVE),
    ("where you are (CURRENT)", palette.CURRENT), ("the --max-num-seqs line (CAP_LINE)", palette.CAP_LINE),
    ("TPOT p99 curve", TPOT_COLOUR), ("the request-rate curve's 'keeping up' diagonal (MUTED)", palette.MUTED),
])
def test_the_lines_on_white_charts_stand_out_by_3_to_1(name, colour):
    assert contrast(colour, WHITE) >= 3.0, name


def test_every_line_the_request_rate_curves_draw_stands_out_from_white():
    """The 'keeping up' diagonal was drawn in the grid's hairline grey (1.3:1), though the chart's words speak of
    it; every line and dot outline of the built figures is checked, not a list of names."""
    from explorable.state.store import ExplorableState
    from explorable.views.traffic_curve import TrafficCurve

    view = TrafficCurve(state=ExplorableState(arrival="rate", request_rate=4.0))
    if not view.built:
        view.build()
    colours = {r.glyph.line_color for fig in (view.served_fig, view.latency_fig) for r in fig.renderers}
    assert palette.MUTED in colours and palette.RULE not in colours
    assert all(contrast(c, WHITE) >= 3.0 for c in colours), colours
