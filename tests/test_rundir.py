import json

import pytest

from cubridge.rundir import RunDir, content_hash


def test_content_hash_is_stable_and_order_sensitive():
    assert content_hash("a", "b") == content_hash("a", "b")
    assert content_hash("a", "b") != content_hash("b", "a")
    assert content_hash("ab") != content_hash("a", "b")  # parts are length-prefixed


def test_stage_records_and_reuses_artifacts(tmp_path):
    lines = []
    run = RunDir(tmp_path, log=lines.append)
    with run.stage("lower", key="k1") as rec:
        run.write("kernel.cu", "// code")
        rec.artifacts.append("kernel.cu")
        rec.summary = "emitted 1 hook"
    assert lines and lines[0].startswith("[lower] emitted 1 hook")
    reopened = RunDir(tmp_path, log=lines.append)
    assert reopened.cached("lower", "k1") is not None
    assert reopened.cached("lower", "k2") is None  # input changed
    (tmp_path / "kernel.cu").unlink()
    assert reopened.cached("lower", "k1") is None  # artifact lost
    assert json.loads((tmp_path / "manifest.json").read_text())["stages"]["lower"]["key"] == "k1"


def test_failed_stage_is_not_recorded_and_keeps_earlier_artifacts(tmp_path):
    run = RunDir(tmp_path, log=lambda _: None)
    with run.stage("transfer", key="a") as rec:
        run.write("target.py", "x = 1")
        rec.artifacts.append("target.py")
    with pytest.raises(RuntimeError), run.stage("compile", key="b"):
        raise RuntimeError("nvcc failed")
    again = RunDir(tmp_path, log=lambda _: None)
    assert again.cached("transfer", "a") is not None
    assert "compile" not in again.stages
    assert (tmp_path / "target.py").read_text() == "x = 1"
