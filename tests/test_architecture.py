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


# explorable/'s folders, lowest first: each imports only folders of a lower rank (patches/ and state/ neither each
# other nor anything above them), so nothing a view needs can reach back into the page or the server.
RANKS = {"patches": 0, "state": 0, "views": 1, "page": 2, "server": 3, "static_site": 3}


def explorable_imports() -> list[tuple[str, str, str]]:
    """(file, its folder, the explorable folder it imports) for every import between explorable's folders."""
    out = set()
    for path in python_files("explorable"):
        rel = path.relative_to(ROOT / "explorable")
        if len(rel.parts) < 2:
            continue  # explorable/export.py and the package's __init__: entry points, above every folder
        for name in imports_of(path):
            parts = name.split(".")
            if parts[0] == "explorable" and len(parts) > 1 and parts[1] in RANKS and parts[1] != rel.parts[0]:
                out.add((str(path.relative_to(ROOT)), rel.parts[0], parts[1]))
    return sorted(out)


def test_imports_between_explorables_folders_flow_one_way():
    upward = [f"{path} ({folder}) imports explorable.{target}" for path, folder, target in explorable_imports()
              if RANKS[target] >= RANKS[folder]]
    assert upward == []


def test_the_state_has_no_panel():
    offenders = [str(p.relative_to(ROOT)) for p in python_files("explorable/state")
                 if any(n.split(".")[0] in ("panel", "bokeh") for n in imports_of(p))]
    assert offenders == []


def test_the_folder_check_sees_an_upward_import(tmp_path, monkeypatch):
    probe = tmp_path / "explorable" / "state" / "probe.py"
    probe.parent.mkdir(parents=True)
    probe.write_text("from explorable.views.lanes import LaneChart\n")
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    assert [(f, t) for _, f, t in explorable_imports()] == [("state", "views")]
