"""The stats lines of a run: windows that meet end to end, preemptions that add up, flags that are explained."""
import re

import pytest

from engine import RunConfig, simulate
from engine.logs import log_times, periodic_log, periodic_stats, serve_command, serve_command_notes

CONFIGS = [
    {},                                       # as shipped: preempts
    {"spread": 1.0},                          # uniform outputs
    {"pool_gib": 2.0, "max_num_seqs": 512},   # the memory wall: thrashes for a minute
    {"max_num_seqs": 64},                     # never preempts
    {"pool_gib": 4.0, "max_num_seqs": 1024, "spread": 32.0},
]


def logged_preemptions(lines) -> int:
    return sum(int(n) for _, line in lines for n in re.findall(r"Preemptions: (\d+)", line))


@pytest.mark.parametrize("settings", CONFIGS, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()) or "default")
def test_the_logs_preemptions_add_up_to_the_runs(settings):
    trace = simulate(RunConfig(**settings))
    assert logged_preemptions(periodic_log(trace)) == trace.summary()["preemptions"]


def test_each_window_starts_where_the_one_before_ended():
    trace = simulate(RunConfig(pool_gib=2.0, max_num_seqs=512))
    times = log_times(trace.makespan_s)
    assert times[-1] == trace.makespan_s and times == sorted(times)
    passes_counted = 0
    for since, at in zip([0.0, *times[:-1]], times):
        passes_counted += int(((trace.pass_end > since) & (trace.pass_end <= at)).sum())
    assert passes_counted == trace.num_passes  # every pass in exactly one window


def test_the_last_line_reports_only_the_preemptions_of_its_own_window():
    trace = simulate(RunConfig())  # 21.6 s: the last line covers 20 s to the end, where nobody is evicted
    (_, tenth), (_, twentieth), (at, last) = periodic_log(trace)
    tail = (trace.pass_end > 20.0) & (trace.pass_end <= at)
    assert trace.passes[tail, 4].sum() == 0  # PASS_PREEMPTED
    assert "Preemptions" not in last
    # Throughput over the short last window is its own tokens over its own length, not over 10 s.
    s = periodic_stats(trace, at, since_s=20.0)
    assert s["gen_tok_s"] * (at - 20.0) == pytest.approx(float(trace.passes[tail, 10].sum()))  # PASS_OUTPUT


@pytest.mark.parametrize("settings", [{}, {"pool_gib": 2.0, "max_num_seqs": 512},
                                      {"num_gpu_blocks_override": 3000, "block_size": 32, "max_model_len": 8192}])
def test_every_flag_of_the_serve_command_is_explained(settings):
    cfg = RunConfig(**settings)
    flags = re.findall(r"(--[a-z-]+) (\S+)", serve_command(cfg))
    notes = serve_command_notes(cfg)
    assert len(notes) == len(flags)
    for (flag, value), note in zip(flags, notes):
        assert note.startswith(f"# {flag} {value}: ") and len(note) > len(flag) + 20


def test_the_memory_walls_max_model_len_says_why():
    note = serve_command_notes(RunConfig(pool_gib=2.0, max_num_seqs=512))[-1]
    assert note.startswith("# --max-model-len 14544:") and "40,960" in note and "refuse to start" in note
