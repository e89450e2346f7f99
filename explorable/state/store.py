"""The explorable's single source of truth: the controls, the run they give, and what the reader is told.

No Panel here. The controls are parameters (bounds and labels declared once, widgets generated from them,
the URL synced to them); every change re-runs the engine and publishes a new `trace` and `summary`, with
the previous summary kept for the readouts' deltas. A setting the engine refuses never raises: it becomes
`run_error` and the last good run stays on screen. Links are read and written in `explorable.page.url`.
"""
from __future__ import annotations

from typing import Any

import param

from engine import RunConfig, Trace
from engine.settings import SETTINGS
from engine.config import pool_beyond_gpu
from explorable.state import runs

# Every control, in the order the sidebar and the URL list them. Names are RunConfig's (and vLLM's).
CONTROLS = (
    "max_num_seqs", "pool_gib", "allocation", "declared_multiple", "unit", "spread",
    "model", "gpu", "max_num_batched_tokens", "scheduler_reserve_full_isl",
    "arrival", "request_rate", "burstiness",
    "enable_prefix_caching", "system_prompt_len", "turns",
    "gpu_memory_utilization", "kv_cache_dtype", "tensor_parallel_size", "max_model_len",
)
FLOAT_CONTROLS = ("pool_gib", "declared_multiple", "spread", "request_rate", "burstiness", "gpu_memory_utilization")
# Controls that may be unset (None: the pool comes from pool_gib; the model's own context length); a link
# leaves them out or says "none".
OPTIONAL_CONTROLS = ("gpu_memory_utilization", "max_model_len")
# SLO targets: not part of the run (goodput is read off the run's per-request timing), but in the URL.
SLO_CONTROLS = ("slo_ttft_ms", "slo_tpot_ms")

# The production setting each mode stands for, so a student can find it on a real server (TensorRT-LLM's
# CapacitySchedulerPolicy; vLLM has no such choice: it always allocates on demand and preempts).
PRODUCTION_NAMES = {
    "on-demand": "vLLM's only behaviour; TensorRT-LLM's MAX_UTILIZATION",
    "reserve": "TensorRT-LLM's default, GUARANTEED_NO_EVICT",
    "pass": "continuous batching: vLLM; TensorRT-LLM's in-flight batching",
    "request": "TensorRT-LLM's legacy STATIC_BATCH",
}


def config_fields(values: dict[str, Any]) -> dict[str, Any]:
    """Control values as RunConfig takes them (a float control set from a link or a stop may hold an int)."""
    return {k: float(v) if k in FLOAT_CONTROLS and v is not None else v for k, v in values.items()}


def control(name: str) -> param.Parameter:
    """The control of RunConfig field `name`, from its one declaration (engine/settings.py): the field's
    default, label and text, and the range this page offers (the declaration's `ui`, else the field's own)."""
    s = SETTINGS[name]
    common = {"default": getattr(RunConfig(), name), "label": s.label, "doc": s.doc or s.help}
    if s.kind is bool:
        return param.Boolean(**common)
    if s.choices or (s.optional and s.ui and None in s.ui):  # a free number the page offers a few values of
        choices = s.ui or s.allowed()
        return param.Selector(objects=dict(zip(s.choice_labels, choices)) if s.choice_labels else list(choices),
                              **common)
    lo, hi, step = s.ui or (s.lo, s.hi, None)
    kind = param.Integer if s.kind is int else param.Number
    return kind(bounds=(lo, hi), allow_None=s.optional, **({"step": step} if step else {}), **common)


