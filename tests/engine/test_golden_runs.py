"""Every pinned run gives the same summary and trace_digest, bit for bit (tests/engine/golden_runs.py says
which runs and how they were recorded). New summary keys may appear; recorded ones never change."""
import json

import pytest

from tests.engine.golden_runs import TABLE, outcome

ROWS = json.loads(TABLE.read_text())


def test_the_table_covers_every_mode():
    configs = [row["config"] for row in ROWS]
    assert len(ROWS) >= 50
    assert any(c.get("allocation") == "reserve" for c in configs)
    assert any(c.get("unit") == "request" for c in configs)
    assert any(c.get("scheduler_reserve_full_isl") for c in configs)
    assert any(isinstance(c.get("workload"), dict) for c in configs)
    assert sum(row["summary"].get("preemptions", 0) > 0 for row in ROWS) >= 10


@pytest.mark.parametrize("row", ROWS, ids=[f"run{i}" for i in range(len(ROWS))])
def test_run_is_unchanged(row):
    now = outcome(row["config"])
    assert {k: now.get(k) for k in row["summary"]} == row["summary"]
