"""Calibration recovers the cost model's constants from pass times, and saves them as a GPU preset."""
import numpy as np
import pytest

from engine import RunConfig, simulate
from engine.cost_model import pass_bytes_and_flops, roofline_seconds
from engine.live.calibrate import fit_pass_times, load_gpu_spec, save_gpu_spec
from engine.live.errors import LiveError
from engine.presets import GPUS, MODELS, GPUSpec

TRUE = GPUSpec(name="truth", memory_gib=141, datasheet_bandwidth=4.8e12, datasheet_flops=989e12,
               effective_bandwidth=4.1e12, effective_flops=720e12, pass_overhead_s=0.8e-3)


def synthetic_passes(seed=0, n=300, prefill=True):
    """Qwen3-8B passes: decodes at batch 1..256 over varied contexts, plus prefill chunks up to 8192 tokens."""
    rng = np.random.default_rng(seed)
    model = MODELS["Qwen3-8B"]
    out_b, out_f = [], []
    for _ in range(n):
        if prefill and rng.random() < 0.3:
            new = np.array([int(rng.integers(256, 8192))])
            before = np.array([int(rng.integers(0, 4096))])
        else:
            batch = int(rng.integers(1, 257))
            new = np.ones(batch, dtype=np.int64)
            before = rng.integers(100, 3000, size=batch)
        b, f = pass_bytes_and_flops(model, new, before)
        out_b.append(b)
        out_f.append(f)
    return np.array(out_b), np.array(out_f)


def test_fit_recovers_known_constants_from_exact_pass_times():
    b, f = synthetic_passes()
    t = roofline_seconds(b, f, TRUE)
    fit = fit_pass_times(b, f, t, prior=GPUS["H100 SXM"])
    assert fit.overhead_s == pytest.approx(TRUE.pass_overhead_s, rel=1e-3)
    assert fit.bandwidth == pytest.approx(TRUE.effective_bandwidth, rel=1e-3)
    assert fit.flops == pytest.approx(TRUE.effective_flops, rel=1e-3)
    assert fit.rms_rel_error < 1e-3
    assert 0 < fit.memory_bound_passes < fit.num_passes


def test_fit_tolerates_measurement_noise():
    b, f = synthetic_passes(seed=1)
    t = roofline_seconds(b, f, TRUE) * np.random.default_rng(2).normal(1.0, 0.02, size=b.size)
    fit = fit_pass_times(b, f, t, prior=GPUS["H100 SXM"])
    assert fit.bandwidth == pytest.approx(TRUE.effective_bandwidth, rel=0.02)
    assert fit.flops == pytest.approx(TRUE.effective_flops, rel=0.05)
    assert fit.overhead_s == pytest.approx(TRUE.pass_overhead_s, rel=0.25)


def test_decode_only_passes_pin_bandwidth_and_keep_the_prior_ridge():
    b, f = synthetic_passes(prefill=False)
    t = roofline_seconds(b, f, TRUE)
    prior = GPUS["H100 SXM"]
    fit = fit_pass_times(b, f, t, prior=prior)
    assert fit.bandwidth == pytest.approx(TRUE.effective_bandwidth, rel=1e-6)
    assert fit.overhead_s == pytest.approx(TRUE.pass_overhead_s, rel=1e-4)
    # No pass is compute-bound, so FLOP/s is unidentifiable: the prior's ridge (FLOP per byte) is kept.
    assert fit.flops / fit.bandwidth == pytest.approx(prior.effective_flops / prior.effective_bandwidth, rel=1e-9)
    assert fit.memory_bound_passes == fit.num_passes


def test_too_few_passes_is_a_clear_error():
    with pytest.raises(LiveError, match="at least 3"):
        fit_pass_times([1e9, 2e9], [1e9, 1e9], [1e-3, 2e-3], prior=GPUS["H200"])


