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


# -- library internals stay in explorable/patches/ -----------------------------------------------------------
FENCED_LIBRARIES = ("panel", "bokeh", "tornado")
OUTSIDE_THE_FENCE = [p for p in python_files("explorable", "engine", "kernels", "app.py", "benchmarks")
                     if "patches" not in p.relative_to(ROOT).parts]


def _private(name: str) -> bool:
    return name.startswith("_") and not name.endswith("__") and len(name) > 1


def library_private_names() -> set[str]:
    """Every private name (`_x`, not a dunder) the fenced libraries' own source defines or uses, read from the
    installed packages without importing them."""
    import importlib.util
    import re

    found: set[str] = set()
    pattern = re.compile(r"(?<![\w])_[A-Za-z]\w*")
    for library in FENCED_LIBRARIES:
        spec = importlib.util.find_spec(library)
        for folder in spec.submodule_search_locations or []:
            for path in Path(folder).rglob("*.py"):
                if "tests" not in path.parts:
                    found.update(n for n in pattern.findall(path.read_text(errors="replace")) if _private(n))
    return found


def _roots(node: ast.AST) -> str | None:
    """The name an attribute chain starts from (`pn.widgets.Select.foo` -> 'pn')."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _bindings(tree: ast.AST) -> tuple[set[str], set[str]]:
    """(names bound to an import of a fenced library, names bound to an import of this project's own code)."""
    library, own = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            source = node.module if isinstance(node, ast.ImportFrom) else None
            for alias in node.names:
                top = (source or alias.name).split(".")[0]
                bound = (alias.asname or alias.name).split(".")[0]
                if top in FENCED_LIBRARIES:
                    library.add(bound)
                elif top in ("engine", "kernels", "explorable"):
                    own.add(bound)
    return library, own


def own_private_names(paths: list[Path]) -> set[str]:
    """Private names this project defines outside the fence: functions, classes, module and `self` attributes."""
    out = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    if isinstance(target, ast.Name):
                        out.add(target.id)
                    elif isinstance(target, ast.Attribute) and _roots(target) in ("self", "cls"):
                        out.add(target.attr)
    return {n for n in out if _private(n)}


def private_library_references(paths: list[Path], library_names: set[str], own_names: set[str]) -> list[str]:
    """Each reference to a fenced library's private name, and each assignment to an attribute of something
    imported from a fenced library (a patched class or module), as 'file:line what'."""
    out = []
    for path in paths:
        tree = ast.parse(path.read_text(), filename=str(path))
        library, own = _bindings(tree)
        shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
        where = lambda node: f"{shown}:{node.lineno}"  # noqa: E731
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _private(node.attr) and node.attr in library_names:
                # A private name of our own is ours only on our own objects (`self._items`); on anything else
                # (`pn.state._sessions`, `doc._held_events`, `widget._models`) it is the library's.
                root = _roots(node)
                ours = root in own or (root in ("self", "cls") and node.attr in own_names)
                if not ours:
                    out.append(f"{where(node)} .{node.attr}")
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _private(node.value) \
                    and node.value in library_names and node.value not in own_names:
                out.append(f"{where(node)} {node.value!r}")
            elif isinstance(node, (ast.Assign, ast.AugAssign)):
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    if isinstance(target, ast.Attribute) and _roots(target) in library:
                        out.append(f"{where(node)} assigns {ast.unparse(target)}")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr" \
                    and node.args and _roots(node.args[0]) in library:
                out.append(f"{where(node)} setattr on {ast.unparse(node.args[0])}")
    return out


def test_no_private_panel_bokeh_or_tornado_name_outside_the_patches_package():
    found = private_library_references(OUTSIDE_THE_FENCE, library_private_names(),
                                       own_private_names(OUTSIDE_THE_FENCE))
    assert found == []


def test_the_fence_check_sees_a_private_name_and_a_patched_class(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("import panel as pn\nfrom bokeh.protocol.message import Message\n"
                     "def f(widget):\n    return widget._models, getattr(widget, '_update_model')\n"
                     "Message.send = f\npn.state.location = None\n")
    found = private_library_references([probe], {"_models", "_update_model"}, set())
    assert sorted(line.split(" ", 1)[1] for line in found) == ["'_update_model'", "._models", "assigns Message.send",
                                                              "assigns pn.state.location"]


def test_the_fence_check_sees_a_library_private_name_even_where_we_use_the_same_name(tmp_path):
    """`_sessions` is a name of our own too (a class of ours keeps one): on `self` it is ours, on Panel's state or
    a document it is the library's. Checked against the installed libraries' real private names."""
    probe = tmp_path / "probe.py"
    probe.write_text("import panel as pn\nfrom panel.widgets import Slider\nimport tornado.web\n"
                     "class Mine:\n    def f(self, doc):\n        self._sessions = {}\n"
                     "        return len(pn.state._sessions), doc._held_events, self._sessions\n"
                     "Slider.render = Mine.f\ntornado.web.RequestHandler.get = Mine.f\n")
    library = library_private_names()
    assert {"_sessions", "_held_events"} <= library
    found = private_library_references([probe], library, own_private_names([probe]) | {"_held_events"})
    assert sorted(line.split(" ", 1)[1] for line in found) == [
        "._held_events", "._sessions", "assigns Slider.render", "assigns tornado.web.RequestHandler.get"]


# -- Trace.events is read by its named columns -----------------------------------------------------------------
def raw_event_columns(paths: list[Path]) -> list[str]:
    """Each `x.events[..., 2]`-style read of a column of Trace.events by number, as 'file:line'."""
    import re

    pattern = re.compile(r"\.events\[[^\]]*,\s*\d\s*\]")
    return [f"{p.relative_to(ROOT) if p.is_relative_to(ROOT) else p.name}:{i}" for p in paths
            for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]


def test_trace_events_are_read_by_their_named_columns():
    """`trace.event_pass`, `event_request`, `event_kind` (engine/trace.py), not `trace.events[:, 2]`."""
    paths = [p for p in python_files("engine", "explorable", "benchmarks", "app.py", "tests")
             if p.relative_to(ROOT).as_posix() not in ("engine/trace.py", "tests/test_architecture.py")]
    assert raw_event_columns(paths) == []


def test_the_column_check_sees_a_numbered_column(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("t = trace.pass_start[trace.events[trace.events[:, 2] == 3, 0]]\nok = trace.event_kind\n")
    assert raw_event_columns([probe]) == ["probe.py:1"]


def test_the_engine_knows_nothing_of_the_page():
    """engine/ and kernels/ (the CLI's, the page's and the tests' one engine) import neither explorable/ nor a
    web library: the arrows of docs/architecture.md point from the page to the engine only."""
    offenders = [f"{p.relative_to(ROOT)} imports {n}" for p in python_files("engine", "kernels")
                 for n in imports_of(p) if n.split(".")[0] in ("explorable", "panel", "bokeh", "tornado")]
    assert offenders == []
