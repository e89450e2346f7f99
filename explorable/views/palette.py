"""The explorable's colours, defined once: the four lane states and the few UI accents around them.

The lane colours come from Okabe & Ito's colour-blind-safe set (grey, bluish green, orange, reddish
purple): they stay distinct under deuteranopia and protanopia and survive a washed-out projector.
"""
from __future__ import annotations

# Lane states, in the order the lane chart codes them (uint8 0..4). CACHED came last (prefix caching) so
# the first four codes keep their meaning; SEVERITY ranks them for merging (lost work outranks the rest).
WAITING, CLEAN, LOST, THRASH, CACHED = 0, 1, 2, 3, 4
SEVERITY = (0, 2, 3, 4, 1)

LANE_COLOURS = (
    "#b9bec6",  # waiting: light grey, so running work stands out against the queue
    "#009e73",  # running, no work wasted: Okabe-Ito bluish green ("teal")
    "#e69f00",  # running work later lost to a preemption, and its recompute: Okabe-Ito orange ("amber")
    "#cc3e9b",  # the same, while thrashing: Okabe-Ito reddish purple pushed brighter ("magenta")
    "#8fd6c0",  # the part of a (re)admission's prefill served from the prefix cache: the teal, lightened
)
GREY, TEAL, AMBER, MAGENTA, LIGHT_TEAL = LANE_COLOURS
LANE_LABELS = (
    "waiting",
    "running",
    "lost to preemption, then redone",
    "thrashing: lost again and again",
    "from cache",
)

# Each lane state's pattern over its colour, so that no state is told by colour alone (WCAG 1.4.1): Bokeh's
# hatch patterns, drawn in the state's HATCH_COLOURS. Canvas patterns line up across neighbouring lanes, so a
# stretch of many lanes' lost work reads as one hatched area even where each lane is about a pixel high.
LANE_PATTERNS = (
    " ",  # waiting: plain
    " ",  # running: plain
    "/",  # lost to a preemption and redone: diagonal lines
    "x",  # thrashing: crossed lines
    ".",  # from the prefix cache: dots
)
HATCH_COLOURS = ("#b9bec6", "#009e73", "#5c3d00", "#ffffff", "#00664a")
# The marker at the middle of a stretch of lost work (a few passes: under a pixel on a whole run's axis).
LOST_MARKERS = {LOST: "square", THRASH: "square_x"}

# UI accents (readouts, strips, curves, terminal).
INK = "#1d2330"  # body text
MUTED = "#5d6675"  # secondary text, axis labels
RULE = "#d9dde3"  # hairlines, grid
CAP_LINE = "#1d2330"  # the --max-num-seqs line on the batch strip
CURRENT = "#d55e00"  # the current setting on the curves (Okabe-Ito vermillion)
CURVE = "#0072b2"  # throughput curves (Okabe-Ito blue)
BETTER = "#007a5a"  # a readout delta that is an improvement
WORSE = "#a85400"  # a readout delta that is a regression (4.9:1 on the readout cards' grey)
TERMINAL_BG = "#14181f"
# The lane chart's ground: dark, so that every lane colour, the light waiting grey and cached teal included,
# stands out from it by 4:1 or more (WCAG 1.4.11 asks 3:1 of a chart's meaningful marks; on white the grey
# was 1.9:1 and the amber 2.3:1), while the colours keep their own lightness order.
LANE_GROUND = "#14181f"  # the log terminal's ground too
LANE_GRID = "#343b48"  # the lanes' time grid on that ground
TERMINAL_FG = "#d7dde6"
