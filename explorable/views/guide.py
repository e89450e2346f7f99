"""Guided steps: the course's experiments in order, each a preset of the controls and a few words on what
to look at. Choosing a step sets every control (so a step always shows the same run, wherever the reader
has wandered); the step whose settings match the page is highlighted.
"""
from __future__ import annotations

import html
from dataclasses import dataclass, field

import panel as pn
import param

from explorable.views.assets import END_OF_WALK_STYLES, keep_flags_whole, set_styles, stylesheet
from explorable.patches.crossed_changes import settle_crossings
from explorable.patches.prompt_changes import answer_at_once
from explorable.state.store import CONTROLS, ExplorableState
from explorable.views.fixes_table import table_html, table_rows
from explorable.views.state_view import StateView, answer_reader
from explorable.patches.text_updates import TextHTML


@dataclass(frozen=True)
class Step:
    title: str
    text: str
    settings: dict = field(default_factory=dict)  # changes from the defaults
    # A closing step's table: the steps (by index) whose runs it sets side by side, with what each row is called.
    table: tuple[tuple[int, str], ...] = ()


STEPS = (
    Step(
        "As shipped",
        "256 requests wait in the queue; the scheduler re-decides the batch before every pass and hands out cache "
        "as tokens arrive, with room for 256 sequences. Before touching anything, compare the largest batch with "
        "the slots it was allowed. The cache, not the cap, decided where it stopped.",
    ),
    Step(
        "Cap at 64",
        "Fewer slots, more tokens per second. With 64 sequences the cache never overflows, nobody is evicted, no "
        "prompt is computed twice, and the amber lanes turn teal.",
        {"max_num_seqs": 64},
    ),
    Step(
        "Static batching",
        "Keep 64 slots but make the request the unit, and reserve each request's cache up front as static servers "
        "did: a batch is formed, runs until its longest member is done, then the next one forms. The grey "
        "stretches are requests queued behind slots that finished long ago and sit idle.",
        {"max_num_seqs": 64, "unit": "request", "allocation": "reserve"},
    ),
    Step(
        "Reserve up front",
        "Per-pass scheduling again, but a request is admitted only if its prompt plus everything it declares it "
        "might generate fits, as Orca does. Nothing is ever evicted; instead the batch shrinks, and much of the "
        "held cache never holds a token.",
        {"allocation": "reserve"},
    ),
    Step(
        "Declared max_tokens",
        "Clients here declare exactly what they generate. Drag the declared max_tokens up and watch the batch and "
        "the live share of the cache fall. Then switch allocation to on demand: the same slider changes nothing.",
        {"allocation": "reserve", "declared_multiple": 1.0},
    ),
    Step(
        "Uniform outputs",
        "Every request now generates 256 tokens, in static batches of 64. Flip the scheduling unit between request "
        "and pass: when everyone finishes together there is hardly an idle slot to refill, and the famous "
        "speed-up all but disappears.",
        {"spread": 1.0, "max_num_seqs": 64, "unit": "request"},
    ),
    Step(
        "Memory wall",
        "A 2 GiB pool with 512 slots. Every setting is in range and the engine serves, but it keeps admitting "
        "more than it can hold and pays in evictions and repeated prefill. This is thrashing: the lanes turn "
        "magenta.",
        {"pool_gib": 2.0, "max_num_seqs": 512},
    ),
)


