"""`python -m engine live`: JSON with the simulator's keys plus measured ones; one-line errors, exit 2."""
import json
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest

from engine import SUMMARY_KEYS, simulate
from engine.live import live_available
from engine.live.cli import live_main
from tests.conftest import ROOT
from tests.live.helpers import tight_config

pytest.importorskip("torch")


def args(**overrides):
    base = dict(model_preset="tiny", device="cpu", dtype=None, calibrate_out=None, json=True)
    base.update(overrides)
    return SimpleNamespace(**base)


def test_cuda_on_a_machine_without_one_is_one_clear_line_and_status_2(capsys):
    if live_available()[0]:
        pytest.skip("this machine has a CUDA device")
    assert live_main(tight_config(), args(device="cuda")) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err
    assert "cuda" in err.lower() and "--device cpu" in err


def test_unknown_model_preset_is_refused_with_the_choices(capsys):
    assert live_main(tight_config(), args(model_preset="GPT-5")) == 2
    err = capsys.readouterr().err
    assert "Qwen3-8B, Qwen3-0.6B, tiny" in err and "GPT-5" in err


def test_a_non_qwen3_run_model_needs_a_live_preset(capsys):
    assert live_main(tight_config(model="Llama-3.1-8B"), args(model_preset=None)) == 2
    assert "--model-preset" in capsys.readouterr().err


def test_a_model_too_big_for_this_machine_is_refused_before_allocating(capsys):
    # Qwen3-8B in fp32 with a 1 TiB pool: the memory check must answer, not the allocator.
    assert live_main(tight_config(num_gpu_blocks_override=None, pool_gib=1024.0), args(model_preset="Qwen3-8B")) == 2
    err = capsys.readouterr().err
    assert "lower pool_gib" in err and "GiB" in err


def test_json_has_the_simulator_keys_plus_measured_figures(capsys):
    cfg = tight_config()
    assert live_main(cfg, args()) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(SUMMARY_KEYS) <= set(out)
    for key in ("measured_tok_s", "predicted_tok_s", "gpu_ms_per_pass", "wall_ms_per_pass", "device"):
        assert key in out
    assert out["trace_digest"] == simulate(cfg).summary()["trace_digest"]
    assert out["gpu_ms_per_pass"] > 0 and out["measured_tok_s"] > 0


def test_calibrate_out_writes_a_loadable_gpu_preset(tmp_path, capsys):
    from engine.live.calibrate import load_gpu_spec
    from engine.presets import GPUS

    path = tmp_path / "measured.json"
    assert live_main(tight_config(), args(calibrate_out=str(path))) == 0
    out = json.loads(capsys.readouterr().out)
    spec = load_gpu_spec(path, register=False)
    GPUS.pop(spec.name, None)
    assert spec.name == out["calibrated_gpu"] and spec.name.endswith("(measured)")
    assert spec.effective_bandwidth > 0 and out["recalibrated_predicted_tok_s"] > 0


def test_table_output_through_the_engine_cli(tmp_path):
    workload = tmp_path / "w.csv"
    workload.write_text("prompt_len,output_len\n20,5\n35,12\n7,30\n50,8\n")
    proc = subprocess.run(
        [sys.executable, "-m", "engine", "live", "--model-preset", "tiny", "--device", "cpu", "--workload",
         str(workload), "--num-gpu-blocks-override", "12", "--max-num-batched-tokens", "64", "--max-num-seqs", "8"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "measured throughput" in proc.stdout and "trace digest" in proc.stdout


def test_engine_live_imports_and_reports_without_torch():
    # The app imports engine.live to ask live_available(); that must work on a server without torch.
    script = textwrap.dedent("""
        import sys
        sys.modules["torch"] = None  # import torch now raises ImportError
        import engine.live
        ok, why = engine.live.live_available()
        assert not ok and "torch is not installed" in why, why
        try:
            engine.live.run_live(None)
        except engine.live.LiveError as exc:
            print("refused:", exc)
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "refused: torch is not installed" in proc.stdout


def test_live_available_names_the_reason_on_a_cpu_only_torch():
    ok, why = live_available()
    if ok:
        pytest.skip("this machine has a CUDA device")
    assert "CUDA" in why


def test_an_unexpected_failure_inside_the_run_is_still_one_line(monkeypatch, capsys):
    import engine.live.runner as runner

    def broken(self, batch, **kwargs):
        raise RuntimeError("CUDA error: an illegal memory access was encountered\nmore detail")

    monkeypatch.setattr(runner.ModelRunner, "execute", broken)
    assert live_main(tight_config(), args()) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "illegal memory access" in err and "Traceback" not in err
