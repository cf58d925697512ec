"""bench/kernels/fa_sm90/tile_overhead.py: a tile's own cost fitted from untraced times."""

from __future__ import annotations

import json

import pytest
from fa_sm90_scripts import load_fa_sm90_script

from cubridge.bench.commands import load_specs


@pytest.fixture(scope="module")
def overhead():
    return load_fa_sm90_script("tile_overhead")


def _row(variant: str, s: int, times_ms: list[float], batch: int = 1, hq: int = 2) -> dict:
    return {"variant": variant, "config": "cfg", "seq_len": s, "batch": batch, "hq": hq,
            "impls": [{"impl": f"lib#{i + 1}", "status": "ok", "time_ms": t}
                      for i, t in enumerate(times_ms)]}


def test_the_fit_recovers_a_blocks_and_a_tiles_cost(overhead):
    # causal at S = 256, 512, 1024: tiles visit 1.5, 2.5 and 4.5 key blocks on average
    specs = {"causal": load_specs(["causal"])[0]}
    a, b, sms = 1.5, 2.0, 4  # us per block, us per tile
    rows = []
    for s, blocks_per_tile in ((256, 1.5), (512, 2.5), (1024, 4.5)):
        tiles = 1 * 2 * (s // 128)
        t_ms = (a * tiles * blocks_per_tile + b * tiles) / sms / 1e3
        rows.append(_row("causal", s, [t_ms * 1.3, t_ms, t_ms * 0.9]))  # the median is t_ms
    cases = overhead.cases_from_results(rows, specs)
    assert [c.blocks_per_tile for c in cases] == pytest.approx([1.5, 2.5, 4.5])
    f = overhead.fit("causal", "cfg", cases, sms=sms)
    assert f.us_per_block == pytest.approx(a)
    assert f.us_per_tile == pytest.approx(b)
    assert f.tile_in_blocks == pytest.approx(b / a)
    assert f.max_residual == pytest.approx(0, abs=1e-9)


def test_cases_whose_tiles_are_as_long_cannot_be_fitted(overhead):
    specs = {"causal": load_specs(["causal"])[0]}
    cases = overhead.cases_from_results([_row("causal", 512, [1.0]), _row("causal", 512, [1.1])],
                                        specs)
    with pytest.raises(ValueError, match="as long"):
        overhead.fit("g", "cfg", cases)
    with pytest.raises(ValueError, match="two or more"):
        overhead.fit("g", "cfg", cases[:1])


def test_only_the_named_impls_that_ran_are_timed(overhead):
    specs = {"causal": load_specs(["causal"])[0]}
    row = _row("causal", 256, [1.0, 2.0])
    row["impls"].append({"impl": "new#1", "status": "error", "time_ms": None})
    assert overhead.cases_from_results([row], specs, "lib")[0].time_ms == pytest.approx(1.5)
    with pytest.raises(ValueError, match="no impl starting with 'new'"):
        overhead.cases_from_results([row], specs, "new")


def test_a_variant_without_a_spec_says_how_to_give_one(overhead, tmp_path):
    with pytest.raises(KeyError, match="--spec"):
        overhead.cases_from_results([_row("my_window", 256, [1.0])], {})
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"results": [_row("causal", 256, [0.01]),
                                               _row("causal", 512, [0.03])]}))
    with pytest.raises(SystemExit, match="no results for sliding_window_1024"):
        overhead.main([str(results), "--group", "w=causal,sliding_window_1024"])
    unknown = tmp_path / "unknown.json"
    unknown.write_text(json.dumps({"results": [_row("my_window", 256, [0.01])]}))
    with pytest.raises(SystemExit, match="no spec 'my_window'"):
        overhead.main([str(unknown)])
    with pytest.raises(SystemExit, match="as long"):
        overhead.main([str(_same_length(tmp_path))])


def _same_length(tmp_path):
    path = tmp_path / "same.json"
    path.write_text(json.dumps({"results": [_row("causal", 512, [0.01]),
                                            _row("causal", 512, [0.011])]}))
    return path


def test_the_report_names_each_groups_fit(overhead, tmp_path, capsys):
    results = tmp_path / "results.json"
    # a = 1.5 us a block, b = 2 us a tile on 4 SMs, then S = 512 measured 1% slow
    results.write_text(json.dumps({"results": [_row("causal", 256, [0.00425]),
                                               _row("causal", 512, [0.0115 * 1.01]),
                                               _row("causal", 1024, [0.035])]}))
    out = tmp_path / "fits.json"
    overhead.main([str(results), "--sms", "4", "--json", str(out)])
    text = capsys.readouterr().out
    assert "| all | cfg | 3 | 1.5 ... 4.5 |" in text
    fits = json.loads(out.read_text())
    assert fits[0]["group"] == "all" and len(fits[0]["cases"]) == 3
    assert fits[0]["us_per_block"] == pytest.approx(1.5, rel=0.02)
    assert 0 < fits[0]["max_residual"] < 0.02
