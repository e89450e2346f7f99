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

from engine import RunConfig, Trace
from engine.settings import SETTINGS, parse_bool
from engine.config import pool_beyond_gpu
from explorable import runs

# Every control, in the order the sidebar and the URL list them. Names are RunConfig's (and vLLM's).
CONTROLS = (
    "max_num_seqs", "pool_gib", "allocation", "declared_multiple", "unit", "spread",
    "model", "gpu", "max_num_batched_tokens", "scheduler_reserve_full_isl",
)

# The production setting each mode stands for, so a student can find it on a real server (TensorRT-LLM's
# CapacitySchedulerPolicy; vLLM has no such choice: it always allocates on demand and preempts).
PRODUCTION_NAMES = {
    "on-demand": "vLLM's only behaviour; TensorRT-LLM's MAX_UTILIZATION",
    "reserve": "TensorRT-LLM's default, GUARANTEED_NO_EVICT",
    "pass": "continuous batching: vLLM; TensorRT-LLM's in-flight batching",
    "request": "TensorRT-LLM's legacy STATIC_BATCH",
}


def control(name: str) -> param.Parameter:
    """The control of RunConfig field `name`, from its one declaration (engine/settings.py): the field's
    default, label and text, and the range this page offers (the declaration's `ui`, else the field's own)."""
    s = SETTINGS[name]
    common = {"default": getattr(RunConfig(), name), "label": s.label, "doc": s.doc or s.help}
    if s.kind is bool:
        return param.Boolean(**common)
    if s.choices:
        choices = s.ui or s.allowed()
        return param.Selector(objects=dict(zip(s.choice_labels, choices)) if s.choice_labels else list(choices),
                              **common)
    lo, hi, step = s.ui or (s.lo, s.hi, None)
    kind = param.Integer if s.kind is int else param.Number
    return kind(bounds=(lo, hi), **({"step": step} if step else {}), **common)


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
        try:
            return parse_bool(text)
        except (AttributeError, ValueError):
            raise ValueError("true or false") from None
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
