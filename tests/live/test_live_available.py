"""Whether live GPU mode can start here, asked without importing torch where its build already answers."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT


def _fake_torch(root: Path, cuda: str | None) -> None:
    """A torch package whose import says so on stdout, and whose cuda answers "no device"."""
    package = root / "torch"
    package.mkdir()
    (package / "version.py").write_text(
        f"from typing import Optional\n__version__ = '9.9.9+test'\ncuda: Optional[str] = {cuda!r}\n")
    (package / "__init__.py").write_text(
        "print('torch imported')\nfrom torch import version\n__version__ = version.__version__\n"
        "class cuda:\n    is_available = staticmethod(lambda: False)\n")


@pytest.mark.parametrize("cuda, imported, reason", [
    (None, False, "this torch build (9.9.9+test) has no CUDA support"),  # read from torch/version.py alone
    ("12.4", True, "torch sees no CUDA device on the server"),  # a CUDA build must be asked
])
def test_live_available_imports_torch_only_for_a_cuda_build(tmp_path, cuda, imported, reason):
    _fake_torch(tmp_path, cuda)
    script = "from engine.live import live_available; print(live_available())"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert ("torch imported" in proc.stdout) == imported
    assert repr((False, reason)) in proc.stdout
