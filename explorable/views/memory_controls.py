"""The sidebar's GPU memory section's two pieces of code (its controls are declared in
explorable.state.control_specs like any other): the switch for a control that may be unset, and the line that
says what the engine made of the pool.

`OptionalSlider`: --gpu-memory-utilization is either unset (the pool is the GiB slider's) or a share of the
GPU's memory: a two-way switch and a slider; moving the slider sets it. `CacheLine`: vLLM's "GPU KV cache size"
and "Maximum concurrency" for the run on screen, and with a utilization each term of the sum that sized the
pool (engine/memory.py).
"""
from __future__ import annotations

import html

import panel as pn
import param

from engine import RunConfig
from engine.presets import GPU_MEMORY_UTILIZATION
from engine.trace import max_concurrency
from explorable.patches.crossed_changes import settle_crossings
from explorable.patches.prompt_changes import answer_at_once
from explorable.state.control_specs import ControlSpec
from explorable.state.store import ExplorableState
from explorable.views.assets import INACTIVE_STYLES, stylesheet, toggled_styles
from explorable.views.state_view import StateView, answer_reader

GIB = 2**30


class OptionalSlider:
    """A switch (unset | set) and a slider for an optional number control; the slider's last value is kept while
    the control is unset, and moving it sets the control."""

    def __init__(self, state: ExplorableState, spec: ControlSpec, unset_label: str,
                 start_value: float = GPU_MEMORY_UTILIZATION) -> None:
        self.state, self.name = state, spec.name
        p = state.param[spec.name]
        self.switch = pn.widgets.RadioButtonGroup(
            options={unset_label: "unset", p.label: "set"}, value=self._mode(), css_classes=[f"ctl-{spec.name}-from"],
            sizing_mode="stretch_width", margin=(4, 12), color="primary", variant="outline",
            stylesheets=[stylesheet()])  # the page's sheet: its focus ring, among others
        value = getattr(state, spec.name)
        self.slider = pn.widgets.FloatSlider(
            label=p.label, start=p.bounds[0], end=p.bounds[1], step=p.step, value=start_value if value is None else value,
            format=spec.number_format or "0.00", css_classes=[f"ctl-{spec.name}"], tags=[{"control": spec.name}],
            sizing_mode="stretch_width", margin=(4, 12, 0, 12), stylesheets=[stylesheet()])
        self._following = False  # while the widgets follow the state, their watchers must not write it back
        self.switch.param.watch(answer_reader(self._switched), "value")
        self.slider.param.watch(answer_reader(self._moved), "value_throttled")
        state.param.watch(self._follow, spec.name)
        answer_at_once(self.switch)
        settle_crossings(self.switch)
        self._follow()
        self.panel = pn.Column(self.switch, self.slider, sizing_mode="stretch_width", margin=0)

    def _mode(self) -> str:
        return "unset" if getattr(self.state, self.name) is None else "set"

    def _switched(self, event) -> None:
        if self._following:
            return
        wanted = None if event.new == "unset" else round(float(self.slider.value), 2)
        if getattr(self.state, self.name) != wanted:
            setattr(self.state, self.name, wanted)

    def _moved(self, event) -> None:
        setattr(self.state, self.name, round(float(event.new), 2))  # moving the slider means: size it by this

    def _follow(self, *_) -> None:
        value = getattr(self.state, self.name)
        self._following = True
        try:
            with pn.io.hold():
                if value is not None and abs(self.slider.value - value) > 1e-9:
                    with param.edit_constant(self.slider):  # a later release at the old value must still count
                        self.slider.param.update(value=value, value_throttled=value)
                self.switch.value = self._mode()  # after the slider: the switch's watcher reads it
                self.slider.styles = toggled_styles(INACTIVE_STYLES, value is None)
        finally:
            self._following = False


def cache_line(cfg: RunConfig) -> str:
    """What vLLM would say about this pool at start-up, and with a utilization how it was sized (HTML)."""
    tokens, concurrency = max_concurrency(cfg)
    per_gpu = f" on each of {cfg.tensor_parallel_size} GPUs" if cfg.tensor_parallel_size > 1 else ""
    text = (f"<b>GPU KV cache size: {tokens:,} tokens</b>{per_gpu} ({cfg.num_gpu_blocks:,} blocks, "
            f"{cfg.kv_cache_gib:,.2f} GiB); Maximum concurrency for {cfg.served_max_model_len:,} tokens per "
            f"request: {concurrency:.2f}x.")
    if cfg.pool_source == "utilization":
        p = cfg.memory_profile
        text += (f" Sized as vLLM does: {p.total_memory / GIB:.2f} GiB &times; {p.gpu_memory_utilization:g} = "
                 f"{p.requested_memory / GIB:.2f} GiB, less {p.weights_memory / GIB:.2f} GiB of weights, "
                 f"{p.activation_peak / GIB:.2f} GiB activation peak at {cfg.max_num_batched_tokens:,} tokens and "
                 f"{p.non_torch_memory / GIB:.2f} GiB outside PyTorch ({html.escape(p.source)}).")
    return text


class CacheLine(StateView):
    """The pool of the run on screen, in vLLM's words."""

    def build(self) -> None:
        self.pane = pn.pane.HTML("", css_classes=["control-note", "cache-line"], stylesheets=[stylesheet()],
                                 margin=(0, 10, 6, 10), sizing_mode="stretch_width")

    def refresh(self) -> None:
        cfg = self.state.config
        if cfg is not None:
            self.pane.object = f"<div>{cache_line(cfg)}</div>"

    def __panel__(self):
        return self.pane
