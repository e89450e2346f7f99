"""Every control of the page, declared once, in sidebar and URL order.

A control is a RunConfig field, whose kind, range, label and help engine/settings.py declares, or a setting of
the page alone (the SLO targets, declared here in the same form). Its entry here adds what only the page
needs: its sidebar section, its quick stops, the static build's grid, the slider's number format and the line
under it. Everything else is derived from the two: the state's parameters (explorable.state.store), the
sidebar's widgets (explorable.views.controls), the URL's keys and their order (explorable.page.url), the
values a browser may send (explorable.server.guard) and the static build's grid (explorable.static_site).
No Panel here.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import param

from engine import RunConfig
from engine.settings import ALLOCATIONS, SETTINGS, UNITS, Setting

SECTIONS = ("Scheduler", "KV cache", "GPU memory", "Workload", "Traffic", "Advanced")
# The "Your workload" section of the page (explorable/views/your_workload.py) draws its own inputs: its controls
# are part of the run and the link, but not of the sidebar nor of the static build (which leaves the section out).
YOUR_WORKLOAD = "Your workload"

# The production setting each mode stands for, so a student can find it on a real server (TensorRT-LLM's
# CapacitySchedulerPolicy; vLLM has no such choice: it always allocates on demand and preempts).
PRODUCTION_NAMES = {
    "on-demand": "vLLM's only behaviour; TensorRT-LLM's MAX_UTILIZATION",
    "reserve": "TensorRT-LLM's default, GUARANTEED_NO_EVICT",
    "pass": "continuous batching: vLLM; TensorRT-LLM's in-flight batching",
    "request": "TensorRT-LLM's legacy STATIC_BATCH",
}

# A log-scale slider moves log2 of its control in steps of this; the control keeps 3 significant digits.
LOG_STEP = 0.125


def snap_to_step(value: float, start: float, end: float, step: float) -> float:
    """`value` on the grid start + k * step, inside [start, end] (a slider's own rule)."""
    if step <= 0:
        return min(max(value, start), end)
    k = round((value - start) / step)
    snapped = min(max(start + k * step, start), end)
    return float(round(snapped, 9))


@dataclass(frozen=True)
class ControlSpec:
    """What the page adds to a setting's declaration (engine/settings.py, or `page_setting` here)."""

    name: str
    section: str  # one of SECTIONS
    stops: tuple = ()  # the sidebar's quick stops, one click each
    stop_label: str = "{}"  # how a stop's button reads its value
    static_stops: tuple = ()  # the static build's grid for this control; none: fixed at its starting value there
    # The static build's values of a control outside that grid (its full product would explode): held around each
    # step of a guide that asks the reader to try it (GuideSpec.tries), one control changed from the step.
    step_stops: tuple = ()
    number_format: str | None = None  # the slider's number format (Bokeh's NumeralTickFormatter syntax)
    slider_step: float | None = None  # the slider's step, where the setting declares none
    slider_end: float | None = None  # the slider's end, where it stops short of what a link may set
    log_scale: bool = False  # the slider moves log2 of the value (a rate spanning orders of magnitude)
    dropdown: bool = False  # named choices in a drop-down, not a row of buttons (too many for a phone's width)
    note: str = ""  # the line of text under the control in the sidebar
    page_setting: Setting | None = None  # the declaration of a control that is no RunConfig field
    page_default: Any = None  # and its starting value
    # In the link as a group: written whole while any member differs from its starting value, else left out
    # (the two-number form: a link to the article's workload stays as short as before).
    link_group: str = ""

    @property
    def setting(self) -> Setting:
        return self.page_setting or SETTINGS[self.name]

    @property
    def in_run(self) -> bool:
        """Is it a RunConfig field (a change re-runs the engine)? The SLO targets are read off the run."""
        return self.page_setting is None

    @property
    def default(self) -> Any:
        return getattr(RunConfig(), self.name) if self.in_run else self.page_default

    def parameter(self) -> param.Parameter:
        """The state's parameter: the setting's default, label and text, and the range the page offers (the
        declaration's `ui`, else the setting's own)."""
        s = self.setting
        common = {"default": self.default, "label": s.label, "doc": s.doc or s.help}
        if s.kind is bool:
            return param.Boolean(**common)
        # An optional number offered as a few named values (--max-model-len), not as a slider's (lo, hi, step).
        if s.choices or (s.optional and s.ui and s.choice_labels):
            choices = s.ui or s.allowed()
            return param.Selector(objects=dict(zip(s.choice_labels, choices)) if s.choice_labels else list(choices),
                                  **common)
        lo, hi, step = s.ui or (s.lo, s.hi, None)
        kind = param.Integer if s.kind is int else param.Number
        # An optional setting may be unset (None): a link says "null", and the widget says what then applies.
        return kind(bounds=(lo, hi), allow_None=s.optional, **({"step": step} if step else {}), **common)

    def typed(self, value: Any) -> Any:
        """A stop's value as the control holds it (a float control's stops are floats)."""
        return float(value) if self.setting.kind is float else value

    def from_slider(self, position: float) -> Any:
        """The control's value at a slider position (log-scale sliders: 2 ** position, 3 significant digits)."""
        return float(f"{2 ** position:.3g}") if self.log_scale else position

    def to_slider(self, value: float) -> float:
        return math.log2(value) if self.log_scale else value


def _slo_setting(name: str, label: str, doc: str, lo: float, hi: float) -> Setting:
    return Setting(name, float, label, help=doc, doc=doc, lo=lo, hi=hi)


CONTROL_SPECS: dict[str, ControlSpec] = {c.name: c for c in (
    ControlSpec("max_num_seqs", "Scheduler", stops=(1, 8, 32, 64, 128, 256, 512),
                static_stops=(1, 8, 32, 64, 128, 256, 512),
                note="Stops admission at this many running sequences. Nothing tries to fill it."),
    ControlSpec("pool_gib", "KV cache", stops=(2, 8, 16, 32, 64), stop_label="{:g} GiB", number_format="0.0",
                # Finer than the sidebar's stops: a reader of the static page reaches only the grid (its sliders
                # snap to it).
                static_stops=(2, 4, 6, 8, 12, 16, 24, 32, 48, 64)),
    ControlSpec("allocation", "KV cache", static_stops=ALLOCATIONS,
                note=f"On demand may evict ({PRODUCTION_NAMES['on-demand']}). Reserving up front never does (Orca; "
                     f"{PRODUCTION_NAMES['reserve']})."),
    ControlSpec("declared_multiple", "KV cache", stops=(1, 2, 4, 8), stop_label="{:g}x", number_format="0.0",
                static_stops=(1, 2, 4, 8)),
    ControlSpec("unit", "Scheduler", static_stops=UNITS,
                note="Per pass is continuous batching (vLLM; TensorRT-LLM's in-flight batching); per request is "
                     f"static batching ({PRODUCTION_NAMES['request']})."),
    ControlSpec("spread", "Workload", stops=(1, 4, 16, 32), stop_label="{:g}x", number_format="0.0",
                static_stops=(1, 4, 16, 32),
                note="256 requests; total output stays 65,536 tokens at every spread."),
    ControlSpec("model", "Advanced"),
    ControlSpec("gpu", "Advanced"),
    ControlSpec("max_num_batched_tokens", "Advanced", step_stops=(1024, 2048, 8192)),
    ControlSpec("scheduler_reserve_full_isl", "Advanced"),
    ControlSpec("arrival", "Traffic", step_stops=("all-at-once", "rate")),
    ControlSpec("request_rate", "Traffic", stops=(1, 4, 8, 12, 16, 32), stop_label="{:g}/s", log_scale=True,
                step_stops=(1, 4, 8, 12, 16, 32)),
    ControlSpec("burstiness", "Traffic", number_format="0.0", slider_step=0.1, step_stops=(0.5, 1, 2)),
    ControlSpec("enable_prefix_caching", "KV cache", step_stops=(False, True),
                note="vLLM's --enable-prefix-caching: a prompt that starts like one already computed (a shared "
                     "system prompt, or its own after an eviction) reuses those cache blocks instead of computing "
                     "them. Off by default: the article's figures assume it."),
    ControlSpec("system_prompt_len", "Workload", number_format="0,0", step_stops=(0, 256, 1024, 2048)),
    ControlSpec("turns", "Workload", step_stops=(1, 2, 4)),
    # The course's fixes for the memory wall (docs/memory-fixes.md). gpu_memory_utilization may be unset (the pool
    # is then pool_gib's): its widget is a switch between the two and a slider (explorable/views/memory_controls.py).
    ControlSpec("gpu_memory_utilization", "GPU memory", number_format="0.00",
                note="vLLM sizes the pool at start-up: this share of each GPU's memory, less the weights, the "
                     "activation peak of a profiling pass at --max-num-batched-tokens and memory outside PyTorch."),
    ControlSpec("kv_cache_dtype", "GPU memory",
                note="--kv-cache-dtype: fp8 keeps each key and value in one byte: twice the tokens in the same memory "
                     "and half the bytes a pass reads, for a small loss of accuracy (per-tensor scales; check your "
                     "own evals)."),
    ControlSpec("tensor_parallel_size", "GPU memory",
                note="--tensor-parallel-size splits each layer's weights and KV heads across the GPUs of one node, at "
                     "two all-reduces per layer over NVLink. The pool is per GPU; throughput is the node's and per "
                     "GPU."),
    ControlSpec("max_model_len", "GPU memory", dropdown=True,
                note="--max-model-len: longer requests (prompt + output) are refused with an error. It divides into "
                     "Maximum concurrency; it reserves nothing, so the batch does not change."),
    # "Your workload": the two-number form, with its request count and seed (drawn by that section).
    *(ControlSpec(name, YOUR_WORKLOAD, link_group="two-numbers")
      for name in ("output_p50", "output_p99", "prompt_p50", "prompt_p99", "requests", "seed")),
    # Not part of the run (goodput is read off its per-request timing), but in the URL.
    ControlSpec("slo_ttft_ms", "Traffic", number_format="0,0", slider_step=10, slider_end=10_000,
                page_setting=_slo_setting("slo_ttft_ms", "TTFT target (ms)",
                                          "A request meets its SLO when its first token comes within this long.",
                                          10.0, 60_000.0), page_default=1000.0),
    ControlSpec("slo_tpot_ms", "Traffic", number_format="0", slider_step=1, slider_end=200,
                page_setting=_slo_setting("slo_tpot_ms", "TPOT target (ms)",
                                          "... and its later tokens come, on average, at least this often.",
                                          1.0, 1_000.0), page_default=50.0,
                note="SLO targets: goodput counts the requests per second whose TTFT and TPOT both meet them."),
    # Added after every earlier key, so the links written before keep their order.
    ControlSpec("vllm_version", "Advanced",
                note="Which vLLM the page mirrors. Choosing one sets its scheduling defaults below (0.34: async "
                     "scheduling and the full-prompt gate on); the article's figures are 0.11's."),
    ControlSpec("async_scheduling", "Advanced",
                note="vLLM's --async-scheduling: the next pass is planned while this one runs, hiding the host's "
                     "share of each pass; a finished request's blocks come back one pass later."),
)}

# The controls a run depends on (RunConfig's fields), and every control the URL carries, in URL order.
CONTROLS = tuple(name for name, c in CONTROL_SPECS.items() if c.in_run)
URL_CONTROLS = tuple(CONTROL_SPECS)
SLO_CONTROLS = tuple(name for name, c in CONTROL_SPECS.items() if not c.in_run)
FLOAT_CONTROLS = tuple(name for name, c in CONTROL_SPECS.items() if c.in_run and c.setting.kind is float)
WORKLOAD_CONTROLS = tuple(name for name, c in CONTROL_SPECS.items() if c.section == YOUR_WORKLOAD)
SIDEBAR_CONTROLS = tuple(name for name, c in CONTROL_SPECS.items() if c.section != YOUR_WORKLOAD)
# The static build's grid: the controls it holds, in URL order, and their values.
GRID_CONTROLS = tuple(name for name, c in CONTROL_SPECS.items() if c.static_stops)
STATIC_STOPS = {name: tuple(CONTROL_SPECS[name].typed(v) for v in CONTROL_SPECS[name].static_stops)
                for name in GRID_CONTROLS}
# The controls the static build holds around the guides' steps only (not in the product), and their values.
STEP_CONTROLS = tuple(name for name, c in CONTROL_SPECS.items() if c.step_stops and not c.static_stops)
STEP_STOPS = {name: tuple(CONTROL_SPECS[name].typed(v) for v in CONTROL_SPECS[name].step_stops)
              for name in STEP_CONTROLS}
# Every control a static state's key names (the grid's always, the others where they differ from the start).
HELD_CONTROLS = tuple(name for name in CONTROL_SPECS if name in GRID_CONTROLS or name in STEP_CONTROLS)


def config_fields(values: dict[str, Any]) -> dict[str, Any]:
    """Control values as RunConfig takes them (a float control set from a link or a stop may hold an int)."""
    return {k: float(v) if k in FLOAT_CONTROLS and v is not None else v for k, v in values.items()}
