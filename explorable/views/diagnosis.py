"""Diagnose my server: pasted vLLM log lines and --max-num-seqs in, the course's case, why and its fixes out, and
one button that sets the page to a server like it (explorable.state.your_workload.reproduction).

The text is read on the event loop: at most 8 kB of lines and a few regular expressions each, a millisecond.
"""
from __future__ import annotations

import html

import panel as pn

from engine.diagnose import Diagnosis, LogError
from explorable.views.assets import stylesheet
from explorable.state import your_workload
from explorable.state.store import ExplorableState
from explorable.views.state_view import StateView, answer_reader
from explorable.patches.text_updates import TextHTML

PLACEHOLDER = ("Paste vLLM's log lines: the start-up 'GPU KV cache size: ... tokens' line and a few 'Engine 000: Avg "
               "prompt throughput ... Running: N reqs, Waiting: M reqs, ... GPU KV cache usage: Z%' lines.")


def diagnosis_html(d: Diagnosis) -> str:
    """The case named, why in the server's numbers, and the fixes, as the page shows them."""
    fixes = "".join(f"<li>{html.escape(f)}</li>" for f in d.fixes)
    case = f' <span class="yw-case-name">({d.case})</span>' if d.case else ""
    return (f'<div class="yw-diagnosis" data-case="{d.case or "none"}"><div class="yw-case"><b>{html.escape(d.title)}'
            f"</b>{case}</div><p>{html.escape(d.why)}</p>" + (f"<ul>{fixes}</ul>" if fixes else "") + "</div>")


def _shown(state: ExplorableState, name: str, value) -> str:
    """A control's new value as the sidebar names it ('KV cache pool (GiB) 16', 'prefix caching off')."""
    p = state.param[name]
    label = {v: k for k, v in (getattr(p, "names", None) or {}).items()}.get(value)
    if isinstance(value, bool):
        return f"{p.label.split(' (')[0]} {'on' if value else 'off'}"
    return f"{p.label} {label or (f'{value:g}' if isinstance(value, (int, float)) else value)}"


class DiagnosisView(StateView):
    """Paste, --max-num-seqs, Diagnose; the case, why and fixes; the button that reproduces the server."""

    watches = ()  # it reads the state only when the reader asks

    def build(self) -> None:
        self.paste = pn.widgets.TextAreaInput(label="vLLM log lines (at most 8 kB)", placeholder=PLACEHOLDER,
                                              max_length=your_workload.MAX_PASTE_CHARS,
                                              height=120, sizing_mode="stretch_width", margin=(4, 6),
                                              css_classes=["yw-paste"])
        self.max_num_seqs = pn.widgets.IntInput(label="your --max-num-seqs (optional)", value=None, start=1,
                                                end=65536, margin=(2, 6), width=220, css_classes=["yw-max-num-seqs"])
        self.run = pn.widgets.Button(label="Diagnose", css_classes=["yw-diagnose"], margin=(6, 6),
                                     stylesheets=[stylesheet()])
        self.run.on_click(answer_reader(lambda _e: self.diagnose()))
        self.result = TextHTML("", sizing_mode="stretch_width", stylesheets=[stylesheet()], margin=(2, 6),
                               css_classes=["yw-result"])
        self.reproduce = pn.widgets.Button(label="Set the explorable to this server", css_classes=["yw-reproduce"],
                                           margin=(6, 6), visible=False, stylesheets=[stylesheet()])
        self.reproduce.on_click(answer_reader(lambda _e: self.apply()))
        self.found: Diagnosis | None = None

    def diagnose(self) -> Diagnosis | None:
        """Read the pasted text; show the case, or the one line that says what was wrong with it."""
        text = self.paste.value_input if self.paste.value_input is not None else self.paste.value
        try:
            self.found = your_workload.diagnose_paste(text or "", self.max_num_seqs.value)
        except LogError as exc:
            self.found = None
            self.result.object = f'<div class="yw-error" data-yw="error">{html.escape(str(exc))}</div>'
            self.reproduce.visible = False
            return None
        self.result.object = diagnosis_html(self.found)
        self.reproduce.visible = True
        return self.found

    def apply(self) -> None:
        """Set the page to the diagnosed server (with the reader's workload, if one is in use)."""
        if self.found is None:
            return
        s = self.state
        bounds = {name: (*s.param[name].bounds, getattr(s.param[name], "step", None) if name == "pool_gib" else None)
                  for name in ("max_num_seqs", "pool_gib")}
        settings, notes = your_workload.reproduction(self.found, bounds, s.uploaded)
        s.param.update(**settings)
        shown = ", ".join(_shown(s, k, v) for k, v in settings.items())
        extra = f" ({'; '.join(notes)})" if notes else ""
        self.result.object = diagnosis_html(self.found) + (
            f'<div class="yw-reproduced" data-yw="reproduced">The explorable now runs this server: '
            f"{html.escape(shown)}{html.escape(extra)}. Everything above shows it.</div>")

    def __panel__(self):
        return pn.Column(
            pn.pane.HTML("<h3>Diagnose my server</h3>", css_classes=["group-heading"], stylesheets=[stylesheet()],
                         margin=(8, 6, 0, 6)),
            self.paste, self.max_num_seqs, self.run, self.result, self.reproduce,
            sizing_mode="stretch_width", margin=0,
        )
