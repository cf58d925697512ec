"""`cubridge spec check` and `cubridge verify` from the command line."""

from __future__ import annotations

import json
from pathlib import Path

from cubridge.cli import main

SPEC_DIR = Path(__file__).resolve().parents[2] / "examples" / "specs"
CANDIDATES = Path(__file__).resolve().parent / "verify_candidates.py"


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
    assert err.startswith(f"spec error: {bad}:1: reference returned out of shape ()")


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
