"""GPU presets: each H100 board has its own datasheet, and a CUDA device name finds the right one."""
from types import SimpleNamespace

import numpy as np
import pytest

from engine import RunConfig, simulate
from engine.presets import GPUS, MODELS, gpu_preset_for_device


@pytest.mark.parametrize("device, preset", [
    ("NVIDIA H100 80GB HBM3", "H100 SXM"),  # what torch reports for the SXM board
    ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("NVIDIA H100 NVL", "H100 NVL"),
    ("NVIDIA H200", "H200"),
    ("NVIDIA H200 NVL", "H200 NVL"),
    ("NVIDIA A100-SXM4-80GB", "A100 80GB"),
    ("NVIDIA GH200 480GB", None),  # Grace Hopper: other memory, no preset (not the H200's)
    ("NVIDIA A100 80GB PCIe", None),  # 1,935 GB/s, not the SXM's 2,039
    ("NVIDIA A100-SXM4-40GB", None),
    ("NVIDIA GeForce RTX 4090", None),
])
def test_a_device_name_finds_its_own_datasheet(device, preset):
    found = gpu_preset_for_device(device)
    assert (found.name if found else None) == preset


def test_the_h100_variants_have_their_own_memory_and_bandwidth():
    sxm, pcie, nvl = GPUS["H100 SXM"], GPUS["H100 PCIe"], GPUS["H100 NVL"]
    assert (pcie.datasheet_bandwidth, nvl.datasheet_bandwidth, sxm.datasheet_bandwidth) == (2.0e12, 3.9e12, 3.35e12)
    assert (pcie.memory_gib, nvl.memory_gib, sxm.memory_gib) == (80, 94, 80)
    assert pcie.datasheet_flops < nvl.datasheet_flops < sxm.datasheet_flops
    for spec in (pcie, nvl):  # priced at the fitted SXM's efficiency until a calibration replaces them
        assert spec.effective_bandwidth / spec.datasheet_bandwidth == pytest.approx(
            sxm.effective_bandwidth / sxm.datasheet_bandwidth)
        assert "datasheet" in spec.provenance


def test_the_simulator_prices_a_pcie_h100_slower_than_the_sxm():
    cfg = RunConfig(requests=32)
    by_gpu = {gpu: simulate(cfg.replace(gpu=gpu)).summary() for gpu in ("H100 PCIe", "H100 SXM", "H100 NVL")}
    tok_s = [by_gpu[g]["throughput_tok_s"] for g in ("H100 PCIe", "H100 SXM", "H100 NVL")]
    assert tok_s == sorted(tok_s) and tok_s[0] < tok_s[-1]
    # The GPU changes the clock, never the schedule.
    assert len({s["trace_digest"] for s in by_gpu.values()}) == 1


def test_a_calibration_on_an_h100_pcie_keeps_the_pcie_datasheet():
    from engine.live.calibrate import calibrate_from_trace

    rng = np.random.default_rng(0)
    pass_bytes = rng.uniform(1.6e10, 3e10, 50)
    pass_flops = rng.uniform(1e12, 1e14, 50)
    gpu_ms = 1e3 * (1e-3 + pass_bytes / 1.8e12)
    passes = SimpleNamespace(pass_bytes=pass_bytes, pass_flops=pass_flops, gpu_ms=gpu_ms)
    # memory=None: a run without the start-up memory probe, as LiveStats has by default
    live = SimpleNamespace(passes=passes, device="NVIDIA H100 PCIe", live_spec=MODELS["Qwen3-8B"], dtype="bf16",
                           memory=None)
    trace = SimpleNamespace(config=RunConfig(), live=live)
    spec = calibrate_from_trace(trace)
    assert spec.datasheet_bandwidth == GPUS["H100 PCIe"].datasheet_bandwidth
    assert spec.effective_bandwidth == pytest.approx(1.8e12, rel=1e-3) and "H100 PCIe preset" in spec.provenance