def test_saved_preset_loads_registers_and_drives_the_simulator(tmp_path):
    spec = GPUSpec(name="H200 (measured test)", memory_gib=141, datasheet_bandwidth=4.8e12, datasheet_flops=989e12,
                   effective_bandwidth=4.1e12, effective_flops=720e12, pass_overhead_s=0.8e-3,
                   provenance="test", extra={"passes": 10})
    path = tmp_path / "h200.json"
    save_gpu_spec(spec, path)
    try:
        loaded = load_gpu_spec(path)
        assert loaded == spec and loaded.extra == {"passes": 10}
        cfg = RunConfig(requests=16, gpu=spec.name)
        faster = simulate(cfg).summary()["throughput_tok_s"]
        assert faster > simulate(cfg.replace(gpu="H100 SXM")).summary()["throughput_tok_s"]
    finally:
        GPUS.pop(spec.name, None)


def test_a_malformed_preset_file_is_refused(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"name": "x", "effective_bandwidth": -1}')
    with pytest.raises(LiveError, match="non-negative numbers"):
        load_gpu_spec(path, register=False)


def test_a_calibration_that_measured_memory_replaces_the_estimates(tmp_path, monkeypatch):
    # What a live run on an H200 would save (engine/live/memory_probe.py): bytes, for Qwen3-8B on one GPU.
    import dataclasses

    from engine import RunConfig
    from engine.presets import GPUS

    measured = {"model": "Qwen3-8B", "device": "NVIDIA H200", "total_memory": 150_119_137_280,
                "weights_memory": 16_381_470_720, "activation_peak": 1_000_000_000, "max_num_batched_tokens": 4096,
                "non_torch_memory": 300_000_000}
    spec = dataclasses.replace(GPUS["H200"], name="H200 (measured)", extra={"memory": measured})
    path = tmp_path / "h200.json"
    save_gpu_spec(spec, path)
    loaded = load_gpu_spec(path, register=False)
    assert loaded.total_memory_gib == GPUS["H200"].total_memory_gib and loaded.nvlink_bandwidth == 450e9
    monkeypatch.setitem(GPUS, loaded.name, loaded)
    p = RunConfig(gpu=loaded.name, gpu_memory_utilization=0.9).memory_profile
    assert p.source == "measured on NVIDIA H200" and p.total_memory == 150_119_137_280
    assert p.activation_peak == 2_000_000_000  # measured at 4,096 tokens, scaled to the run's 8,192
    expected = int(150_119_137_280 * 0.9 - 16_381_470_720 - 2_000_000_000 - 300_000_000)
    assert p.available_kv_cache_memory == expected and p.num_gpu_blocks == expected // (16 * 147_456)
    # Another model on the same GPU keeps the estimates.
    assert RunConfig(gpu=loaded.name, model="Llama-3.1-8B", gpu_memory_utilization=0.9).memory_profile.source == \
        "estimated"


def test_a_malformed_measured_memory_is_one_line(tmp_path):
    import dataclasses

    from engine.presets import GPUS

    spec = dataclasses.replace(GPUS["H200"], name="bad", extra={"memory": {"model": "Qwen3-8B", "total_memory": "x"}})
    path = tmp_path / "bad.json"
    save_gpu_spec(spec, path)
    with pytest.raises(LiveError, match="extra.memory needs a model name"):
        load_gpu_spec(path, register=False)


def test_the_live_cli_reports_the_pool_its_measured_memory_gives():
    import dataclasses

    from engine.live.cli import _measured_memory

    measured = {"model": "Qwen3-8B", "device": "NVIDIA H200", "total_memory": 150_119_137_280,
                "weights_memory": 16_381_470_720, "activation_peak": 1_000_000_000, "max_num_batched_tokens": 8192,
                "non_torch_memory": 300_000_000}
    spec = dataclasses.replace(GPUS["H200"], name="H200 (measured, test)", extra={"memory": measured})
    GPUS[spec.name] = spec
    try:
        out = _measured_memory(simulate(RunConfig(model="tiny", requests=4)), spec)
    finally:
        del GPUS[spec.name]
    blocks = int(150_119_137_280 * 0.9 - 16_381_470_720 - 1_000_000_000 - 300_000_000) // (16 * 147_456)
    assert out["calibrated_kv_cache_tokens"] == blocks * 16
    assert out["calibrated_memory_profile"]["source"] == "measured on NVIDIA H200"
    assert _measured_memory(simulate(RunConfig(model="tiny", requests=4)), GPUS["H200"]) == {}
