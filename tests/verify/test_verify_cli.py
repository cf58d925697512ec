"""`cubridge spec check` and `cubridge verify` from the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cubridge.cli import main

SPEC_DIR = Path(__file__).resolve().parents[2] / "examples" / "specs"
CANDIDATES = Path(__file__).resolve().parent / "verify_candidates.py"


@pytest.mark.slow
def test_spec_check_prints_summary(capsys):
    assert main(["spec", "check", str(SPEC_DIR / "prefix_lm.py")]) == 0
    out = capsys.readouterr().out
    assert "spec        prefix_lm" in out and "prefix_len[]" in out
    assert "agree with reference" in out and out.rstrip().endswith("ok")


def test_spec_check_reports_a_bad_spec_with_its_location(tmp_path, capsys):
    bad = tmp_path / "bad.py"
    bad.write_text("def reference(q, k, v):\n    return q.sum()\n")
    assert main(["spec", "check", str(bad)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"spec error: {bad}:2: reference returned out of shape ()")


@pytest.mark.slow
def test_verify_a_file_impl_passes_and_writes_json(tmp_path, capsys):
    out_json = tmp_path / "report.json"
    code = main(["verify", str(SPEC_DIR / "causal.py"), "--impl", f"{CANDIDATES}:eager_causal",
                 "--dtype", "bf16", "--seed", "5", "--json", str(out_json),
                 "--shape", "1,4,2,65,129,32", "--shape", "2,2,2,100,3,16"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.startswith("PASS: ") and "(seed 5)" in out
    report = json.loads(out_json.read_text())
    assert report["passed"] and len(report["cases"]) == 2 * 3  # 2 shapes, 3 distributions
    assert report["cases"][1]["shape"] == {"b": 1, "hq": 4, "hk": 2, "sq": 65, "sk": 129,
                                           "d": 32, "dv": None}


def test_verify_factory_peer_and_failures_exit_nonzero(capsys):
    code = main(["verify", str(SPEC_DIR / "relu_causal.py"), "--impl",
                 "cubridge.verify.peers:sdpa_impl"])
    assert code == 2 and "SDPA computes softmax attention" in capsys.readouterr().err
    code = main(["verify", str(SPEC_DIR / "causal.py"), "--impl", f"{CANDIDATES}:zeros_impl",
                 "--dtype", "bf16", "--no-lse", "--shape", "1,2,1,65,65,32"])
    assert code == 1 and capsys.readouterr().out.startswith("FAIL: ")
    code = main(["verify", str(SPEC_DIR / "causal.py"), "--impl", "no_such_module_xyz:f"])
    assert code == 2 and "No module named" in capsys.readouterr().err


def test_verify_rejects_a_bad_shape(capsys):
    import pytest
    with pytest.raises(SystemExit):
        main(["verify", str(SPEC_DIR / "causal.py"), "--impl", "m:f", "--shape", "1,3,2,8,8,16"])
    assert "not a multiple of hk" in capsys.readouterr().err


def test_an_impl_file_that_does_not_parse_is_exit_2_with_its_line(tmp_path, capsys):
    bad = tmp_path / "broken_impl.py"
    bad.write_text("import torch\n\ndef attn(q, k, v, scale=None:\n    return q\n")
    spec = str(SPEC_DIR / "causal.py")
    for extra in ([], ["--isolate"]):
        assert main(["verify", spec, "--impl", f"{bad}:attn", *extra]) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err
        assert f"{bad}:3: does not parse" in err, err
    raising = tmp_path / "raising_impl.py"
    raising.write_text("import torch\nX = 1 / 0\n")
    assert main(["verify", spec, "--impl", f"{raising}:attn"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and f"{raising}:2: raised while importing: ZeroDivision" in err


def test_verify_shows_progress_on_stderr(monkeypatch, capsys):
    from cubridge.verify import commands

    monkeypatch.setattr(commands, "PROGRESS_EVERY_S", 0.0)
    assert main(["verify", str(SPEC_DIR / "causal.py"), "--impl",
                 "cubridge.verify.peers:eager_impl", "--shape", "1,2,1,33,17,16",
                 "--shape", "1,2,1,5,9,16", "--seed", "0"]) == 0
    captured = capsys.readouterr()
    assert "verify: 1/12 cases, 0 failed" in captured.err
    assert "verify:" not in captured.out  # the table alone on stdout
