"""The sidebar's GPU memory section: the course's fixes for the memory wall, as vLLM's own flags.

Where the pool comes from (the GiB slider, or --gpu-memory-utilization as vLLM sizes it), the cache's dtype,
tensor parallelism and --max-model-len; and one line under them with what the engine made of it: vLLM's
"GPU KV cache size" and "Maximum concurrency", and with a utilization, each term of the sum that sized the
pool (engine/memory.py).
"""
from __future__ import annotations

import html

import panel as pn
import param

from engine import RunConfig
from engine.presets import GPU_MEMORY_UTILIZATION
from engine.trace import max_concurrency
from explorable.page.assets import INACTIVE_STYLES, stylesheet, toggled_styles
from explorable.patches.crossed_changes import settle_crossings
from explorable.patches.prompt_changes import answer_at_once
from explorable.state.store import ExplorableState

GIB = 2**30
POOL_FROM = {"GiB slider": "pool_gib", "--gpu-memory-utilization": "utilization"}
FP8_CAVEAT = ("fp8 keeps each key and value in one byte: twice the tokens in the same memory and half the bytes a "
              "pass reads, for a small loss of accuracy (per-tensor scales; check your own evals).")


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


class MemoryControls(pn.viewable.Viewer):
    """--gpu-memory-utilization, --kv-cache-dtype, --tensor-parallel-size and --max-model-len."""

    state = param.ClassSelector(class_=ExplorableState)

    def __init__(self, **params):
        super().__init__(**params)
        s = self.state
        self.pool_from = pn.widgets.RadioButtonGroup(
            label="KV cache pool from", options=POOL_FROM, value=self._source(), css_classes=["ctl-pool_from"],
            sizing_mode="stretch_width", margin=(4, 12), color="primary", variant="outline")
        self.utilization = pn.widgets.FloatSlider(
            label=s.param.gpu_memory_utilization.label, start=s.param.gpu_memory_utilization.bounds[0],
            end=s.param.gpu_memory_utilization.bounds[1], step=s.param.gpu_memory_utilization.step,
            value=s.gpu_memory_utilization or GPU_MEMORY_UTILIZATION, format="0.00",
            css_classes=["ctl-gpu_memory_utilization"], sizing_mode="stretch_width",
            margin=(4, 12, 0, 12))
        self.kv_cache_dtype = pn.widgets.RadioButtonGroup.from_param(
            s.param.kv_cache_dtype, css_classes=["ctl-kv_cache_dtype"], sizing_mode="stretch_width", margin=(4, 12),
            color="primary", variant="outline")
        self.tensor_parallel_size = pn.widgets.RadioButtonGroup.from_param(
            s.param.tensor_parallel_size, css_classes=["ctl-tensor_parallel_size"], sizing_mode="stretch_width",
            margin=(4, 12), color="primary", variant="outline")
        self.max_model_len = pn.widgets.Select.from_param(s.param.max_model_len, css_classes=["ctl-max_model_len"],
                                                          sizing_mode="stretch_width", margin=(4, 12))
        self._following = False  # while the widgets follow the state, their watchers must not write it back
        committing = (self.pool_from, self.kv_cache_dtype, self.tensor_parallel_size, self.max_model_len)
        answer_at_once(*committing)
        settle_crossings(*committing)
        self.pool_from.param.watch(self._pool_from_chosen, "value")
        self.utilization.param.watch(self._utilization_moved, "value_throttled")
        s.param.watch(self._follow_state, "gpu_memory_utilization")
        self.cache = pn.pane.HTML("", css_classes=["control-note", "cache-line"], stylesheets=[stylesheet()],
                                  margin=(0, 10, 6, 10), sizing_mode="stretch_width")
        s.param.watch(self._cache_line, ["trace"])
        self._follow_state()
        self._cache_line()

    def _source(self) -> str:
        return "pool_gib" if self.state.gpu_memory_utilization is None else "utilization"

    def _pool_from_chosen(self, event) -> None:
        if self._following:
            return
        wanted = None if event.new == "pool_gib" else float(self.utilization.value)
        if self.state.gpu_memory_utilization != wanted:
            self.state.gpu_memory_utilization = wanted

    def _utilization_moved(self, event) -> None:
        # Moving the slider means sizing the pool by it, whatever the pool came from before.
        self.state.gpu_memory_utilization = round(float(event.new), 2)

    def _follow_state(self, *_) -> None:
        util = self.state.gpu_memory_utilization
        self._following = True
        try:
            with pn.io.hold():
                if util is not None and abs(self.utilization.value - util) > 1e-9:
                    self.utilization.value = util
                self.pool_from.value = self._source()
                self.utilization.styles = toggled_styles(INACTIVE_STYLES, util is None)
        finally:
            self._following = False

    def _cache_line(self, *_) -> None:
        cfg = self.state.config
        if cfg is not None:
            self.cache.object = f"<div>{cache_line(cfg)}</div>"

    def __panel__(self):
        note = lambda text: pn.pane.HTML(f"<div>{text}</div>", css_classes=["control-note"],  # noqa: E731
                                         stylesheets=[stylesheet()], margin=(0, 10, 6, 10), sizing_mode="stretch_width")
        return pn.Column(
            self.pool_from, self.utilization,
            note("vLLM sizes the pool at start-up: this share of each GPU's memory, less the weights, the "
                 "activation peak of a profiling pass at --max-num-batched-tokens and memory outside PyTorch."),
            self.kv_cache_dtype, note(FP8_CAVEAT),
            self.tensor_parallel_size,
            note("Splits each layer's weights and KV heads across the GPUs of one node, at two all-reduces per "
                 "layer over NVLink. The pool is per GPU; throughput is the node's and per GPU."),
            self.max_model_len,
            note("Longer requests (prompt + output) are refused with an error. It divides into Maximum "
                 "concurrency; it reserves nothing, so the batch does not change."),
            self.cache,
            sizing_mode="stretch_width", margin=0, css_classes=["memory-controls"],
        )