# The story continues under traffic: requests arrive over time instead of all waiting at 0 s.
TRAFFIC_STEPS = (
    Step(
        "Traffic arrives",
        "Requests now come about four a second, at random. Nobody chooses the batch any more: it is whatever "
        "traffic has brought, here rarely more than a dozen. Each lane starts where its request arrives, most are "
        "admitted at the next pass, and the first token comes after one prefill: TTFT is tens of milliseconds.",
        {"arrival": "rate", "request_rate": 4.0},
    ),
    Step(
        "Past the knee",
        "At 16 a second the server cannot keep up. The curve below flattens at what these settings serve with "
        "everything queued, about 12 a second, and the extra requests wait: TTFT p99 climbs from a tenth of a "
        "second to two seconds, twenty times over, while TPOT only doubles or so (bigger batches, slower passes). "
        "Goodput falls below the rate served.",
        {"arrival": "rate", "request_rate": 16.0},
    ),
    Step(
        "A cap buys smooth tokens",
        "At 10 a second, cap the batch at 16 sequences. Each pass is lighter, so tokens stream faster (TPOT p50 "
        "about 9 ms instead of 12), but the cap turns away work the pool could hold and the queue grows: TTFT p99 "
        "goes from about 0.15 s to over 10 s. Drag --max-num-seqs back up and watch the trade reverse.",
        {"arrival": "rate", "request_rate": 10.0, "max_num_seqs": 16},
    ),
    Step(
        "Smaller chunks, steadier streams",
        "With an 8,192-token budget a newly arrived prompt is prefilled in one pass, and every decode in that pass "
        "waits for it: ITL p99 is about 52 ms against an 8 ms median. A 1,024-token budget cuts prompts into chunks "
        "that ride along with the decodes: ITL p99 falls to about 28 ms, for slightly later first tokens.",
        {"arrival": "rate", "request_rate": 8.0, "max_num_batched_tokens": 1024},
    ),
    Step(
        "A preemption is a stall",
        "Shrink the pool to 2 GiB at 8 a second. Requests are evicted to make room; an evicted request keeps the "
        "tokens it has sent, but its user sees nothing until it is readmitted and has recomputed. Hover an amber "
        "lane: its worst ITL is that stall, often seconds, in the middle of an answer.",
        {"arrival": "rate", "request_rate": 8.0, "pool_gib": 2.0},
    ),
)


# Then prefix caching: vLLM keeps a computed block's KV under a hash of its tokens until the block is reused.
PREFIX_STEPS = (
    Step(
        "Caching refunds an eviction",
        "Back to the starting point, with prefix caching on. An evicted request's blocks are freed but not wiped: "
        "when it is readmitted, the scheduler looks its prompt up and finds most of it still there. Prompt tokens "
        "recomputed fall from about 40,000 to about 12,000, a third. Hover an amber lane: the light teal at its "
        "start is what came back from cache.",
        {"enable_prefix_caching": True},
    ),
    Step(
        "The race at the memory wall",
        "The 2 GiB pool with 512 slots again. Freed blocks are handed out oldest first, so an evicted request's "
        "blocks survive until the pool comes round to them; the newest-out rule brings it back before that, most "
        "of the time. Recompute falls from about 57,000 prompt tokens to under 10,000, yet throughput hardly "
        "moves: the evictions, and the decode work they throw away, still happen.",
        {"enable_prefix_caching": True, "pool_gib": 2.0, "max_num_seqs": 512},
    ),
    Step(
        "A shared system prompt",
        "Every prompt now opens with the same 1,024 tokens. With caching they are computed once and their blocks "
        "shared by every request that holds them, so each request costs the cache only what is its own: the "
        "largest batch grows from 88 to all 256 slots, nothing is evicted, and output rises by about three "
        "quarters. Switch caching off to see the same prompts each paying for their own copy.",
        {"enable_prefix_caching": True, "system_prompt_len": 1024},
    ),
)


