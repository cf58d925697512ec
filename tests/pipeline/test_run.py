"""`cubridge run` on a machine without a GPU: every stage up to compilation,
the stop message, the artifacts, and the cache on a second run."""

from pathlib import Path

import pytest
import torch

from cubridge.pipeline.run import RunOptions, run

SPECS = Path(__file__).resolve().parents[2] / "examples" / "specs"


@pytest.mark.slow
@pytest.mark.nvcc
@pytest.mark.skipif(torch.cuda.is_available(), reason="tests the no-GPU stop")
def test_run_stops_after_compiling_without_gpu_and_caches(tmp_path):
    lines: list[str] = []
    out = tmp_path / "run"
    result = run(SPECS / "softcap_causal.py", RunOptions(out=out, log=lines.append))
    assert "no CUDA GPU" in result.stopped
    assert list(result.stages) == ["check", "load", "transfer", "verify-ir", "lower", "compile"]
    assert "long case" in (out / "spec_check.txt").read_text()
    assert "PASS" in result.stages["verify-ir"].summary
    for name in ("spec.py", "target_cuir.py", "cubridge_hooks.cuh", "fa_sm80.cu", "kernel.py",
                 "verify_ir.txt", "report.md", "resources.json", "spec_check.txt"):
        assert (out / name).is_file(), name
    assert list(out.glob("*.cubin")), "no cubin written"
    header = (out / "cubridge_hooks.cuh").read_text()
    assert "tanh" in header  # the softcap reached the CUDA hooks
    assert "class Target(FaSm80)" in (out / "target_cuir.py").read_text()

    again: list[str] = []
    second = run(SPECS / "softcap_causal.py", RunOptions(out=out, log=again.append))
    assert second.stopped == result.stopped
    stage_lines = [x for x in again if x.startswith("[") and not x.startswith("[path]")]
    assert len(stage_lines) == 6
    assert all(x.split("] ")[1].startswith("cached") for x in stage_lines), stage_lines


def test_run_reports_a_bad_spec_with_its_location(tmp_path):
    from cubridge.spec import SpecError

    bad = tmp_path / "bad.py"
    bad.write_text("NAME = 'bad'\ndef reference(q, k):\n    return q\n")
    with pytest.raises(SpecError) as err:
        run(bad, RunOptions(out=tmp_path / "run", log=lambda _: None))
    assert "bad.py" in str(err.value)
    assert not (tmp_path / "run").exists()  # nothing half-made for a spec that never loaded
