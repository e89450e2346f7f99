"""Assembles one reader's page: header, sidebar controls, guided steps, notices, readouts, the lane chart
with its strips, the curves and the log terminal; and ties the controls to the page's URL.

`build_app()` makes everything per page (Bokeh models belong to one document); runs are shared through
`explorable.state.runs`' caches. `configure()` is the once-per-process part: Panel's extension and warm-up.
"""
from __future__ import annotations

import html

import panel as pn
import param

from explorable import patches
from explorable.patches import aria_names
from explorable.page import startup, url
from explorable.state import your_workload
from explorable.views import projector
from explorable.views.assets import logo_svg, stylesheet, stylesheet_css
from explorable.views.controls import OPTIONAL_SLIDERS, Controls
from explorable.views.curves import Curves
from explorable.views.data_tables import tables_script
from explorable.views.guide import GUIDES, Guide, GuideSpec
from explorable.views.guide_tabs import GuideTabs
from explorable.views.lanes import LaneChart
from explorable.views.live import LivePanel
from explorable.views.logs_view import LogView
from explorable.patches.paint_fix import same_sheet_kept
from explorable.views.readouts import Readouts
from explorable.views.traffic_curve import TrafficCurve
from explorable.views.your_workload import YourWorkload
from explorable.views.workload_guide import WALK_GROUP_CLASS
from explorable.state.store import CONTROLS, ExplorableState
from explorable.views.strips import Strips
from explorable.views.state_view import StateView, answer_reader
from explorable.patches.text_updates import TextHTML

TITLE = "Continuous batching is not a bigger batch"
LEDE = (
    "Before every forward pass, a vLLM-style scheduler decides again which requests are in the batch. "
    "Move the controls and watch what really sets the batch size: usually the KV cache, not "
    "<code>--max-num-seqs</code>."
)


def configure() -> None:
    """Once per process: the library patches (explorable.patches), Panel's extension for this app, and numba's
    compiled scheduler and the default runs prepared in the background. (A served app also puts up the public
    server's boundaries: `explorable.server.install()`.)"""
    patches.install()
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


