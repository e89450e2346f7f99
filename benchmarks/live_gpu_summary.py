"""The one-screen summary of a live_gpu.py report, read from the report's JSON data alone."""
from __future__ import annotations

RUN_LABELS = {"default_run": "default (fitted)", "held_out_memory_wall": "memory wall",
              "held_out_static_batching": "static batching", "held_out_64_slots": "64 slots"}


def _f(value, fmt: str, missing: str = "-") -> str:
    return missing if value is None else format(value, fmt)


def _pct(value, width: int, digits: int, sign: str = "") -> str:
    """A right-aligned percentage in `width` characters, or a dash."""
    return (f"{value:{sign}.{digits}f}%" if value is not None else "-").rjust(width)


def print_summary(data: dict, path: str) -> None:
    """The report as one screen: stages, decode passes, live runs with their predictions, pass kinds, goals."""
    stages = data["stages"]
    order = data["stage_order"]
    held_out = [n for n in order if n.startswith("held_out_")]
    env = (stages.get("environment") or {}).get("result") or {}
    print()
    print(f"== live_gpu summary: {env.get('device', 'CPU')} (datasheet {env.get('datasheet_preset')}), torch "
          f"{env.get('torch')}, triton {env.get('triton')}, {env.get('model_preset')} {env.get('dtype')}; "
          f"{data['elapsed_s']:.0f} s of a {data['budget_s']:.0f} s budget"
          + (" (smoke run: the figures mean nothing)" if data["smoke"] else "") + " ==")
    for name in order:
        entry = stages.get(name, {"status": "not run"})
        result = entry.get("result") or {}
        note = entry.get("error") or entry.get("reason") or _stage_note(name, result)
        print(f"{name:<26}{entry['status']:<8}{_f(entry.get('seconds'), '7.1f', '      -')}  {note}"[:118])
    rows = [r for r in ((stages.get("decode_roofline") or {}).get("result") or {}).get("rows", []) if "gpu_ms" in r]
    if rows:
        print(f"{'decode pass':<18}{'GPU ms':>8}{'wall ms':>9}{'tok/s':>9}{'GB/s':>8}{'% copy':>8}{'% sheet':>9}")
        for r in rows:
            print(f"{'B=%d, ctx %d' % (r['batch'], r['ctx']):<18}{r['gpu_ms']:>8.2f}{r['wall_ms']:>9.2f}"
                  f"{r['tok_s']:>9,.0f}{r['achieved_gb_s']:>8,.0f}{_pct(r['pct_copy_bw'], 8, 0)}"
                  f"{_pct(r['pct_datasheet'], 9, 0)}")
    runs = [(n, (stages.get(n) or {}).get("result")) for n in ["default_run"] + held_out]
    runs = [(n, r) for n, r in runs if r and "gpu_tok_s" in r]
    if runs:
        calib = (stages.get("calibration") or {}).get("result") or {}
        print(f"{'tok/s':<18}{'passes':>7}{'GPU':>8}{'wall':>8}{'host ms':>8}{'preset':>8}{'fit GPU':>9}{'err':>9}"
              f"{'fit wall':>9}{'err':>9}{'pass err p50/p90':>18}")
        for name, r in runs:
            scores = calib.get("in_sample", {}) if name == "default_run" else r.get("out_of_sample", {})
            g, w = scores.get("gpu", {}), scores.get("wall", {})
            label = RUN_LABELS[name] + ("" if name == "default_run" else "*")
            print(f"{label:<18}{r['passes']:>7,}{r['gpu_tok_s']:>8,.0f}{r['wall_tok_s']:>8,.0f}"
                  f"{r['host_ms_per_pass']:>8.2f}{r['predicted_by_preset']['predicted_tok_s']:>8,.0f}"
                  f"{_f(g.get('predicted_tok_s'), ',.0f'):>9}{_pct(g.get('throughput_error_pct'), 9, 1, '+')}"
                  f"{_f(w.get('predicted_tok_s'), ',.0f'):>9}{_pct(w.get('throughput_error_pct'), 9, 1, '+')}"
                  f"{_pct(g.get('p50_pass_error_pct'), 11, 1)} /{_pct(g.get('p90_pass_error_pct'), 5, 0)}")
        print("* held out: the fit (on the default run, both clocks) never saw it; err = predicted / measured - 1")
        if calib:
            print(calibration_line(calib))
        name, first = runs[0]
        print(f"pass kinds of {RUN_LABELS[name]} (roofline at {first['roofline']['bandwidth_from']}):")
        for kind, v in first["pass_kinds"].items():
            print(f"  {kind:<8}{v['passes']:>7,} passes, {v['cuda_graph_passes']:>6,} in CUDA graphs, "
                  f"{_f(v['pct_of_roofline'], '.0f')}% of roofline, {_f(v['pct_of_gpu_time'], '.0f')}% of GPU time "
                  f"({v['excess_s']:.2f} s over the roofline), host {v['host_ms_per_pass']:.2f} ms/pass")
    print(goals_line(stages, held_out))
    failed = data["failed_stage"]
    print(f"exit {data['exit_status']}: " + (f"stage {failed} failed" if failed else "no stage failed")
          + f"; figures in {path}")


