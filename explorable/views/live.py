"""The "live GPU" hook: measure the current setting with real forward passes (engine.live) when a CUDA
device is there, one run at a time across every browser session, with queue position, progress and
cancel. engine.live is imported lazily and defensively: without it (or without a GPU) the control is
hidden (its reason kept for tests and logs), and the rest of the explorable is untouched.
"""
from __future__ import annotations

import html
import threading
import time
from collections.abc import Callable
from functools import partial

import panel as pn
from panel.io.state import set_curdoc

from engine.live.gpu_queue import GPU_QUEUE, MAX_QUEUED_RUNS, Cancelled, GpuQueue  # noqa: F401  (GpuQueue: tests)
from explorable.views.assets import stylesheet
from explorable.patches.crossed_changes import settle_crossings
from explorable.patches.prompt_changes import answer_at_once
from explorable.views.state_view import StateView, answer_reader


def live_status() -> tuple[bool, str]:
    """(available, why not) for live GPU mode on this server; never raises."""
    try:
        from engine.live.executor import live_available
    except Exception as exc:  # missing or broken module: the explorable must still work
        return False, f"Live GPU mode is not installed on this server ({type(exc).__name__})."
    try:
        ok, reason = live_available()
    except Exception as exc:
        return False, f"Live GPU mode could not check for a GPU: {exc}"
    return bool(ok), str(reason or "")


def weights_note() -> str:
    """What the live model's weights are: a checkpoint the server names, else seeded random ones."""
    try:
        from engine.live.weights import weights_dir_from_env

        checkpoint = weights_dir_from_env()
    except Exception:  # engine.live missing: the toggle is disabled anyway
        checkpoint = None
    if checkpoint:
        return "The GPU runs the real checkpoint this server was set up with."
    return "Random weights with the model's real shapes: throughput depends only on shapes."




class LivePanel(StateView):
    """Toggle, run/cancel buttons, queue position and progress for a measured run."""

    watches = ()  # it publishes a measured run to the state; nothing in the state changes it

    def build(self) -> None:
        self.available, reason = live_status()
        self.toggle = pn.widgets.Checkbox(label="Measure on a live GPU", value=False, disabled=not self.available,
                                          margin=(8, 12, 0, 12), css_classes=["live-toggle"])
        answer_at_once(self.toggle)
        settle_crossings(self.toggle)
        note = f"GPU on this server: {reason}" if self.available and reason else reason
        self.reason = pn.pane.HTML(f"<div>{html.escape(note)}</div>" if note else "",
                                   css_classes=["control-note", "inactive"], stylesheets=[stylesheet()],
                                   margin=(0, 12, 4, 12), sizing_mode="stretch_width")
        self.run_button = pn.widgets.Button(label="Run this setting on the GPU", color="primary", visible=False,
                                            sizing_mode="stretch_width", margin=(4, 12))
        self.cancel_button = pn.widgets.Button(label="Cancel", visible=False, sizing_mode="stretch_width",
                                               margin=(4, 12))
        self.progress = pn.indicators.Progress(value=0, max=1000, visible=False, sizing_mode="stretch_width",
                                               margin=(4, 12))
        self.status = pn.pane.HTML("", css_classes=["control-note"], stylesheets=[stylesheet()],
                                   margin=(0, 12), sizing_mode="stretch_width")
        self.toggle.param.watch(answer_reader(self._toggled), "value")
        self.run_button.on_click(answer_reader(self._start))
        self.cancel_button.on_click(lambda _e: self._cancel.set() if self._cancel else None)
        self._cancel: threading.Event | None = None
        self.worker: threading.Thread | None = None  # the latest run's thread; joined, every view is updated

    def _toggled(self, event):
        self.run_button.visible = event.new
        self.status.object = f"<div>{weights_note()} Pass times are read off the GPU.</div>" if event.new else ""

    def _start(self, _event):
        # The browser disables the toggle and hides this button when live mode is off, but a crafted
        # websocket message can still click it: check on the server, one run per page, a bounded queue.
        if not (self.available and self.toggle.value) or self._cancel is not None:
            return
        if len(GPU_QUEUE) >= MAX_QUEUED_RUNS:
            self.status.object = "<div>The GPU queue is full; try again in a minute.</div>"
            return
        try:
            cfg = self.state.run_config()
        except Exception as exc:
            self.status.object = f"<div>{exc}</div>"
            return
        doc = pn.state.curdoc
        self._cancel = cancel = threading.Event()
        self.run_button.disabled = True
        self.cancel_button.visible = True
        self.progress.visible = True
        self.progress.value = 0
        self.worker = threading.Thread(target=self._worker, args=(doc, cfg, cancel), daemon=True, name="live-gpu-run")
        self.worker.start()

    # -- on the worker thread: every UI change goes back through the document's event loop --------
    def _ui(self, doc, fn: Callable[[], None]) -> None:
        if doc is None:
            fn()
            return

        def run():
            with set_curdoc(doc):
                fn()

        doc.add_next_tick_callback(run)

    def _worker(self, doc, cfg, cancel: threading.Event) -> None:
        last = [0.0]

        def on_position(ahead: int):
            text = "Running on the GPU..." if ahead == 0 else f"Waiting for the GPU: {ahead} run(s) ahead of yours."
            self._ui(doc, partial(setattr, self.status, "object", f"<div>{text}</div>"))

        def on_progress(_index: int, finished: int, total: int) -> None:
            now = time.monotonic()
            if now - last[0] < 0.2 or not total:
                return
            last[0] = now
            self._ui(doc, partial(setattr, self.progress, "value", int(1000 * min(max(finished / total, 0), 1))))

        try:
            with GPU_QUEUE.turn(cancel, on_position):
                if cancel.is_set():
                    raise Cancelled
                from engine.live.executor import run_live

                trace = run_live(cfg, progress=on_progress, cancel=cancel)
            if cancel.is_set():
                raise Cancelled
            self._ui(doc, partial(self._publish, trace, cfg))
            return
        except Cancelled:
            message = "Cancelled."
        except Exception as exc:  # out of memory and friends are reported, not fatal
            if type(exc).__name__ == "LiveCancelled":
                message = "Cancelled."
            else:
                message = f"The GPU run failed: {type(exc).__name__}: {exc}"
        self._ui(doc, partial(self._finish, message))

    def _publish(self, trace, cfg) -> None:
        """Show the measured trace if it measured what the controls say now; a reader who moved them while
        the GPU ran is told, and the simulation of the new setting stays on screen."""
        try:
            current = self.state.run_config()
        except Exception:  # noqa: BLE001  (a mix the engine refuses: certainly not what was measured)
            current = None
        if current != cfg:
            self._finish("Measured, but the controls changed while the GPU ran, so the measurement is not shown: "
                         "run this setting again to measure it.")
            return
        self.state.show(trace, cfg)
        self._finish("Measured. The deltas under each readout compare it with the simulation.")

    def _finish(self, message: str) -> None:
        self.status.object = f"<div>{message}</div>"
        self.run_button.disabled = False
        self.cancel_button.visible = False
        self.progress.visible = False
        self._cancel = None

    def __panel__(self):
        # Hidden where there is no GPU to measure on: a control nobody can use, on every CPU-only server, is
        # noise. The reason stays in `self.reason` (and the README's live section says how to enable it).
        return pn.Column(self.toggle, self.reason, self.run_button, self.cancel_button, self.progress, self.status,
                         sizing_mode="stretch_width", margin=0, css_classes=["live"], visible=self.available)
