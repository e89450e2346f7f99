"""The explorable's single source of truth: the controls, the run they give, and what the reader is told.

No Panel here. The controls are parameters (bounds and labels declared once, widgets generated from them,
the URL synced to them); every change re-runs the engine and publishes a new `trace` and `summary`, with
the previous summary kept for the readouts' deltas. A setting the engine refuses never raises: it becomes
`run_error` and the last good run stays on screen. Link values are checked one by one (`apply_query`).
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import param

from engine import GPUS, MODELS, RunConfig, Trace
from engine.config import pool_beyond_gpu
from explorable import runs

# Every control, in the order the sidebar and the URL list them. Names are RunConfig's (and vLLM's).
CONTROLS = (
    "max_num_seqs", "pool_gib", "allocation", "declared_multiple", "unit", "spread",
    "model", "gpu", "max_num_batched_tokens", "scheduler_reserve_full_isl",
)

ALLOCATION_LABELS = {"on demand": "on-demand", "reserve up front": "reserve"}
UNIT_LABELS = {"per pass": "pass", "per request": "request"}

# The production setting each mode stands for, so a student can find it on a real server (TensorRT-LLM's
# CapacitySchedulerPolicy; vLLM has no such choice: it always allocates on demand and preempts).
PRODUCTION_NAMES = {
    "on-demand": "vLLM's only behaviour; TensorRT-LLM's MAX_UTILIZATION",
    "reserve": "TensorRT-LLM's default, GUARANTEED_NO_EVICT",
    "pass": "continuous batching: vLLM; TensorRT-LLM's in-flight batching",
    "request": "TensorRT-LLM's legacy STATIC_BATCH",
}


class ExplorableState(param.Parameterized):
    """The controls of one reader's page and the run they describe."""

    # -- controls ---------------------------------------------------------------------------------
    max_num_seqs = param.Integer(
        default=256, bounds=(1, 1024), label="--max-num-seqs",
        doc="vLLM's cap on running sequences. It only stops admission; nothing tries to reach it.",
    )
    pool_gib = param.Number(
        default=16.0, bounds=(1.0, 80.0), step=0.5, label="KV cache pool (GiB)",
        doc="GPU memory left for the KV cache after the weights. 16 GiB holds 116,496 tokens of Qwen3-8B.",
    )
    allocation = param.Selector(
        default="on-demand", objects=ALLOCATION_LABELS, label="KV cache allocation",
        doc="On demand: blocks as tokens arrive, evict when out (vLLM; TensorRT-LLM's MAX_UTILIZATION). Reserve: "
        "prompt + declared max_tokens at admission, never evict (Orca; TensorRT-LLM's default, GUARANTEED_NO_EVICT).",
    )
    declared_multiple = param.Number(
        default=4.0, bounds=(1.0, 8.0), step=0.5, label="declared max_tokens (x real output)",
        doc="What clients ask for, as a multiple of what they really generate. Read only when reserving.",
    )
    unit = param.Selector(
        default="pass", objects=UNIT_LABELS, label="scheduling unit",
        doc="Every pass: refill a slot the moment it frees (continuous batching). Every request: run a "
        "batch until its last member finishes (static batching; TensorRT-LLM's legacy STATIC_BATCH).",
    )
    spread = param.Number(
        default=16.0, bounds=(1.0, 32.0), step=0.5, label="output-length spread (longest / shortest)",
        doc="1x: every request generates 256 tokens. 16x: from about 50 to about 780. Total output is fixed.",
    )
    model = param.Selector(default="Qwen3-8B", objects=[m for m in MODELS if m != "tiny"], label="model")
    gpu = param.Selector(default="H100 SXM", objects=list(GPUS), label="GPU")
    max_num_batched_tokens = param.Integer(
        default=8192, bounds=(1024, 65536), step=256, label="--max-num-batched-tokens",
        doc="Token budget of one pass (chunked prefill). Must be at least --max-num-seqs.",
    )
    scheduler_reserve_full_isl = param.Boolean(
        default=False, label="admit only if the whole prompt fits (vLLM v0.33 gate)",
        doc="vLLM v0.33's scheduler_reserve_full_isl. Off reproduces v0.11, which checks the first chunk only.",
    )

    # -- derived (not widgets, not in the URL) ----------------------------------------------------
    config = param.ClassSelector(class_=RunConfig, default=None, allow_None=True, precedence=-1, doc="config of `trace`")
    trace = param.ClassSelector(class_=Trace, default=None, allow_None=True, precedence=-1)
    summary = param.Dict(default={}, precedence=-1)
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
        values = self.control_values()
        for name in ("pool_gib", "declared_multiple", "spread"):
            values[name] = float(values[name])
        return RunConfig(**values)

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
            config=cfg,
            summary=trace.summary(),
            trace=trace,  # last: views watch `trace` and read the rest
        )

    def reset(self) -> None:
        """Every control back to the article's starting point."""
        self.param.update(**{name: self.param[name].default for name in CONTROLS})

    def defaults(self) -> dict[str, Any]:
        return {name: self.param[name].default for name in CONTROLS}

    def add_notice(self, text: str) -> None:
        self.notices = [*self.notices, text]

    def dismiss_notices(self) -> None:
        self.notices = []


