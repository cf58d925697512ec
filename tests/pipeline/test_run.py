"""`cubridge run` on a machine without a GPU: every stage up to compilation,
the stop message, the artifacts, and the cache on a second run."""

import dataclasses
import json
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
    assert list(result.stages) == ["check", "load", "select", "route", "transfer", "verify-ir",
                                   "lower", "compile"]
    assert "long case" in (out / "spec_check.txt").read_text()
    assert "PASS" in result.stages["verify-ir"].summary
    for name in ("spec.py", "plan.json", "target_cuir.py", "cubridge_hooks.cuh", "kernel.cu",
                 "aux_manifest.json", "lower.json", "kernel.py", "verify_ir.txt", "report.md",
                 "resources.json", "spec_check.txt"):
        assert (out / name).is_file(), name
    assert list(out.glob("*.cubin")), "no cubin written"
    header = (out / "cubridge_hooks.cuh").read_text()
    assert "tanh" in header  # the softcap reached the CUDA hooks
    assert "class Target(FaSm90)" in (out / "target_cuir.py").read_text()  # sm_90a: fa_sm90

    again: list[str] = []
    second = run(SPECS / "softcap_causal.py", RunOptions(out=out, log=again.append))
    assert second.stopped == result.stopped
    stage_lines = [x for x in again if x.startswith("[")]
    assert len(stage_lines) == 8
    assert all(x.split("] ")[1].startswith("cached") for x in stage_lines), stage_lines

    # cubridge.compile raises the stop as what it is (from the cache: no stage reruns)
    import cubridge
    from cubridge.build.errors import NoGpuError

    with pytest.raises(NoGpuError, match="no CUDA GPU visible"):
        cubridge.compile(SPECS / "softcap_causal.py", out=out)


def test_run_reports_a_bad_spec_with_its_location(tmp_path):
    from cubridge.spec import SpecError

    bad = tmp_path / "bad.py"
    bad.write_text("NAME = 'bad'\ndef reference(q, k):\n    return q\n")
    with pytest.raises(SpecError) as err:
        run(bad, RunOptions(out=tmp_path / "run", log=lambda _: None))
    assert "bad.py" in str(err.value)
    assert not (tmp_path / "run").exists()  # nothing half-made for a spec that never loaded


@pytest.mark.slow  # the spec check and verify-ir at the long case: ~15 s
def test_the_spec_is_traced_once_and_the_plan_read_back(tmp_path, monkeypatch):
    """The route traces the mods once; transfer and lowering use that plan, and the
    run directory's kernel.py rebuilds the variant from plan.json without tracing."""
    import json

    from cubridge.pipeline import variant
    from cubridge.transfer import hooks

    calls: list[str] = []
    real = hooks.trace_mask_mod

    def counting(*args, **kwargs):
        calls.append("mask_mod")
        return real(*args, **kwargs)

    monkeypatch.setattr(hooks, "trace_mask_mod", counting)
    monkeypatch.setattr("cubridge.pipeline.run.nvcc_available", lambda: False)
    out = tmp_path / "run"
    result = run(SPECS / "document_causal.py", RunOptions(out=out, log=lambda _: None))
    assert "nvcc not found" in result.stopped and calls == ["mask_mod"]
    from cubridge.build.errors import NvccNotFoundError

    assert result.stop_error is NvccNotFoundError
    plan = json.loads((out / "plan.json").read_text())
    assert plan["path"] == "rules" and plan["kernel"] == "fa_sm90"  # the sm_90a default
    assert plan["hooks"]["classification"] == "table"
    assert plan["hooks"]["table_block"] == [64, 128]  # fa_sm90's per-warpgroup tile

    def no_tracing(*args, **kwargs):
        raise AssertionError("traced again")

    monkeypatch.setattr(hooks, "trace_mask_mod", no_tracing)
    loaded = variant.load_variant(out)
    assert loaded.hooks is not None
    assert loaded.hooks.plan.to_json() == result.kernel.hooks.plan.to_json()
    assert loaded.hooks.text == (out / "cubridge_hooks.cuh").read_text()


@pytest.mark.slow  # the spec check and verify-ir: ~8 s
def test_a_spec_without_name_keeps_its_name_in_the_run_directory(tmp_path, monkeypatch):
    """kernel.py loads the run's snapshot spec.py: a spec without NAME must keep the
    name of its own file there (the plan is checked against it)."""
    from cubridge.pipeline import variant

    monkeypatch.setattr("cubridge.pipeline.run.nvcc_available", lambda: False)
    text = (SPECS / "causal.py").read_text()
    path = tmp_path / "my_causal.py"
    path.write_text("\n".join(line for line in text.splitlines()
                              if not line.startswith("NAME =")) + "\n")
    out = tmp_path / "run"
    result = run(path, RunOptions(out=out, log=lambda _: None))
    assert "nvcc not found" in result.stopped
    loaded = variant.load_variant(out)
    assert loaded.spec.name == "my_causal" == json.loads((out / "lower.json").read_text())["spec"]


def test_a_failed_stage_leaves_a_report_saying_which_and_why(tmp_path, monkeypatch):
    from cubridge.pipeline import run as run_module
    real = run_module.verify

    def failing(spec, fn, **kw):  # the target CuIR's verification finds a wrong output
        report = real(spec, fn, **{**kw, "shapes": kw["shapes"][:1], "dtypes": kw["dtypes"][:1]})
        report.cases = [dataclasses.replace(c, verdict="fail", reason="out differs")
                        for c in report.cases]
        return report

    monkeypatch.setattr(run_module, "verify", failing)
    out = tmp_path / "run"
    with pytest.raises(run_module.VerificationFailed):
        run(SPECS / "causal.py", RunOptions(out=out, log=lambda _: None))
    report = (out / "report.md").read_text()
    assert "| transfer |" in report  # the stages that finished, then what failed
    assert "Failed: VerificationFailed: target CuIR fails the spec" in report
    assert (out / "target_cuir.py").is_file()  # nothing already produced is lost


@pytest.mark.slow  # verify-ir at the long case, in every dtype: ~10 s
def test_transfer_command_tries_the_rules_first(tmp_path, capsys):
    """`cubridge transfer` routes like `cubridge run`: a spec whose mods trace
    into the hooks gets the rules' target, verified, and no LLM is asked."""
    import json

    from cubridge.cli import main

    out = tmp_path / "run"
    assert main(["transfer", "--spec", str(SPECS / "causal.py"), "--out", str(out)]) == 0
    assert f"{out / 'target_cuir.py'}" in capsys.readouterr().out
    assert json.loads((out / "plan.json").read_text())["path"] == "rules"
    assert "class Target(FaSm90)" in (out / "target_cuir.py").read_text()  # sm_90a: fa_sm90
    assert "PASS" in (out / "verify_ir.txt").read_text()
    assert not (out / "llm").exists()
