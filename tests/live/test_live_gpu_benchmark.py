"""benchmarks/live_gpu.py stays runnable: a CPU smoke run end to end, and a clean exit without CUDA."""
import json
import subprocess
import sys

import pytest

from engine.live import live_available
from tests.conftest import ROOT

pytest.importorskip("torch")
SCRIPT = str(ROOT / "benchmarks" / "live_gpu.py")


def test_smoke_run_prints_the_final_table_and_saves_raw_numbers(tmp_path):
    out = tmp_path / "live_gpu.json"
    proc = subprocess.run([sys.executable, SCRIPT, "--smoke", "--out", str(out)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "decode pass" in proc.stdout and "held out" in proc.stdout and "calibrated:" in proc.stdout
    report = json.loads(out.read_text())
    assert [row["batch"] for row in report["decode"]] == [1, 2, 4, 8]
    assert report["default_run"]["digest_matches"] and report["holdout_run"]["digest_matches"]
    # tests/live/conftest.py sets TRITON_INTERPRET=1, which the script inherits: the kernel check runs too.
    check = report["kernel_check"]
    assert check["ok"] and set(check["max_rel_error"]) == {"paged decode", "paged prefill", "add + RMSNorm",
                                                           "q/k norm + rotary + store", "SiLU x up"}


def test_without_cuda_it_says_so_and_exits_cleanly():
    if live_available()[0]:
        pytest.skip("this machine has a CUDA device")
    proc = subprocess.run([sys.executable, SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "no CUDA device" in proc.stdout
