"""The lower tests reuse the variant mods of tests/transfer/hook_variants.py."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "transfer"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
