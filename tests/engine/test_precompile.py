"""A fresh install's compile (engine.precompile): its two parts split the work without compiling anything twice,
and every setting hands the compiled core the same argument types (one compile serves them all)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from numba import typeof

from engine import RunConfig, Workload
from engine.simulate import core_arguments
from tests.conftest import ROOT

# What `passes` compiles in a process of its own, each compiled function's name once per signature.
RECORD = textwrap.dedent("""
    import json, sys
    from numba.core import event

    compiled = []

    class Record(event.Listener):
        def on_start(self, ev):
            pass

        def on_end(self, ev):
            compiled.append(ev.data["dispatcher"].py_func.__name__)

    event.register("numba:compile", Record())
    from engine.precompile import compile_part
    compile_part(sys.argv[1])
    print(json.dumps(compiled))
""")


def compiled_by(part: str, cache_dir) -> list[str]:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache_dir), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", RECORD, part], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_core_compiled_after_the_helpers_loads_them_and_compiles_each_pass_function_once(tmp_path):
    """The parts one after the other (what the split relies on; running them at once only adds races numba's
    cache already handles: a piece both compile is written twice, the same bytes)."""
    helpers = compiled_by("helpers", tmp_path)
    assert {"new_tables", "grow_rows", "add_arrivals", "end_pass", "walk_tokens"} <= set(helpers)
    passes = compiled_by("passes", tmp_path)
    assert "run_to_completion" in passes and passes.count("begin_pass") == 1  # (a literal 0 once made it 2)
    assert not set(passes) & {"new_tables", "hold_arrivals", "grow_rows", "add_arrivals", "end_pass",
                              "walk_tokens"}, passes
    # Everything is cached now: the default run compiles nothing more.
    assert compiled_by("passes", tmp_path) == []


@pytest.mark.parametrize("setting", [
    {}, {"allocation": "reserve"}, {"arrival": "rate", "request_rate": 8.0},
    {"enable_prefix_caching": True, "system_prompt_len": 512}, {"enable_prefix_caching": True, "samples_per_prompt": 4},
    {"arrival": "rate", "request_rate": 8.0, "enable_prefix_caching": True, "turns": 3},
    {"workload": Workload([100, 200, 300], [5, 6, 7], [0.0, 0.5, 0.5]), "arrival": "workload"},
    {"workload": Workload([100, 200], [5, 6], prefix_group=[3, 3], prefix_len=[64, 64]),
     "enable_prefix_caching": True},
])
def test_every_setting_hands_the_core_the_default_run_s_argument_types(setting):
    """Being read-only is part of an array's type to numba: a setting that passed one writable array would
    compile the whole core again (seconds holding the server's GIL) the first time a reader chose it."""
    def types_of(cfg):
        return [typeof(a) for a in core_arguments(cfg)[2]]

    assert types_of(RunConfig(**setting)) == types_of(RunConfig())


def test_an_unknown_part_is_one_usage_line_and_status_2(capsys):
    from engine.precompile import main

    assert main(["everything"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "usage: python -m engine.precompile [passes|helpers]" in err
