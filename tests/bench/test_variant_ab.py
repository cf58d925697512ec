"""bench/kernels/fa_sm90/variant_ab.py --compile-only: every cubin of an A/B built
into the cache on a machine without a GPU, so that the device call finds them all
(device time is what an A/B is short of)."""

from __future__ import annotations

import sys
import tarfile

import pytest
from fa_sm90_scripts import load_fa_sm90_script

from cubridge.bench.commands import load_specs
from cubridge.kernels import get_kernel


@pytest.mark.nvcc
@pytest.mark.slow
@pytest.mark.parametrize("kernel,arch", [("fa_sm90", "sm_90a"), ("fa_sm80", "sm_80")])
def test_compile_only_builds_every_side_into_the_cache(tmp_path, monkeypatch, capsys, kernel,
                                                       arch):
    variant_ab = load_fa_sm90_script("variant_ab")
    cache = tmp_path / "cache"
    monkeypatch.setenv("CUBRIDGE_CACHE_DIR", str(cache))
    library = tmp_path / "library"  # no header, no source: the generated header, the library's
    library.mkdir()
    edited = tmp_path / "edited"  # a kernel edit on one side, in the kernel's own source file
    edited.mkdir()
    source = get_kernel(kernel).source
    (edited / source.name).write_text(source.read_text() + "\n// edit\n")
    if kernel != "fa_sm90":  # another kernel's source in a folder is not this kernel's
        (library / "fa_sm90.cu").write_text("#error not this kernel's source\n")
    monkeypatch.setattr(sys, "argv", ["variant_ab.py", "causal", "--kernel", kernel,
                                      "--header", f"lib={library}", "--header", f"edit={edited}",
                                      "--compile-only", arch])
    variant_ab.main()
    assert f"built 2 variants for {arch}" in capsys.readouterr().out
    entries = sorted(p.name for p in (cache / "cubin").glob("*/*"))
    (spec,) = load_specs(["causal"])
    assert len(entries) == 2 * len(spec.dtypes)  # each side, each dtype
    variant_ab.main()  # a second run builds nothing new
    assert sorted(p.name for p in (cache / "cubin").glob("*/*")) == entries
    # --pack: exactly these entries, relative to the cache root, for the device's cache
    archive = tmp_path / "ab.tar.xz"
    monkeypatch.setattr(sys, "argv", sys.argv + ["--pack", str(archive)])
    variant_ab.main()
    assert f"packed {len(entries)} cache entries" in capsys.readouterr().out
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert sorted({n.split("/")[2] for n in names if n.count("/") >= 2}) == entries
    assert all(n.startswith("cubin/") for n in names)
    assert any(n.endswith("/kernel.cubin") for n in names)


def test_out_is_required_for_a_timed_run(monkeypatch, capsys):
    variant_ab = load_fa_sm90_script("variant_ab")
    monkeypatch.setattr(sys, "argv", ["variant_ab.py", "causal", "--header", "a=x"])
    with pytest.raises(SystemExit):
        variant_ab.main()
    assert "--out is required unless --compile-only" in capsys.readouterr().err


def test_pack_goes_with_compile_only(monkeypatch, capsys, tmp_path):
    variant_ab = load_fa_sm90_script("variant_ab")
    monkeypatch.setattr(sys, "argv", ["variant_ab.py", "causal", "--header", "a=x",
                                      "--out", str(tmp_path), "--pack", str(tmp_path / "c.tar.xz")])
    with pytest.raises(SystemExit):
        variant_ab.main()
    assert "--pack goes with --compile-only" in capsys.readouterr().err


def test_a_run_cut_short_keeps_the_cases_it_finished(tmp_path, monkeypatch):
    """A device call's time limit can stop an A/B before its reports: the cases done
    so far are on disk after each one, marked partial; a finished run is not."""
    import json

    from cubridge.bench.runner import BenchConfig, CaseResult, ImplResult

    variant_ab = load_fa_sm90_script("variant_ab")
    (spec,) = load_specs(["causal"])
    calls = []

    class Cut(Exception):
        pass

    def fake_run_case(spec, cfg, s, impls, config, timer, stop_at=None):
        calls.append(s)
        if stop_at is not None and len(calls) == stop_at:
            raise Cut
        return CaseResult(spec.name, cfg.name, s, 1, cfg.hq, cfg.hk, cfg.d, s * s // 2, 0.5,
                          "causal", 2.0 * s * s * cfg.d, "test",
                          [ImplResult("a#1", "ok", 1.0, 1.0)])

    config = BenchConfig(seq_lens=[1024, 2048, 4096], configs=["llama2_7b"])
    out = tmp_path / "ab"
    monkeypatch.setattr(variant_ab, "do_bench_timer", lambda settings: None)  # (no triton here)
    monkeypatch.setattr(variant_ab, "run_case", lambda *a: fake_run_case(*a, stop_at=3))
    with pytest.raises(Cut):
        variant_ab.run_and_report([(spec, [])], config, out, "test")
    partial = json.loads((out / "results.json").read_text())
    assert [r["seq_len"] for r in partial["results"]] == [1024, 2048]
    assert "PARTIAL: 2 of 3 cases" in partial["meta"]["timing"]
    assert "PARTIAL: 2 of 3 cases" in (out / "results.md").read_text()

    calls.clear()
    monkeypatch.setattr(variant_ab, "run_case", lambda *a: fake_run_case(*a))
    variant_ab.run_and_report([(spec, [])], config, out, "test")
    done = json.loads((out / "results.json").read_text())
    assert [r["seq_len"] for r in done["results"]] == [1024, 2048, 4096]
    assert "PARTIAL" not in done["meta"]["timing"]
