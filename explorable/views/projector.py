"""Projector view (`?projector=1`): every text in the charts, their legends and the log at 16 px or more,
for a room reading a 1280x720 projector from the back. It is a flag of the page, not a control: the
link keeps it (`url.query_values`), the run does not depend on it.
"""
from __future__ import annotations

from bokeh.models import Axis, Label
from bokeh.plotting import figure as Figure

FLAG = "projector"
TEXT_PX = 16  # the smallest text on a projected page
# CSS custom properties the stylesheet reads (they inherit into every component's shadow root).
STYLES = {
    "--chart-font": f"{TEXT_PX}px", "--log-font": f"{TEXT_PX}px", "--small-font": f"{TEXT_PX}px",
    "--note-font": f"{TEXT_PX}px",
}
LANE_BORDER_LEFT = 104  # room for 16 px tick labels and the axis label; lanes and strips share it


def wanted(query: dict[str, str]) -> bool:
    """Whether a link's query asks for the projector view (`projector=1`, `true`, `yes` or `on`)."""
    value = str(query.get(FLAG, "")).strip().lower()
    return value in ("1", "true", "yes", "on")


def enlarge(fig: Figure, px: int = TEXT_PX) -> None:
    """Every text a figure draws on its canvas (tick labels, axis labels, annotations) at `px` or more."""
    size = f"{px}px"
    for axis in fig.select(type=Axis):
        axis.major_label_text_font_size = size
        axis.axis_label_text_font_size = size
    for label in fig.select(type=Label):
        label.text_font_size = size
