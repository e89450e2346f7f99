import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# shared/ sits beside the checkout (../shared); CI lays a copy there too.
SHARED = Path(os.environ.get("CB_SHARED_DIR", ROOT.parent / "shared"))
