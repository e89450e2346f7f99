"""Assembles one reader's page: header, sidebar controls, guided steps, notices, readouts, the lane chart
with its strips, the curves and the log terminal; and ties the controls to the page's URL.

`build_app()` makes everything per page (Bokeh models belong to one document); runs are shared through
`explorable.state.runs`' caches. `configure()` is the once-per-process part: Panel's extension and warm-up.
"""
from __future__ import annotations

import html
from urllib.parse import parse_qsl

import panel as pn
import param
from panel.reactive import Syncable

from explorable.state import background
from explorable.patches import inline_arrays, prompt_writes
from explorable.page import links, startup, url
from explorable.views import projector
from explorable.views.assets import logo_svg, stylesheet, stylesheet_css
from explorable.views.controls import Controls
from explorable.views.curves import Curves
from explorable.views.guide import MEMORY_STEPS, PREFIX_STEPS, TRAFFIC_STEPS, Guide
from explorable.views.lanes import LaneChart
from explorable.views.live import LivePanel
from explorable.views.logs_view import LogView
from explorable.patches.paint_fix import same_sheet_kept
from explorable.views.readouts import Readouts
from explorable.views.traffic_curve import TrafficCurve
from explorable.state.store import ExplorableState
from explorable.views.strips import Strips
from explorable.views.state_view import StateView, answer_reader
from explorable.views.text_pane import TextHTML

TITLE = "Continuous batching is not a bigger batch"
LEDE = (
    "Before every forward pass, a vLLM-style scheduler decides again which requests are in the batch. "
    "Move the controls and watch what really sets the batch size: usually the KV cache, not "
    "<code>--max-num-seqs</code>."
)


def _one_message_per_browser_event() -> None:
    """Send everything one browser event changes (a click, a slider release) as one PATCH-DOC message.

    Panel handles a browser event without holding the document (it holds only for notebooks), so each
    watcher's changes go out as a message of their own: a click on a --max-num-seqs stop sent 13, and
    the browser restyled and relaid the page once per message. Held, they are combined (a property set
    twice goes once) and written together when the event has been handled.
    """
    for name in ("_change_event", "_process_bokeh_event"):
        original = getattr(Syncable, name, None)
        if original is None or getattr(original, "_explorable_held", False):
            continue  # a Panel without this hook: updates still work, as several messages

        def held(self, doc, *args, _original=original, **kwargs):
            background.foreground_busy()  # the curves' worker waits while a reader's change is answered
            try:
                with pn.io.hold(doc):
                    return _original(self, doc, *args, **kwargs)
            finally:
                background.foreground_busy()

        held._explorable_held = True
        setattr(Syncable, name, held)


def configure() -> None:
    """Once per process: Panel's extension for this app, tolerant links, one message per browser event, and
    numba's compiled scheduler and the default runs prepared in the background. (A served app also puts up the
    public server's boundaries: `explorable.server.install()`.)"""
    url.install()
    links.install()
    _one_message_per_browser_event()
    inline_arrays.install()
    prompt_writes.install()
    # No `design`: Panel's Bootstrap design puts Bootstrap's whole sheet into every component's shadow
    # root, and every style recalculation then matches it again (126 of 264 ms of browser work per click).
    pn.extension(
        notifications=True, reconnect=True,
        global_css=[stylesheet_css()], disconnect_notification="", ready_notification="",
    )
    startup.begin()  # numba's compile and the default runs, in the background (explorable.page.startup)


class Notices(StateView):
    """Messages for the reader (a link value that fell back to its default), with a dismiss button."""

    watches = ("notices",)

    def build(self) -> None:
        self.text = TextHTML("", sizing_mode="stretch_width", stylesheets=[stylesheet()], margin=0)
        self.dismiss = pn.widgets.Button(label="Dismiss", margin=(6, 6), width=90)
        self.dismiss.on_click(answer_reader(lambda _e: self.state.dismiss_notices()))
        self.box = pn.Row(self.text, self.dismiss, css_classes=["notices"], sizing_mode="stretch_width",
                          visible=False, margin=(4, 10), stylesheets=[stylesheet()])

    def refresh(self) -> None:
        items = "".join(f"<li>{html.escape(n)}</li>" for n in self.state.notices)
        self.text.object = f'<div class="notice" data-notice="link"><ul>{items}</ul></div>'
        self.box.visible = bool(self.state.notices)

    def __panel__(self):
        return self.box


