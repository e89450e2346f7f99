"""The closing table of a guide: the runs of some of its steps, side by side (what each memory-wall fix bought).

Each row is the run of one step's settings, from the same cached runs the page shows when that step is chosen
(explorable.state.runs), so the table's numbers are the readouts' numbers of those steps.
"""
from __future__ import annotations

import html
from typing import Any

from engine import RunConfig
from explorable.state import runs
from explorable.state.store import config_fields

# (summary key, column heading, format)
COLUMNS = (
    ("peak_batch", "largest batch", "{:,}"),
    ("preemptions", "preemptions", "{:,}"),
    ("recomputed_prompt_tokens", "prompt tokens recomputed", "{:,}"),
    ("throughput_tok_s", "output tokens/s", "{:,.0f}"),
    ("throughput_per_gpu_tok_s", "tokens/s per GPU", "{:,.0f}"),
    ("num_gpus", "GPUs", "{:,}"),
    ("kv_cache_tokens", "GPU KV cache size (tokens)", "{:,}"),
    ("max_concurrency", "Maximum concurrency", "{:.2f}x"),
)


def table_rows(rows: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any] | str]]:
    """(row name, the summary of its settings' run, or why they cannot run) for each (name, control values)."""
    out: list[tuple[str, dict[str, Any] | str]] = []
    for name, values in rows:
        try:
            out.append((name, runs.run(RunConfig(**config_fields(values))).summary()))
        except runs.RUN_ERRORS as exc:
            out.append((name, str(exc)))
    return out


def table_html(rows: list[tuple[str, dict[str, Any] | str]]) -> str:
    """The table, its cells carrying the exact figures (`data-key`, `data-value`) for tests and the static build."""
    head = "".join(f'<th scope="col">{html.escape(label)}</th>' for _, label, _ in COLUMNS)
    body = []
    for i, (name, summary) in enumerate(rows):
        if isinstance(summary, str):
            cells = f'<td colspan="{len(COLUMNS)}">{html.escape(summary)}</td>'
        else:
            cells = "".join(f'<td data-key="{key}" data-value="{summary[key]!r}">{fmt.format(summary[key])}</td>'
                            for key, _, fmt in COLUMNS)
        label = " ".join(f'<span class="nowrap">{html.escape(word)}</span>' for word in name.split())
        body.append(f'<tr data-row="{i}"><th scope="row">{label}</th>{cells}</tr>')
    # On a phone only the first columns fit: the box scrolls sideways (edge shadows, explorable.css) and says so.
    hint = ('<p class="fixes-scroll-hint">Swipe the table sideways for the rest: prompt tokens recomputed, '
            'throughput, throughput per GPU, GPUs, cache size, concurrency.</p>')
    return (hint + f'<div class="fixes-table-wrap" tabindex="0" role="region" aria-label="What each fix bought">'
            f'<table class="fixes-table"><caption>What each fix bought, each from the same wall</caption>'
            f'<thead><tr><th scope="col">setting</th>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>')