def _stage_note(name: str, result: dict) -> str:
    if name == "copy_bandwidth" and result:
        return f"{result['gb_s']:,.0f} GB/s" + (f" = {result['pct_datasheet']:.0f}% of datasheet"
                                               if result.get("pct_datasheet") else "")
    if name == "kernel_check" and result:
        worst = max((v for v in result["max_rel_error"].values() if isinstance(v, float)), default=None)
        return f"worst error {_f(worst, '.1e')} (tolerance {result['tolerance']:.0e})"
    if name == "decode_roofline" and result:
        done = [r for r in result["rows"] if "gpu_ms" in r]
        return ", ".join(f"B={r['batch']} {_f(r.get('pct_copy_bw'), '.0f')}%" for r in done) + " of copy bandwidth"
    if name == "calibration" and result:
        g = result["gpu"]
        return f"GPU clock: {g['overhead_ms']:.2f} ms/pass + bytes at {g['bandwidth_gb_s']:,.0f} GB/s"
    if "gpu_tok_s" in result:
        return f"{result['gpu_tok_s']:,.0f} tok/s GPU clock, {result['wall_tok_s']:,.0f} wall clock"
    return ""


def calibration_line(calib: dict) -> str:
    """The fitted constants; the decode-only fit shows how much eager mixed passes add to the overhead."""
    g, w, d = calib["gpu"], calib["wall"], calib.get("gpu_decode_only")
    return (f"fit: GPU clock {g['overhead_ms']:.2f} ms/pass"
            + (f" (decode-only passes alone {d['overhead_ms']:.2f})" if d else "")
            + f", {g['bandwidth_gb_s']:,.0f} GB/s, {g['tflop_s']:,.0f} TFLOP/s; wall clock {w['overhead_ms']:.2f} "
              f"ms/pass, {w['bandwidth_gb_s']:,.0f} GB/s")


def goals_line(stages: dict, held_out: list[str]) -> str:
    """The GPU check's goals, with what this run measured against them."""
    rows = ((stages.get("decode_roofline") or {}).get("result") or {}).get("rows", [])
    b1 = next((r.get("pct_copy_bw") for r in rows if r["batch"] == 1 and "gpu_ms" in r), None)
    errors = [abs(s["gpu"]["throughput_error_pct"]) for n in held_out
              if (s := ((stages.get(n) or {}).get("result") or {}).get("out_of_sample")) and "gpu" in s]
    worst = max(errors) if errors else None
    return (f"goals: batch-1 decode >= 70% of copy bandwidth: {_f(b1, '.0f', 'not measured')}"
            + ("%" if b1 is not None else "") + "; held-out throughput within 10% after calibration: "
            + (f"worst {worst:.1f}% over {len(errors)} run(s)" if worst is not None else "not measured"))
