import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# Schedules recorded from vLLM's own scheduler (copied from the course's shared/fixtures, with its README):
# vendored so that a fresh clone tests against them with nothing beside it.
FIXTURES_DIR = ROOT / "tests" / "fixtures" / "vllm"