def _header() -> pn.pane.HTML:
    return pn.pane.HTML(
        f'<header class="masthead"><div class="logo" aria-hidden="true">{logo_svg()}</div>'
        f'<div><h1 id="title">{TITLE}</h1><p class="lede">{LEDE}</p></div></header>',
        sizing_mode="stretch_width", stylesheets=[stylesheet()], margin=(6, 10, 0, 10),
    )


def _section(title: str, note: str = "") -> pn.pane.HTML:
    extra = f' <span class="muted">{note}</span>' if note else ""
    return pn.pane.HTML(f'<div class="chart-title">{title}{extra}</div>', sizing_mode="stretch_width",
                        stylesheets=[stylesheet()], margin=(12, 10, 0, 10))


# Tells a course page that frames the explorable how tall it is, whenever that changes, so the page can
# size the iframe to fit (README, "Embedding in a course page"). The message is a plain object; a parent
# that does not listen ignores it.
EMBED_MESSAGE = "continuous-batching-explorable:height"
_EMBED_SCRIPT = """<script>
(() => {
  if (window.parent === window || window.__cbEmbedHeight) return;
  window.__cbEmbedHeight = true;
  let last = 0;
  const send = () => {
    const height = Math.ceil(document.documentElement.scrollHeight);
    if (height !== last) {
      last = height;
      window.parent.postMessage({type: "%s", height: height}, "*");
    }
  };
  new ResizeObserver(send).observe(document.documentElement);
  new ResizeObserver(send).observe(document.body);
  window.addEventListener("load", send);
  setInterval(send, 1000);  // content inside shadow roots can grow without resizing <body> at once
})();
</script>""" % EMBED_MESSAGE


def _embed_height() -> pn.pane.HTML:
    """An invisible pane whose script posts the page's height to a parent frame."""
    return pn.pane.HTML(_EMBED_SCRIPT, margin=0, height=0, sizing_mode="stretch_width", css_classes=["embed-height"])