# Finally the course's four fixes for the memory wall, one at a time from the same wall. The wall here is sized
# as vLLM sizes it (engine/memory.py), so that each fix acts through vLLM's own arithmetic: 0.23 of an H100's
# memory leaves about the 2 GiB pool of the "Memory wall" step above once the weights and the profiling pass are
# paid for.
_WALL = {"gpu_memory_utilization": 0.23, "max_num_seqs": 512}
MEMORY_STEPS = (
    Step(
        "The memory wall",
        "Where the first walk ended: a 2 GiB pool and 512 slots, the batch at 12, 42 evictions. The log's reading "
        "is the course's diagnosis: running far below --max-num-seqs, requests waiting, the cache full. Memory is "
        "the cap, and there are four fixes for it, none of which is --max-num-seqs.",
        {"pool_gib": 2.0, "max_num_seqs": 512},
    ),
    Step(
        "The same wall, as vLLM sizes it",
        "A real server does not choose its pool in GiB: vLLM sizes it at start-up. 0.23 of this H100's 79 GiB, less "
        "15.3 GiB of weights and the activations of a profiling pass, leaves 1.8 GiB, 802 blocks: the same wall "
        "(a batch of 11, 40 evictions, 55,000 prompt tokens recomputed). The next four steps each apply one fix to "
        "it, alone.",
        _WALL,
    ),
    Step(
        "Lower --max-model-len",
        "The model's 40,960-token context does not fit this pool at all, so vLLM would refuse to start; at 4,096 "
        "it starts and Maximum concurrency reads 3.13x. The batch, the evictions and the throughput do not move: "
        "vLLM reserves nothing for the context length, it only refuses longer requests. Try 2,048: 45 of the 256 "
        "requests are refused.",
        {**_WALL, "max_model_len": 4096},
    ),
    Step(
        "Raise --gpu-memory-utilization",
        "0.26 instead of 0.23: the same 0.03 the course suggests going from 0.92 to 0.95, 2.4 GiB of an 80 GB "
        "card. Every byte of it goes to the cache, which more than doubles: 1,882 blocks, a largest batch of 25 "
        "and about 1,760 tokens/s. The headroom it takes was for CUDA graphs and other processes.",
        {**_WALL, "gpu_memory_utilization": 0.26},
    ),
    Step(
        "Quantize the cache",
        "--kv-cache-dtype fp8: the same 1.8 GiB holds twice the tokens (1,605 blocks), so the batch doubles and "
        "each pass reads half the KV bytes: about 1,700 tokens/s. The price is a little accuracy; check your evals.",
        {**_WALL, "kv_cache_dtype": "fp8"},
    ),
    Step(
        "Shard it",
        "--tensor-parallel-size 2: each GPU holds half the weights and half of every token's KV, so at the same "
        "0.23 each keeps 9.1 GiB for a cache whose tokens are half the size: 8,320 blocks. The batch grows to "
        "about 100 and the node serves about 5,600 tokens/s, 2,800 per GPU; every layer pays two all-reduces "
        "over NVLink.",
        {**_WALL, "tensor_parallel_size": 2},
    ),
    Step(
        "What each fix bought",
        "All four at once, and each fix alone, side by side below. The cap never moved: at the wall "
        "--max-num-seqs is not what limits the batch, memory is.",
        {**_WALL, "gpu_memory_utilization": 0.26, "kv_cache_dtype": "fp8", "tensor_parallel_size": 2,
         "max_model_len": 4096},
        table=((1, "the wall"), (2, "--max-model-len 4096"), (3, "--gpu-memory-utilization 0.26"),
               (4, "--kv-cache-dtype fp8"), (5, "--tensor-parallel-size 2"), (6, "all four")),
    ),
)


@dataclass(frozen=True)
class GuideSpec:
    """One guide of the page: the steps it walks and how its tab reads. The page shows one guide at a time,
    chosen by its tab (`GuideTabs`), in the order of `GUIDES`; a guide is added here, as data."""

    key: str  # the page's name for its view (ExplorableApp.views[key])
    label: str  # its tab
    steps: tuple[Step, ...]
    css: str = "step"  # class prefix of its step buttons and text (tests and the static page find them by it)
    about: str = ""  # one line under the tab: what the guide's experiments have in common
    needs: str = ""  # a page feature it needs ('traffic', 'prefix', 'memory'): a page without it (the static build)
    # leaves it out
    absent: str = ""  # what a page that leaves it out says in its place ('' for nothing)
    # The controls its steps ask the reader to try: the static build holds each step with each of these moved to
    # its stops (explorable.state.control_specs: static_stops or step_stops), one at a time.
    tries: tuple[str, ...] = ()


GUIDES: tuple[GuideSpec, ...] = (
    GuideSpec("guide", "All at once", STEPS, "step", "The article's experiments: 256 requests queued at 0 s."),
    GuideSpec("traffic_guide", "Under traffic", TRAFFIC_STEPS, "traffic-step",
              "Requests arrive over time, as on a real server.", needs="traffic",
              tries=("request_rate", "burstiness", "max_num_seqs", "max_num_batched_tokens")),
    GuideSpec("prefix_guide", "With prefix caching", PREFIX_STEPS, "prefix-step",
              "Computed prompt blocks are kept for reuse.", needs="prefix",
              tries=("enable_prefix_caching", "system_prompt_len", "turns")),
    GuideSpec("memory_guide", "Memory-wall fixes", MEMORY_STEPS, "memory-step",
              "Four fixes for the memory wall: vLLM's own flags, one at a time, from the same wall.", needs="memory",
              absent="Four fixes for the memory wall (--max-model-len, --gpu-memory-utilization, --kv-cache-dtype, "
                     "--tensor-parallel-size) is a guide of the served explorable (panel serve app.py): this static "
                     "page holds none of their states."),
)


