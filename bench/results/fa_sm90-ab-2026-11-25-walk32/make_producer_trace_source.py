"""Writes a copy of fa_sm90.cu whose producer also records the tile trace's
producer side (the global cubridge_producer_trace that
bench/kernels/fa_sm90/tile_trace.py reads): per tile, clock stamps (tile start, Q
issued, last K issued) and the cycles spent on the key range and classifying key
blocks, waiting for a free Q buffer / K slot / V slot, storing the staged key reads and
waiting for the next tile's claim. The edits now live in
bench/kernels/fa_sm90/trace_sides.py (`tile_trace.py --producer-side` applies them);
this keeps the record's command working.

    python make_producer_trace_source.py SRC OUT"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "kernels" / "fa_sm90"))
import trace_sides  # noqa: E402


def main() -> None:
    src, out = Path(sys.argv[1]), Path(sys.argv[2])
    try:
        out.write_text(trace_sides.producer_side(src.read_text()))
    except ValueError as e:
        sys.exit(f"{src}: {e}")


if __name__ == "__main__":
    main()
