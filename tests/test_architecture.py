"""The architecture's boundaries, checked on the source: only engine/ reads the numba core's arrays, and no
function outside the core's `schedule_step` family is longer than 80 lines."""
import ast
from pathlib import Path

from tests.conftest import ROOT

PRODUCT = ["explorable", "benchmarks", "tests", "app.py"]
MAX_FUNCTION_LINES = 80


def python_files(*roots: str) -> list[Path]:
    out = []
    for root in roots:
        path = ROOT / root
        out += [path] if path.is_file() else sorted(path.rglob("*.py"))
    return out


def imports_of(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names |= {f"{node.module}.{a.name}" for a in node.names}
    return names


def test_nothing_outside_engine_imports_the_scheduler_core():
    offenders = [str(p.relative_to(ROOT)) for p in python_files(*PRODUCT)
                 if "kernels.scheduler_core" in imports_of(p)]
    assert offenders == []


def test_the_check_sees_an_import_of_the_core(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("from kernels import scheduler_core as core\n")
    assert "kernels.scheduler_core" in imports_of(probe)


def long_functions(paths: list[Path]) -> list[str]:
    out = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES and node.name != "schedule_step":
                    out.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({length} lines)")
    return out


def test_no_function_is_longer_than_80_lines():
    assert long_functions(python_files("engine", "kernels", "explorable", "app.py")) == []
