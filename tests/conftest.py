import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# Schedules recorded from vLLM's own scheduler (copied from the course's shared/fixtures, with its README):
# vendored so that a fresh clone tests against them with nothing beside it.
FIXTURES_DIR = ROOT / "tests" / "fixtures" / "vllm"

# Property tests run the same examples on every run and machine (a failure reproduces; a fresh clone writes no
# .hypothesis/ database). CB_HYPOTHESIS_SEARCH=1 lets Hypothesis draw fresh examples (and keep a database) for
# a wider search than the suite's.
from hypothesis import settings  # noqa: E402

settings.register_profile("suite", derandomize=True, database=None)
settings.register_profile("search", derandomize=False)
settings.load_profile("search" if os.environ.get("CB_HYPOTHESIS_SEARCH") else "suite")
