"""bench/kernels/fa_sm90/block_stats.py: what fa_sm90's tiles visit under a spec's
mask, counted on the CPU."""

from __future__ import annotations

import pytest
from fa_sm90_scripts import load_fa_sm90_script

from cubridge.bench.commands import load_specs


@pytest.fixture(scope="module")
def block_stats():
    return load_fa_sm90_script("block_stats").block_stats


def test_causal_tiles_visit_the_blocks_up_to_their_diagonal(block_stats):
    # S = 512: four query tiles visit 1, 2, 3 and 4 key blocks, the diagonal one masked
    st = block_stats(load_specs(["causal"])[0], 512)
    assert st["visited"] == pytest.approx(2.5)
    assert st["partial"] == pytest.approx(1.0)
    assert st["one_consumer_empty"] == 0
    assert st["allowed"] == 512 * 513 / 2
    assert st["pairs_used"] == pytest.approx(512 * 513 / 2 / (10 * 128 * 128))
    # on each diagonal block the first consumer's rows reach only the low half of the keys
    assert st["one_half"] == pytest.approx(1.0)
    assert st["half_saving"] == pytest.approx(4 / (2 * 2 * 10))


def test_document_boundaries_leave_one_consumers_rows_unreached(block_stats):
    # documents of random lengths: some visited blocks hold keys of one consumer's
    # document only; the counts stay within what a tile can visit
    st = block_stats(load_specs(["document_causal"])[0], 2048)
    assert 0 < st["one_consumer_empty"] <= st["partial"] <= st["visited"] <= 16
    assert 0.5 < st["pairs_used"] < 1


def test_the_tile_cost_for_a_bar_gives_that_ratio_to_causal():
    script = load_fa_sm90_script("block_stats")
    causal = {"visited": 16.5, "allowed": 1000.0}
    window = {"visited": 7.88, "allowed": 437.0}  # sliding_window_1024's counts at S = 4096
    need = script.tile_cost_for(window, causal, 0.85)
    assert 1.2 < need < 1.35
    assert script.ratio_to_causal(window, causal, need) == pytest.approx(0.85)
    # shorter tiles lose more to each block of fixed cost
    assert script.ratio_to_causal(window, causal, need + 0.5) < 0.85
    assert script.tile_cost_for(causal, causal, 0.85) == float("inf")  # met at any cost
    short = {"visited": 6.0, "allowed": 250.0}  # under the bar even with tiles for free
    assert script.tile_cost_for(short, causal, 0.85) < 0
    assert script.ratio_to_causal(short, causal, 0.0) < 0.85


def test_bars_table_rows_come_from_the_spec_masks():
    table = load_fa_sm90_script("block_stats").bars_table(
        ["document_causal", "alibi_causal"], 1024, seeds=2)
    rows = {line.split(" | ")[0].strip("| "): line for line in table.splitlines()
            if line.startswith("| ") and "variant" not in line}
    assert set(rows) == {"document_causal", "alibi_causal"}
    assert rows["alibi_causal"].endswith("| 85% | any |")  # causal's blocks and pairs
    # S = 1024: documents of 128-511 tokens, tiles of 2.5 blocks: under 80% at any tile cost
    assert rows["document_causal"].endswith("| 80% | none |")


def test_smaller_tiles_compute_fewer_masked_pairs_and_causal_is_counted_on_the_same():
    script = load_fa_sm90_script("block_stats")
    doc = load_specs(["document_causal"])[0]
    big = script.block_stats(doc, 1024, 128, 128)
    small = script.block_stats(doc, 1024, 64, 64)
    assert small["allowed"] == big["allowed"]
    assert small["pairs_used"] > big["pairs_used"]  # diagonals cut at 64, not 128
    table = script.bars_table(["document_causal"], 1024, seeds=1, block_m=64, block_n=64)
    assert table.startswith("S = 1024, 64 x 64 tiles; causal visits 8.50 blocks a tile.")


def test_a_tile_is_rows_by_keys_with_rows_in_whole_consumers():
    import argparse
    tile_arg = load_fa_sm90_script("block_stats").tile_arg
    assert tile_arg("64x128") == (64, 128)
    for bad, says in (("64", "expected ROWSxKEYS"), ("96x128", "multiple of 64"),
                      ("128x0", "keys positive"), ("ax128", "expected ROWSxKEYS")):
        with pytest.raises(argparse.ArgumentTypeError, match=says):
            tile_arg(bad)