class ExplorableApp(pn.viewable.Viewer):
    """One reader's page. `state` is its single source of truth; `views` are there for tests and benchmarks."""

    state = param.ClassSelector(class_=ExplorableState)
    projector = param.Boolean(default=False, doc="text in charts, legends and the log at 16 px or more")
    traffic = param.Boolean(default=True, doc="the steps under traffic and the request-rate curve (the static "
                                              "build, which has no traffic states, leaves them out)")
    prefix = param.Boolean(default=True, doc="the steps with prefix caching (the static build, which has no caching "
                                             "states, leaves them out)")
    memory = param.Boolean(default=True, doc="the four fixes for the memory wall (the static build, which has none "
                                             "of their states, says where they are instead)")

    def __init__(self, **params):
        super().__init__(**params)
        state = self.state
        lanes = LaneChart(state=state)
        self.views = {
            "controls": Controls(state=state),
            "live": LivePanel(state=state),
            "guide": Guide(state=state),
            "traffic_guide": Guide(state=state, steps=TRAFFIC_STEPS, css="traffic-step"),
            "prefix_guide": Guide(state=state, steps=PREFIX_STEPS, css="prefix-step"),
            "memory_guide": Guide(state=state, steps=MEMORY_STEPS, css="memory-step"),
            "notices": Notices(state=state),
            "readouts": Readouts(state=state),
            "lanes": lanes,
            "strips": Strips(state=state, x_range=lanes.x_range),
            "curves": Curves(state=state),
            "traffic_curve": TrafficCurve(state=state, projector=self.projector),
            "logs": LogView(state=state),
            "share": url.ShareLink(state=state),
        }
        if self.projector:
            url.set_page_flags(state, {projector.FLAG: "1"})
            for fig in (lanes.figure, self.views["strips"].batch_fig, self.views["strips"].kv_fig,
                        self.views["curves"].by_seqs.figure, self.views["curves"].by_pool.figure):
                projector.enlarge(fig)
            for fig in (lanes.figure, self.views["strips"].batch_fig, self.views["strips"].kv_fig):
                fig.min_border_left = projector.LANE_BORDER_LEFT
                fig.height += 30  # room for 16 px tick labels beside the strips' axis labels
            lanes.figure.min_border_bottom = 12  # the last request's 16 px tick label
            self.views["share"].refresh()

    def __panel__(self):
        v = self.views
        sidebar = pn.Column(
            v["controls"], v["share"], v["live"],
            css_classes=["sidebar"], margin=0, stylesheets=[stylesheet()], styles={"flex": "0 0 310px"},
        )
        traffic_steps = [_section("Then, under traffic", "(requests arrive over time)"), v["traffic_guide"]]
        prefix_steps = [_section("Then, with prefix caching", "(computed prompt blocks kept for reuse)"),
                        v["prefix_guide"]]
        memory_steps = [_section("Four fixes for the memory wall", "(vLLM's own flags, one at a time)"),
                        v["memory_guide"]] if self.memory else [_section(
                            "Four fixes for the memory wall", "(--max-model-len, --gpu-memory-utilization, "
                            "--kv-cache-dtype, --tensor-parallel-size: a guided walk in the served explorable; "
                            "this static page holds none of their states)")]
        traffic_curve = [v["traffic_curve"]]  # with its own heading: it shows only while traffic arrives
        main = pn.Column(
            v["guide"],
            *(traffic_steps if self.traffic else []),
            *(prefix_steps if self.prefix else []),
            *memory_steps,
            v["notices"],
            v["readouts"],
            v["lanes"],
            v["strips"],
            _section("Throughput if you moved one control", "(everything else as set; the orange dot is now)"),
            v["curves"],
            *(traffic_curve if self.traffic else []),
            _section("What vLLM would log"),
            v["logs"],
            pn.pane.HTML(
                "<footer>Simulated: vLLM V1's scheduler (v0.11 rules; v0.33 with its full-prompt gate off) on a "
                "roofline clock fitted to Qwen3-8B on an H100 SXM. Settings live in the URL: copy it to share "
                "this exact state.</footer>",
                sizing_mode="stretch_width", stylesheets=[stylesheet()], margin=(16, 10),
            ),
            css_classes=["main"], margin=(0, 0, 0, 8), stylesheets=[stylesheet()],
            styles={"flex": "1 1 560px", "min-width": "0"},
        )
        return pn.Column(
            same_sheet_kept(),  # first, so that the page's first updates are painted with it
            _header(),
            # Side by side from 900 px; below, the stylesheet stacks the controls above the charts.
            pn.FlexBox(sidebar, main, flex_wrap="wrap", sizing_mode="stretch_width", margin=0,
                       css_classes=["page-body"], stylesheets=[stylesheet()]),
            _embed_height(),
            css_classes=["explorable"], sizing_mode="stretch_width", margin=0, stylesheets=[stylesheet()],
            styles=dict(projector.STYLES) if self.projector else {},
        )


def build_app(state: ExplorableState | None = None, sync: bool = True) -> ExplorableApp:
    """One page of the explorable; with `sync`, the served page's URL query drives and follows the controls."""
    state = state or ExplorableState()
    wants_projector = False
    if sync:
        url.sync_url(state)
        location = pn.state.location
        if location is not None:
            wants_projector = projector.wanted(dict(parse_qsl((location.search or "").lstrip("?"))))
    return ExplorableApp(state=state, projector=wants_projector)