def group_names(guides: list[GuideSpec]) -> dict[str, str]:
    """What a screen reader calls each button group of the page, by the group's CSS class: a control's toggle
    and its quick stops by the control's label, a guide's steps and the guides' tabs by what they are."""
    names = {}
    for name in CONTROLS:
        label = ExplorableState.param[name].label
        names[f"ctl-{name}"] = label
        names[f"stop-{name}"] = f"{label}: quick stops"
        if name in OPTIONAL_SLIDERS:  # its switch: the slider's number, or what stands in for it
            names[f"ctl-{name}-from"] = f"KV cache pool from: {OPTIONAL_SLIDERS[name]} or {label}"
    names.update({f"{spec.css}-row": f"steps: {spec.label.lower()}" for spec in guides})
    names["guide-tabs"] = "guides"
    names[WALK_GROUP_CLASS] = "steps: your workload, your server"
    return names


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
# size the iframe to fit (docs/embedding.md, "Embed the served app"). The message is a plain object; a parent
# that does not listen ignores it. A frame sized to its page never scrolls itself, so a results bar kept in
# sight by `position: sticky` would stay at the frame's top: the documented snippet answers with the part of
# the frame that is on screen (VIEWPORT_MESSAGE: `top`, the px of the frame above the parent's window), and
# the page hands that to its stylesheet as --cb-view-top (the bar's sticky offset).
EMBED_MESSAGE = "continuous-batching-explorable:height"
VIEWPORT_MESSAGE = "continuous-batching-explorable:viewport"
_EMBED_SCRIPT = """<script>
(() => {
  if (window.parent === window || window.__cbEmbedHeight) return;
  window.__cbEmbedHeight = true;
  window.addEventListener("message", (event) => {
    const d = event.data;
    if (event.source !== window.parent || !d || d.type !== "%s") return;
    const top = Number(d.top);
    if (!Number.isFinite(top)) return;  // anything else from the parent changes nothing
    const most = document.documentElement.scrollHeight;
    document.documentElement.style.setProperty("--cb-view-top", Math.min(Math.max(top, 0), most).toFixed(0) + "px");
  });
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
</script>""" % (VIEWPORT_MESSAGE, EMBED_MESSAGE)


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
    workload = param.Boolean(default=True, doc="the 'Your workload, your server' section (the static build, which "
                                               "cannot read a reader's file, leaves it out and says so)")
    memory = param.Boolean(default=True, doc="the four fixes for the memory wall (the static build, which has none "
                                             "of their states, says where they are instead)")

    def __init__(self, **params):
        super().__init__(**params)
        state = self.state
        lanes = LaneChart(state=state)
        guides = {spec.key: (spec, Guide(state=state, steps=spec.steps, css=spec.css)) for spec in self.guide_specs()}
        self.views = {
            "controls": Controls(state=state),
            "live": LivePanel(state=state),
            **{key: guide for key, (_, guide) in guides.items()},
            "guides": GuideTabs(state=state, guides=list(guides.values())),
            "notices": Notices(state=state),
            "readouts": Readouts(state=state),
            "lanes": lanes,
            "strips": Strips(state=state, x_range=lanes.x_range),
            "curves": Curves(state=state),
            "traffic_curve": TrafficCurve(state=state, projector=self.projector),
            "logs": LogView(state=state),
            "share": url.ShareLink(state=state),
        }
        if self.workload:
            self.views["your_workload"] = YourWorkload(state=state)
            _forget_file_with_the_session(state)
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

    def guide_specs(self) -> list[GuideSpec]:
        """The guides this page shows: every one of GUIDES whose feature the page has."""
        has = {"traffic": self.traffic, "prefix": self.prefix, "memory": self.memory}
        return [spec for spec in GUIDES if has.get(spec.needs, True)]

    def __panel__(self):
        v = self.views
        sidebar = pn.Column(
            v["readouts"].bar,  # in sight while the reader works the controls, below 900 px (the stylesheet)
            v["controls"], v["share"], v["live"],
            css_classes=["sidebar"], margin=0, stylesheets=[stylesheet()], styles={"flex": "0 0 310px"},
        )
        traffic_curve = [v["traffic_curve"]]  # with its own heading: it shows only while traffic arrives
        yours = [v["your_workload"]] if self.workload else [_section(
            "Your workload, your server", "(your own lengths, trace file and vLLM log lines need the served "
            "explorable: this page has no server to read them)")]
        shown = self.guide_specs()
        # A guide this page leaves out, where its spec says so, is named in its place (the static build's memory fixes).
        absent = [pn.pane.HTML(f'<p class="guide-absent muted" data-absent="{spec.key}">{html.escape(spec.absent)}</p>',
                               sizing_mode="stretch_width", stylesheets=[stylesheet()], margin=(0, 10))
                  for spec in GUIDES if spec not in shown and spec.absent]
        main = pn.Column(
            v["guides"],
            *absent,
            v["notices"],
            v["readouts"],
            v["lanes"],
            v["strips"],
            v["lanes"].description,  # the lanes and strips in words, and their tables, under both
            v["strips"].description,
            _section("Throughput if you moved one control", "(everything else as set; the orange dot is now)"),
            v["curves"],
            *(traffic_curve if self.traffic else []),
            _section("What vLLM would log"),
            v["logs"],
            *yours,  # last, as in the course: check your own traffic and your own server
            pn.pane.HTML(
                "<footer>Simulated: vLLM V1's scheduler as vLLM 0.11 (synchronous: the article's engine, the "
                + ("default) or with vLLM 0.34's defaults (async scheduling, the full-prompt gate; under Advanced)"
                   # (a page without the served sections is the static build: it holds the synchronous engine only)
                   if self.workload else "only one this static page holds)")
                + ", on a roofline clock fitted to Qwen3-8B on an H100 SXM. Settings live in the URL: copy it to "
                "share this exact state.</footer>",
                sizing_mode="stretch_width", stylesheets=[stylesheet()], margin=(16, 10),
            ),
            css_classes=["main"], margin=(0, 0, 0, 8), stylesheets=[stylesheet()],
            styles={"flex": "1 1 560px", "min-width": "0"},
        )
        return pn.Column(
            *same_sheet_kept(),  # first, so that the page's first updates are painted with it
            *aria_names.named_widgets(group_names(self.guide_specs())),  # before the widgets, where it can
            tables_script(),  # each chart's data as a table, built in the browser when the reader opens it
            _header(),
            # Side by side from 900 px; below, the stylesheet stacks the controls above the charts.
            pn.FlexBox(sidebar, main, flex_wrap="wrap", sizing_mode="stretch_width", margin=0,
                       css_classes=["page-body"], stylesheets=[stylesheet()]),
            _embed_height(),
            css_classes=["explorable"], sizing_mode="stretch_width", margin=0, stylesheets=[stylesheet()],
            styles=dict(projector.STYLES) if self.projector else {},
        )


def _forget_file_with_the_session(state: ExplorableState) -> None:
    """When the reader's session ends, what its file made (cached runs, views' data) goes with it."""
    if pn.state.curdoc is None or pn.state.curdoc.session_context is None:
        return
    pn.state.on_session_destroyed(lambda _context: your_workload.forget(state.uploaded))


def build_app(state: ExplorableState | None = None, sync: bool = True) -> ExplorableApp:
    """One page of the explorable; with `sync`, the served page's URL query drives and follows the controls."""
    state = state or ExplorableState()
    wants_projector = False
    if sync:
        url.sync_url(state)
        location = pn.state.location
        if location is not None:
            wants_projector = projector.wanted(url.link_query(location))
    return ExplorableApp(state=state, projector=wants_projector)
