"""`cubridge run` picks fa_sm90 on Hopper and fa_sm80 on Ampere and Ada, says
which and why (a `[select]` line, plan.json, report.md), and `--kernel`
overrides (issue 14, part 2). The GPU is faked: the run starts (load, select,
route) without compiling anything."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from cubridge.kernels import choose_for_spec, choose_kernel
from cubridge.pipeline import run as run_module
from cubridge.pipeline.run import RunOptions, RunResult
from cubridge.spec import load

SPECS = Path(__file__).resolve().parents[2] / "examples" / "specs"
GPUS = {"sm_90a": "NVIDIA H100 80GB HBM3", "sm_80": "NVIDIA A100-SXM4-80GB",
        "sm_86": "NVIDIA A10", "sm_89": "NVIDIA GeForce RTX 4090"}


@pytest.fixture
def fake_gpu(monkeypatch):
    """Make the run see a GPU of the given arch."""
    def use(arch: str) -> None:
        monkeypatch.setattr(run_module.torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(run_module.torch.cuda, "get_device_name", lambda *_: GPUS[arch])
        monkeypatch.setattr(run_module, "device_arch", lambda device: arch)
    return use


def start(spec: str, tmp_path: Path, **opts):
    lines: list[str] = []
    ctx, route = run_module._start(SPECS / f"{spec}.py",
                                   RunOptions(out=tmp_path / spec, log=lines.append, **opts))
    return ctx, route, lines


@pytest.mark.parametrize("arch,kernel", [("sm_90a", "fa_sm90"), ("sm_80", "fa_sm80"),
                                         ("sm_86", "fa_sm80"), ("sm_89", "fa_sm80")])
def test_run_picks_the_kernel_for_the_gpu_and_says_why(fake_gpu, tmp_path, arch, kernel):
    fake_gpu(arch)
    ctx, route, lines = start("alibi_causal", tmp_path)
    assert ctx.kernel.name == kernel and route.kernel is ctx.kernel
    select = [x for x in lines if x.startswith("[select] ")]
    assert len(select) == 1
    assert select[0].startswith(f"[select] {kernel} for {arch} (this GPU: {GPUS[arch]}), "
                                "D=128, bfloat16, softmax: ")
    if kernel == "fa_sm90":
        assert "highest-priority entry (priority 10)" in select[0]
        assert "fa_sm80 fits too (priority 0)" in select[0]
    else:
        assert f"fa_sm90 passed over (wgmma/TMA kernel for sm_90a only (have {arch}))" in select[0]
    plan = json.loads((ctx.run_dir.path / "plan.json").read_text())
    assert plan["kernel"] == kernel
    assert plan["selection"]["kernel"] == kernel and not plan["selection"]["override"]
    assert plan["selection"]["reason"] in select[0]
    run_module._write_report(ctx, RunResult(ctx.run_dir.path))
    report = (ctx.run_dir.path / "report.md").read_text()
    assert f"Kernel: {kernel} for {arch}" in report
    assert "| select | " in report


def test_kernel_flag_overrides_and_says_what_the_library_would_pick(fake_gpu, tmp_path):
    fake_gpu("sm_90a")
    ctx, _, lines = start("causal", tmp_path, kernel="fa_sm80")
    assert ctx.kernel.name == "fa_sm80"
    select = next(x for x in lines if x.startswith("[select] "))
    assert "--kernel fa_sm80 overrides the selection (the library would pick fa_sm90)" in select
    plan = json.loads((ctx.run_dir.path / "plan.json").read_text())
    assert plan["selection"]["override"] is True and plan["kernel"] == "fa_sm80"


def test_without_a_gpu_the_default_target_is_named(monkeypatch, tmp_path):
    monkeypatch.setattr(run_module.torch.cuda, "is_available", lambda: False)
    ctx, _, lines = start("causal", tmp_path)
    assert ctx.arch == "sm_90a" and ctx.kernel.name == "fa_sm90"
    assert any("sm_90a (no GPU here: the default compile target)" in x for x in lines)
    ctx, _, lines = start("full", tmp_path, arch="sm_86")
    assert ctx.kernel.name == "fa_sm80"
    assert any("[select] fa_sm80 for sm_86 (--arch)" in x for x in lines)


def test_a_second_run_reuses_the_selection(fake_gpu, tmp_path):
    fake_gpu("sm_90a")
    start("causal", tmp_path)
    _, _, again = start("causal", tmp_path)
    assert any(x.startswith("[select] cached: fa_sm90") for x in again)
    assert any(x.startswith("[route] cached") for x in again)


def test_an_override_the_kernel_cannot_serve_is_said_up_front():
    sel = choose_kernel("sm_86", 128, torch.bfloat16, "softmax", kernel="fa_sm90")
    assert sel.kernel.name == "fa_sm90" and sel.override
    assert "does not support the request as it is: wgmma/TMA kernel for sm_90a only" in sel.reason


def test_mla_head_dims_on_ampere_fit_no_entry_as_they_are_and_the_selection_says_so():
    sel = choose_for_spec(load(SPECS / "mla.py"), "sm_80")
    assert sel.request.startswith("sm_80, D=192/128")
    assert "no entry supports the request as it is" in sel.reason
    assert [n for n, _ in sel.passed_over] == ["fa_sm90", "fa_sm80"]


def test_a_float32_spec_is_blamed_at_its_dtypes_before_any_path(fake_gpu, tmp_path):
    # No library kernel, and no CuIR program, takes float32 operands: the run
    # must say so at DTYPES, not fail the target CuIR's verification later.
    from cubridge.spec import SpecError

    fake_gpu("sm_90a")
    text = (SPECS / "causal.py").read_text()
    assert 'DTYPES = ["bf16", "fp16"]' in text
    path = tmp_path / "causal_fp32.py"
    path.write_text(text.replace('DTYPES = ["bf16", "fp16"]', 'DTYPES = ["bf16", "fp32"]'))
    line = path.read_text().splitlines().index('DTYPES = ["bf16", "fp32"]') + 1
    with pytest.raises(SpecError) as err:
        run_module._start(path, RunOptions(out=tmp_path / "run", log=lambda _: None))
    assert err.value.location == f"{path}:{line}"
    assert "DTYPES has float32" in err.value.message and "fa_sm90 builds" in err.value.message
    assert not (tmp_path / "run" / "target_cuir.py").exists()
