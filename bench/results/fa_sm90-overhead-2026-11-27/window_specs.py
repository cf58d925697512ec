"""The sliding-window specs of other widths these runs used: examples/specs'
sliding_window_1024.py with its width replaced (written, not kept, so that there is
one window spec).

    python window_specs.py specs      # specs/sliding_window_{128,256,512,2048,3072}.py
"""
import sys
from pathlib import Path

WIDTHS = (128, 256, 512, 2048, 3072)
TEMPLATE = Path(__file__).resolve().parents[3] / "examples" / "specs" / "sliding_window_1024.py"

out = Path(sys.argv[1] if len(sys.argv) > 1 else "specs")
out.mkdir(parents=True, exist_ok=True)
text = TEMPLATE.read_text()
for w in WIDTHS:
    spec = (text.replace("sliding_window_1024", f"sliding_window_{w}")
                .replace("WINDOW = 1024", f"WINDOW = {w}")
                .replace("q - k < 1024", f"q - k < {w}")
                .replace("the 1024 most recent keys (q - 1023..q)", f"the {w} most recent keys"))
    (out / f"sliding_window_{w}.py").write_text(spec)
