"""bench/kernels/fa_sm90/tile_trace.py's summary on a synthetic trace: the fit
recovers the per-block and per-tile cycles it was built from, the 32-bit clock
wraps, and the grid's balance comes from the global-timer stamps."""

from __future__ import annotations

import numpy as np
import pytest
from fa_sm90_scripts import load_fa_sm90_script


@pytest.fixture(scope="module")
def tile_trace():
    return load_fa_sm90_script("tile_trace")


def _trace(tile_trace, per_block: int, per_tile: int, tiles_of_cta: list[list[int]]):
    fields = len(tile_trace.FIELDS)
    rows = np.zeros((tile_trace.TRACE_CTAS, 2, tile_trace.TRACE_TILES, fields), np.int64)
    cta = np.zeros((tile_trace.TRACE_CTAS, 2), np.int64)
    for i, tiles in enumerate(tiles_of_cta):
        for c in range(2):
            t = (1 << 32) - 50_000  # the SM clock wraps inside the first tile
            for j, blocks in enumerate(tiles):
                first, end = 1_000, per_block * blocks + per_tile  # (no gap to the next)
                rows[i, c, j, :4] = [t % (1 << 32), (t + first) % (1 << 32),
                                     (t + first + per_block * (blocks - 1)) % (1 << 32),
                                     (t + end) % (1 << 32)]
                rows[i, c, j, 4:11] = [10, 20, 30, 40, blocks, j, i]
                t += per_block * blocks + per_tile
        cta[i] = [1_000, 1_000 + 10 * sum(tiles)]
    return rows, cta


def test_the_fit_recovers_block_and_tile_costs(tile_trace):
    tiles = [[32 - (k % 31) for k in range(i, i + 5)] for i in range(4)]
    rows, cta = _trace(tile_trace, 2_700, 3_200, tiles)
    s = tile_trace.summarize(rows, cta, grid=4)
    c0 = s["consumer0"]
    assert c0["tiles"] == 20 and c0["blocks"] == sum(map(sum, tiles))
    assert c0["cycles_per_block_fit"] == pytest.approx(2_700)
    assert c0["tile_overhead_in_blocks"] == pytest.approx(3_200 / 2_700)
    assert c0["steady_cycles_per_block"] == pytest.approx(2_700)
    spans = [10 * sum(t) for t in tiles]
    assert s["grid"]["balance"] == pytest.approx(np.mean(spans) / max(spans))


def test_tiles_of_one_length_use_the_steady_blocks_cost(tile_trace):
    rows, cta = _trace(tile_trace, 2_000, 4_000, [[32] * 3, [32] * 3])
    c0 = tile_trace.summarize(rows, cta, grid=2)["consumer0"]
    assert c0["cycles_per_block_fit"] == pytest.approx(2_000)
    assert c0["cycles_per_tile_fit"] == pytest.approx(4_000)


def test_variants_count_their_allowed_pairs(tile_trace):
    # 1 ms for B = 4 x 32 heads at S = 4096, D = 128: causal pairs by default, a
    # variant's allowed pairs (per batch and head) when given
    causal = tile_trace.tflops(4, 32, 4096, 128, 1.0, True)
    assert causal == pytest.approx(4 * 4 * 32 * 4096 * 4097 / 2 * 128 / 1e-3 / 1e12)
    window = tile_trace.tflops(4, 32, 4096, 128, 1.0, True, pairs=3_670_016)
    assert window == pytest.approx(causal * 3_670_016 / (4096 * 4097 / 2))
