"""The explorable's single source of truth: the controls, the run they give, and what the reader is told.

No Panel here. The controls are parameters, one per entry of explorable.state.control_specs (bounds and
labels declared once, widgets generated from them, the URL synced to them); every change re-runs the engine and publishes a new `trace` and `summary`, with
the previous summary kept for the readouts' deltas. A setting the engine refuses never raises: it becomes
`run_error` and the last good run stays on screen. Links are read and written in `explorable.page.url`.
"""
from __future__ import annotations

from typing import Any

import param

from engine import ConfigError, RunConfig, Trace, Workload, versions
from engine.config import pool_beyond_gpu
from explorable.state import runs
from explorable.state.control_specs import (  # noqa: F401  (PRODUCTION_NAMES, FLOAT_CONTROLS: for the views)
    CONTROL_SPECS, CONTROLS, FLOAT_CONTROLS, PRODUCTION_NAMES, SLO_CONTROLS, URL_CONTROLS, WORKLOAD_CONTROLS,
    config_fields,
)


def _control_parameters() -> dict[str, param.Parameter]:
    return {name: spec.parameter() for name, spec in CONTROL_SPECS.items()}


# One parameter per declared control (explorable.state.control_specs), in URL order: its default, range, label
# and text come from that declaration and engine/settings.py, never from a second one here.
_Controls = param.parameterized_class("Controls", _control_parameters())


class ExplorableState(_Controls):
    """The controls of one reader's page and the run they describe."""

    # -- derived (not widgets, not in the URL) ----------------------------------------------------
    trace = param.ClassSelector(class_=Trace, default=None, allow_None=True, precedence=-1)
    previous_summary = param.Dict(default=None, allow_None=True, precedence=-1, doc="the run before, for deltas")
    run_error = param.String(default="", precedence=-1, doc="why the current controls cannot run, or ''")
    notices = param.List(default=[], item_type=str, precedence=-1, doc="messages for the reader (bad link values)")
    pool_warning = param.String(default="", precedence=-1,
                                doc="why this pool could not be had on the chosen GPU beside the weights, or ''")
    # A reader's own file (explorable.state.your_workload): held here for the session only, never in the link.
    uploaded = param.ClassSelector(class_=Workload, default=None, allow_None=True, precedence=-1,
                                   doc="the requests of the reader's file, or None")
    upload_read = param.Parameter(default=None, precedence=-1, doc="what was read of that file (a WorkloadRead)")

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self._run()

    # -- running ----------------------------------------------------------------------------------
    def control_values(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in CONTROLS}

    def run_config(self) -> RunConfig:
        """The engine's config for the current controls (raises ConfigError for an impossible mix)."""
        return self.config_for(self.control_values())

    def config_with(self, changes: dict[str, Any]) -> RunConfig:
        """The engine's config the controls would give with `changes` (raises ConfigError for an impossible mix)."""
        return self.config_for({**self.control_values(), **changes})

    def config_for(self, values: dict[str, Any]) -> RunConfig:
        """The engine's config for these control values, with the reader's file when one is in use."""
        if values.get("arrival") == "workload" and (self.uploaded is None or self.uploaded.arrival_s is None):
            raise ConfigError("Traffic 'from file' needs a workload file with arrival times: upload one under "
                              "Your workload, or choose all at once or arriving at a rate")
        return RunConfig(**config_fields(values), workload=self.uploaded)

    def _file_values(self, read: Any) -> dict[str, Any]:
        workload = read.workload
        timed = workload.arrival_s is not None and bool(workload.arrival_s.any())
        return dict(output_p50=None, output_p99=None, prompt_p50=None, prompt_p99=None,
                    arrival="workload" if timed else ("all-at-once" if self.arrival == "workload" else self.arrival))

    def file_config(self, read: Any) -> RunConfig:
        """The config `use_file(read)` will run (thread-safe: reads the controls, changes nothing)."""
        return RunConfig(**config_fields({**self.control_values(), **self._file_values(read)}),
                         workload=read.workload)

    def use_file(self, read: Any) -> None:
        """Serve the requests of a file that was read (a WorkloadRead): its own times if it has them."""
        self.param.update(**self._file_values(read), upload_read=read, uploaded=read.workload)

    def drop_file(self) -> None:
        """Back to a generated workload (the file is forgotten)."""
        self.param.update(uploaded=None, upload_read=None,
                          arrival="all-at-once" if self.arrival == "workload" else self.arrival)

    @param.depends("vllm_version", watch=True)
    def _version_sets_its_defaults(self) -> None:
        # A link applies its version first (explorable.page.url), so its own settings then override these.
        self.param.update(**versions.version(self.vllm_version).settings)

    @param.depends("output_p50", watch=True)
    def _two_numbers_replace_the_file(self) -> None:
        if self.output_p50 is not None and self.uploaded is not None:
            self.drop_file()

    @property
    def slo_targets(self) -> dict[str, float]:
        return {"ttft": float(self.slo_ttft_ms), "tpot": float(self.slo_tpot_ms)}

    @param.depends(*CONTROLS, "uploaded", watch=True)
    def _run(self) -> None:
        if self._unpair_half_quantiles():
            return  # (the unset re-ran the page)
        try:
            cfg = self.run_config()
            trace = runs.run(cfg)
        except runs.RUN_ERRORS as exc:
            self.run_error = str(exc)
            return
        self.show(trace, cfg)

    def _unpair_half_quantiles(self) -> bool:
        """A p50 or p99 set without its partner (code or a crafted message; the page's own form sets both) is
        unset with a notice, as a link's would be, so the page keeps running what it shows."""
        half = [f"{what}_p50" if getattr(self, f"{what}_p99") is None else f"{what}_p99"
                for what in ("output", "prompt")
                if (getattr(self, f"{what}_p50") is None) != (getattr(self, f"{what}_p99") is None)]
        if not half:
            return False
        self.add_notice(f"{' and '.join(half)} came without {'their partners' if len(half) > 1 else 'its partner'} "
                        "(a p50 and a p99 go together); left unset.")
        self.param.update(**dict.fromkeys(half))
        return True

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
        self.param.update(**{name: self.param[name].default for name in URL_CONTROLS}, uploaded=None,
                          upload_read=None)

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
