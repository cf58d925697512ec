"""bench/kernels/fa_sm90/tile_trace.py's summary on a synthetic trace: the fit
recovers the per-block and per-tile cycles it was built from, the 32-bit clock
wraps, and the grid's balance comes from the global-timer stamps."""

from __future__ import annotations

import re

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


def test_the_producer_summary_shares_its_tiles_cycles(tile_trace):
    """The producer's side (a --source that records it): each tile runs from its
    start stamp to the next tile's (a CTA's last to its end stamp), and every
    waited or classified cycle is a share of that, also per visited block."""
    f = {name: i for i, name in enumerate(tile_trace.PRODUCER_FIELDS)}
    rows = np.zeros((tile_trace.TRACE_CTAS, tile_trace.TRACE_TILES, len(f)), np.int64)
    for cta in range(2):
        t = (1 << 32) - 3_000  # the clock wraps inside the first tile
        for j in range(3):
            row = rows[cta, j]
            row[f["top"]], row[f["q"]] = t % (1 << 32), (t + 500) % (1 << 32)
            row[f["end"]] = (t + 9_000) % (1 << 32)
            row[f["classify"]], row[f["wait_k_empty"]], row[f["blocks"]] = 1_000, 4_000, 4
            t += 10_000
    p = tile_trace.summarize_producer(rows, grid=2)
    assert p["tiles"] == 6 and p["blocks"] == 24
    # two CTAs of two 10,000-cycle tiles and a last one ending at its end stamp (9,000)
    total = 2 * (2 * 10_000 + 9_000)
    assert p["share_of_cycles"]["classify"] == pytest.approx(6 * 1_000 / total)
    assert p["share_of_cycles"]["wait_k_empty"] == pytest.approx(6 * 4_000 / total)
    assert p["cycles_per_block"]["classify"] == pytest.approx(250)
    assert p["q_issued_after_tile_start"] == pytest.approx(500)


def test_the_boundary_splits_into_its_stamped_steps(tile_trace):
    """Tiles that stamped the boundary's steps (their next tile live) get the mean of
    each step; the steps add up to the boundary, across a clock wrap."""
    rows, cta = _trace(tile_trace, 2_000, 4_000, [[8, 9, 10], [8, 9]])
    assert tile_trace.summarize(rows, cta, grid=2)["consumer0"]["boundary_steps"] is None
    steps = {"open": 300, "pv": 700, "epilogue": 900}
    for i, n in ((0, 2), (1, 1)):  # every tile but each CTA's last
        for j in range(n):
            r = rows[i, 0, j]
            t = r[2] + (1 << 32) - 100  # (wraps between the steps)
            fields = [tile_trace.FIELD_INDEX[k] for k in ("boundary_issued", "boundary_pv_done",
                                                 "boundary_stored")]
            for field, step in zip(fields, steps.values(), strict=True):
                t += step
                r[field] = t % (1 << 32)
    c0 = tile_trace.summarize(rows, cta, grid=2)["consumer0"]
    got = c0["boundary_steps"]
    assert got["tiles"] == 3
    # (the first stamp comes 300 - 100 cycles after steady_end)
    assert (got["open"], got["pv"], got["epilogue"]) == (200, 700, 900)
    boundary = 4_000 + 2_000 - 1_000  # end - steady_end in _trace: per_tile + per_block - first
    assert sum(got[k] for k in tile_trace.BOUNDARY_STEPS) == pytest.approx(boundary)


def test_older_sources_are_read_with_the_fields_they_stamp(tile_trace):
    from pathlib import Path

    source = (Path(__file__).resolve().parents[2] / "cubridge" / "kernels" / "fa_sm90"
              / "fa_sm90.cu").read_text()
    assert tile_trace.trace_fields(source) == len(tile_trace.FIELDS)
    # (FIELDS names the kernel's TraceField entries, in order)
    enum = source[source.index("enum TraceField {"):source.index("kTraceFields")]
    entries = re.findall(r"^\s*(kTrace\w+),", enum, re.MULTILINE)
    assert len(entries) == len(tile_trace.FIELDS)
    no_epilogue = source.replace("kTraceEpilogueFree", "kTraceGone")
    assert tile_trace.trace_fields(no_epilogue) == tile_trace.FIELD_INDEX["epilogue_free"]
    older = no_epilogue.replace("kTraceBoundaryIssued", "kTraceGone")
    assert tile_trace.trace_fields(older) == tile_trace.FIELD_INDEX["boundary_issued"] == 11


def test_the_trace_sides_edit_the_current_source(tile_trace):
    """--producer-side and --per-warp edit fa_sm90.cu by exact text: both still apply
    to the library's source, add their globals, and only to the traced build."""
    plain = tile_trace._source({}, False, sides=("producer", "warp"))
    traced = tile_trace._source({}, True, sides=("producer", "warp"))
    assert plain == tile_trace._source({}, False)
    assert "cubridge_producer_trace" in traced and "cubridge_warp_trace" in traced
    with pytest.raises(ValueError, match="has moved"):
        tile_trace.trace_sides.warp_side("int main() {}")


def test_each_warps_waits_are_averaged_over_the_live_tiles(tile_trace):
    """summarize_warps: per consumer and warp, the mean of each wait over the tiles
    with an end stamp (the rest of the trace buffer is zero and not counted)."""
    rows, _ = _trace(tile_trace, 2_000, 4_000, [[8, 9], [8]])
    warps = np.zeros((tile_trace.TRACE_CTAS, 2, tile_trace.TRACE_TILES, 4,
                      len(tile_trace.WARP_FIELDS)), np.int64)
    token = tile_trace.WARP_FIELDS.index("wait_token")
    warps[0, 0, 0, :, token] = [100, 300, 300, 300]
    warps[0, 0, 1, :, token] = [200, 400, 400, 400]
    warps[1, 0, 0, :, token] = [300, 500, 500, 500]
    warps[0, 0, 5, :, token] = 10**6  # (a row past the CTA's tiles)
    got = tile_trace.summarize_warps(warps, rows, grid=2)
    assert got["consumer0"]["wait_token"] == [200, 400, 400, 400]
    assert got["consumer1"]["wait_k"] == [0, 0, 0, 0]


@pytest.mark.slow  # an nvcc build
@pytest.mark.nvcc
def test_the_traced_build_with_both_sides_compiles(tile_trace):
    import torch

    compiled = tile_trace.fa_sm90.compile(
        128, torch.bfloat16, "sm_90a", causal=True,
        source=tile_trace._source({}, True, sides=("producer", "warp")))
    for name in (b"cubridge_tile_trace", b"cubridge_producer_trace", b"cubridge_warp_trace"):
        assert name in compiled.cubin()