class ExplorableState(param.Parameterized):
    """The controls of one reader's page and the run they describe."""

    # -- controls: each RunConfig field's range, label and text come from engine/settings.py ----------
    max_num_seqs = control("max_num_seqs")
    pool_gib = control("pool_gib")
    allocation = control("allocation")
    declared_multiple = control("declared_multiple")
    unit = control("unit")
    spread = control("spread")
    model = control("model")
    gpu = control("gpu")
    max_num_batched_tokens = control("max_num_batched_tokens")
    scheduler_reserve_full_isl = control("scheduler_reserve_full_isl")
    arrival = control("arrival")
    request_rate = control("request_rate")
    burstiness = control("burstiness")
    enable_prefix_caching = control("enable_prefix_caching")
    system_prompt_len = control("system_prompt_len")
    turns = control("turns")
    gpu_memory_utilization = control("gpu_memory_utilization")
    kv_cache_dtype = control("kv_cache_dtype")
    tensor_parallel_size = control("tensor_parallel_size")
    max_model_len = control("max_model_len")
    slo_ttft_ms = param.Number(default=1000.0, bounds=(10.0, 60_000.0), label="TTFT target (ms)",
                               doc="A request meets its SLO when its first token comes within this long.")
    slo_tpot_ms = param.Number(default=50.0, bounds=(1.0, 1_000.0), label="TPOT target (ms)",
                               doc="... and its later tokens come, on average, at least this often.")

    # -- derived (not widgets, not in the URL) ----------------------------------------------------
    trace = param.ClassSelector(class_=Trace, default=None, allow_None=True, precedence=-1)
    previous_summary = param.Dict(default=None, allow_None=True, precedence=-1, doc="the run before, for deltas")
    run_error = param.String(default="", precedence=-1, doc="why the current controls cannot run, or ''")
    notices = param.List(default=[], item_type=str, precedence=-1, doc="messages for the reader (bad link values)")
    pool_warning = param.String(default="", precedence=-1,
                                doc="why this pool could not be had on the chosen GPU beside the weights, or ''")

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self._run()

    # -- running ----------------------------------------------------------------------------------
    def control_values(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in CONTROLS}

    def run_config(self) -> RunConfig:
        """The engine's config for the current controls (raises ConfigError for an impossible mix)."""
        return RunConfig(**config_fields(self.control_values()))

    @property
    def slo_targets(self) -> dict[str, float]:
        return {"ttft": float(self.slo_ttft_ms), "tpot": float(self.slo_tpot_ms)}

    @param.depends(*CONTROLS, watch=True)
    def _run(self) -> None:
        try:
            cfg = self.run_config()
            trace = runs.run(cfg)
        except runs.RUN_ERRORS as exc:
            self.run_error = str(exc)
            return
        self.show(trace, cfg)

    def show(self, trace: Trace, cfg: RunConfig | None = None) -> None:
        """Publish a trace (simulated, or measured on a GPU); the one on screen becomes the delta baseline."""
        cfg = cfg or trace.config
        warning = pool_beyond_gpu(cfg)
        self.param.update(
            run_error="",
            pool_warning=f"{warning[0].upper()}{warning[1:]}." if warning else "",
            previous_summary=self.summary or None,
            trace=trace,  # last: views watch `trace` and read the rest
        )

    # -- derived from the trace on screen ----------------------------------------------------------
    @property
    def config(self) -> RunConfig | None:
        return self.trace.config if self.trace is not None else None

    @property
    def summary(self) -> dict[str, Any]:
        return self.trace.summary() if self.trace is not None else {}

    def reset(self) -> None:
        """Every control back to the article's starting point."""
        self.param.update(**{name: self.param[name].default for name in (*CONTROLS, *SLO_CONTROLS)})

    def defaults(self) -> dict[str, Any]:
        # Declared once per class and never changed: read once (the guides compare every step with the
        # controls on every update, and param's lookups cost about 20 us a control).
        cls = type(self)
        if "_control_defaults" not in cls.__dict__:
            cls._control_defaults = {name: cls.param[name].default for name in CONTROLS}
        return dict(cls._control_defaults)

    def add_notice(self, text: str) -> None:
        self.notices = [*self.notices, text]

    def dismiss_notices(self) -> None:
        self.notices = []