def step_settings(state: ExplorableState, index: int, steps: tuple = STEPS) -> dict:
    """Every control's value for step `index`: the defaults plus the step's changes."""
    return {**state.defaults(), **steps[index].settings}


def settings_sentence(state: ExplorableState, index: int, steps: tuple = STEPS) -> str:
    """Every control step `index` changes from the starting point, by its sidebar label and value."""
    changes = steps[index].settings
    if not changes:
        return "This step sets every control to its starting point."
    named = []
    for name in CONTROLS:  # sidebar order
        if name in changes:
            p = state.param[name]
            shown = {v: k for k, v in (getattr(p, "names", None) or {}).items()}.get(changes[name], changes[name])
            shown = ("on" if shown else "off") if isinstance(shown, bool) else (
                f"{shown:g}" if isinstance(shown, float) else str(shown))
            named.append(f"{p.label} {shown}" if p.label.startswith("--") else f"{p.label}: {shown}")
    return "This step sets " + "; ".join(named) + "; everything else to its starting point."


def step_table(state: ExplorableState, index: int, steps: tuple = STEPS) -> str:
    """Step `index`'s closing table (HTML), or '' for a step without one."""
    table = steps[index].table
    if not table:
        return ""
    return table_html(table_rows([(name, step_settings(state, i, steps)) for i, name in table]))


def matching_step(state: ExplorableState, steps: tuple = STEPS) -> int | None:
    """The step whose settings are exactly the current controls, if any (a reader's own file is no step's)."""
    if state.uploaded is not None:
        return None
    current = state.control_values()
    for i in range(len(steps)):
        if step_settings(state, i, steps) == current:
            return i
    return None