# -- link values ----------------------------------------------------------------------------------
def parse_control(state: ExplorableState, name: str, raw: Any) -> Any:
    """Turn a link value into a valid value of control `name`, or raise ValueError saying what is allowed."""
    p = state.param[name]
    text = raw.strip() if isinstance(raw, str) else raw
    if isinstance(p, param.Boolean):
        if isinstance(text, bool):
            return text
        if isinstance(text, (int, float)) and text in (0, 1):
            return bool(text)
        if isinstance(text, str) and text.lower() in ("true", "1", "yes", "on", "false", "0", "no", "off"):
            return text.lower() in ("true", "1", "yes", "on")
        raise ValueError("true or false")
    if isinstance(p, param.Selector):
        choices = list(p.objects)
        labels = dict(p.names or {})  # display labels of a dict-declared Selector
        for choice in choices:
            if isinstance(text, str) and text.lower() == str(choice).lower():
                return choice
        for label, choice in labels.items():
            if isinstance(text, str) and text.lower() == label.lower():
                return choice
        raise ValueError("one of " + ", ".join(str(c) for c in choices))
    lo, hi = p.bounds
    is_int = isinstance(p, param.Integer)
    what = f"{'a whole number' if is_int else 'a number'} from {lo:,g} to {hi:,g}"
    if isinstance(text, bool):
        raise ValueError(what)
    try:
        number = float(text)
    except (TypeError, ValueError, OverflowError):  # float(10**400) overflows
        raise ValueError(what) from None
    if not math.isfinite(number) or not lo <= number <= hi or (is_int and not number.is_integer()):
        raise ValueError(what)
    return int(number) if is_int else number


def apply_query(state: ExplorableState, query: Mapping[str, Any]) -> list[str]:
    """Apply a link's query to the controls; each bad value falls back to the default with a notice.

    Never raises. Unknown names are ignored (a course page may add its own). If the values are each fine
    but the mix cannot run (a pool too small for what it must reserve), the values the engine names fall
    back, and failing that every value from the link.
    """
    notices: list[str] = []
    accepted: dict[str, Any] = {}
    for name in CONTROLS:
        if name not in query:
            continue
        raw = query[name]
        if isinstance(raw, (list, tuple)):  # ?x=1&x=2: the last one wins, as in most servers
            raw = raw[-1] if raw else ""
        try:
            accepted[name] = parse_control(state, name, raw)
        except ValueError as exc:
            default = state.param[name].default
            notices.append(
                f"The link set {name} to {_show(raw)}, which is not {exc}; using the default, {default}."
            )
    merged = {**state.control_values(), **accepted}
    problem = runs.config_problem(_as_config_fields(merged))
    while problem and accepted:
        named = [n for n in accepted if n in problem] or list(accepted)
        for n in named:
            merged[n] = state.param[n].default
            accepted.pop(n)
        notices.append(
            f"The link's settings cannot run ({problem}); "
            f"using the default{'s' if len(named) > 1 else ''} for {', '.join(named)}."
        )
        problem = runs.config_problem(_as_config_fields(merged))
    if accepted:
        state.param.update(**accepted)
    for text in notices:
        state.add_notice(text)
    return notices


def _as_config_fields(values: dict[str, Any]) -> dict[str, Any]:
    return {k: float(v) if k in ("pool_gib", "declared_multiple", "spread") else v for k, v in values.items()}


def _show(raw: Any) -> str:
    text = raw if isinstance(raw, str) else repr(raw)
    return repr(text[:40] + ("..." if len(text) > 40 else ""))
