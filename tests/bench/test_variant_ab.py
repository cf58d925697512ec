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