class Guide(StateView):
    """Numbered step buttons, the chosen step's text, and previous/next."""

    watches = ("trace", "run_error", "uploaded")
    chosen = param.Integer(default=0, bounds=(0, None))
    steps = param.Parameter(default=STEPS, doc="the steps this guide walks (the article's, or TRAFFIC_STEPS)")
    css = param.String(default="step", doc="class prefix: 'step' (the article's guide), 'traffic-step' or 'prefix-step'")

    def build(self) -> None:
        # The numbered steps: one button group (a few models per page rather than a Button each), its lit
        # button the step the controls are at (none when they are at no step, so that choosing the step
        # shown again is a click that counts).
        self.step_buttons = pn.widgets.RadioButtonGroup(
            options={f"{i + 1}. {step.title}": i for i, step in enumerate(self.steps)}, value=None,
            css_classes=["button-row", f"{self.css}-button", f"{self.css}-row"], sizing_mode="stretch_width",
            margin=(2, 0), stylesheets=[stylesheet()])
        self._lighting = self._going = False
        self.step_buttons.param.watch(self._step_clicked, "value")
        answer_at_once(self.step_buttons)
        settle_crossings(self.step_buttons)
        self.prev = pn.widgets.Button(label="\u2190 previous", css_classes=["step-nav"], margin=(2, 3),
                                      stylesheets=[stylesheet()])
        self.next = pn.widgets.Button(label="next step \u2192", css_classes=["step-nav"], margin=(2, 3),
                                      stylesheets=[stylesheet()])
        # At an end the button is greyed, not disabled (explorable.views.assets.END_OF_WALK_STYLES): a key press on it
        # must change nothing, not put the current step's settings back over what the reader has moved.
        self.prev.on_click(answer_reader(lambda _e: self.chosen > 0 and self.go(self.chosen - 1)))
        self.next.on_click(answer_reader(lambda _e: self.chosen < len(self.steps) - 1 and self.go(self.chosen + 1)))
        self.text = TextHTML("", stylesheets=[stylesheet()], margin=(0, 8),
                                 styles={"flex": "1 1 300px", "min-width": "0"})
        # A guide that ends on a table shows it under the text and the buttons, the guide's whole width (only such a
        # guide has the pane: every model costs each page).
        self.table = TextHTML("", stylesheets=[stylesheet()], margin=(0, 8), sizing_mode="stretch_width",
                              css_classes=[f"{self.css}-table"]) if any(s.table for s in self.steps) else None
        match = matching_step(self.state, self.steps)
        self.chosen = match if match is not None else 0
        # Whether the controls have shown a step since the page opened: only then can the reader have moved
        # away from one. A link to a state that is no step opens without the "moved" hint.
        self.followed = match is not None
        # Whether the page opened from a link to settings that are no step of any guide: only then does a state
        # that is no step of this guide need saying so. At the starting point, or at another guide's step, a
        # later guide's first step is an invitation.
        self.linked = not self._at_start() and all(matching_step(self.state, g.steps) is None for g in GUIDES)
        self.param.watch(self.changed, "chosen")

    @answer_reader
    def _step_clicked(self, event) -> None:
        if event.new is not None and not self._lighting:
            self.go(event.new)

    def go(self, index: int) -> None:
        """Show step `index` and set every control to it."""
        self.followed = True
        # One refresh, once the controls are at the step: a refresh between the two would light the step the
        # controls were at for a moment, and Panel sends that to the page, which is handling the click on
        # this step, while it holds back the later change back to this step as an echo of the click; the
        # page would be left lighting the old step, and a click on that would change nothing.
        self._going = True
        try:
            self.chosen = index
            self.state.param.update(**step_settings(self.state, index, self.steps), uploaded=None, upload_read=None)
        finally:
            self._going = False
        self.refresh()

    def _at_start(self) -> bool:
        return self.state.uploaded is None and all(getattr(self.state, name) == value
                                                   for name, value in self.state.defaults().items())

    def refresh(self) -> None:
        if self._going:
            return
        if self.linked and self._at_start():
            self.linked = False  # back at the starting point (Reset): whatever the link opened is left behind
        match = matching_step(self.state, self.steps)
        if match is not None and match != self.chosen:
            self.chosen = match  # the reader reached a step by hand: show its text (this re-enters once)
            return
        step = self.steps[self.chosen]
        self.followed = self.followed or match is not None
        drifted = match is None and self.followed
        with pn.io.hold():
            self._lighting = True
            try:
                self.step_buttons.value = match
            finally:
                self._lighting = False
            set_styles(self.prev, END_OF_WALK_STYLES, self.chosen == 0)
            set_styles(self.next, END_OF_WALK_STYLES, self.chosen == len(self.steps) - 1)
            if drifted:
                hint = (' <span class="drifted">(you have moved the controls since; choose the step again to '
                        "return to it)</span>")
            elif match is None and self.linked:  # opened from a link to settings of its own: nothing was moved
                hint = (' <span class="drifted">(this link opened settings that are none of the steps; choose a '
                        "step to follow the course from there)</span>")
            else:
                hint = ""
            self.text.object = (
                f'<div class="{self.css}-text" data-step="{self.chosen + 1}"><span class="step-no">Step '
                f"{self.chosen + 1} of {len(self.steps)}</span> <b>{step.title}.</b> {keep_flags_whole(step.text)} "
                f'<span class="step-sets">'
                f'{keep_flags_whole(html.escape(settings_sentence(self.state, self.chosen, self.steps)))}'
                f"</span>{hint}</div>"
            )
            if self.table is not None:
                self.table.object = step_table(self.state, self.chosen, self.steps)
                self.table.visible = bool(self.steps[self.chosen].table)

    def __panel__(self):
        return pn.Column(
            self.step_buttons,
            # The buttons sit beside the text, or under it on a phone.
            pn.FlexBox(self.text, pn.Column(self.prev, self.next, margin=0, width=130), flex_wrap="wrap",
                       sizing_mode="stretch_width", margin=0),
            *([self.table] if self.table is not None else []),
            css_classes=["guide"], sizing_mode="stretch_width", margin=(0, 6),
        )
