"""`cubridge doctor` on this machine, and its stage logic on made-up findings."""

from __future__ import annotations

import json
import re

import torch

from cubridge.build.nvcc import nvcc_available
from cubridge.cli import main
from cubridge.doctor import Finding, gather, render, stages


def _stage(stage_list, name):
    return next(s for s in stage_list if s.name == name)


def test_doctor_reports_this_machine(capsys):
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert f"torch                 {torch.__version__}" in out.replace("  ok  ", "")
    for name in ("nvcc", "CUTLASS headers", "triton", "flash-attn-4", "cuda-python",
                 "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "Stages:", "LLM path", "bench"):
        assert name in out, name
    if not torch.cuda.is_available():
        assert "--  gpu" in out and "no CUDA GPU" in out
        assert "GPU verify" in out and "missing a CUDA GPU visible to torch" in out
    if not nvcc_available():
        assert "--  nvcc" in out
    assert re.search(r"ok  spec \+ verify on CPU +ready", out)


def test_credentials_are_reported_by_name_never_by_value(monkeypatch, capsys):
    secret = "sk-test-0123456789abcdef-do-not-print"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    assert main(["doctor"]) == 0
    assert main(["doctor", "--json"]) == 0
    out = capsys.readouterr().out
    assert secret not in out and secret[:12] not in out
    found = {f.name: f for f in gather()}
    assert found["OPENAI_API_KEY"].ok and found["OPENAI_API_KEY"].detail == "set"
    assert not found["ANTHROPIC_API_KEY"].ok and found["ANTHROPIC_API_KEY"].detail == "not set"


def test_json_output_parses(capsys):
    assert main(["doctor", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    names = [f["name"] for f in data["findings"]]
    assert "torch" in names and "nvcc" in names
    stages = {s["name"] for s in data["stages"]}
    assert stages >= {"compile", "GPU verify", "bench", "LLM path (hosted models)"}


def test_stages_name_what_is_missing():
    base = [Finding("torch", True, ""), Finding("nvcc", True, ""),
            Finding("nvcc targets", True, ""), Finding("CUTLASS headers", False, ""),
            Finding("gpu", False, "no CUDA GPU"), Finding("cuda-python", True, ""),
            Finding("triton", True, ""), Finding("matplotlib", True, ""),
            Finding("LLM client libraries", True, ""), Finding("OPENAI_API_KEY", False, ""),
            Finding("ANTHROPIC_API_KEY", True, "")]
    st = stages(base)
    assert _stage(st, "spec + verify on CPU").ready
    assert _stage(st, "compile").ready  # hand-written kernels need nvcc only
    cute = _stage(st, "compile CuTe/CUTLASS kernels")
    assert not cute.ready and cute.missing == ["CUTLASS headers"]
    gpu = _stage(st, "GPU verify")
    assert "a CUDA GPU visible to torch" in gpu.missing
    assert _stage(st, "LLM path (hosted models)").ready  # one key is enough
    with_gpu = [f for f in base if f.name not in ("gpu", "CUTLASS headers")] + [
        Finding("gpu 0", True, "NVIDIA H100, sm_90"), Finding("CUTLASS headers", True, "")]
    assert _stage(stages(with_gpu), "bench").ready
    text = render(base, st)
    assert "missing CUTLASS headers" in text


def test_nvcc_is_found_where_the_build_finds_it(tmp_path, monkeypatch):
    """Not on PATH, but in $CUDA_HOME/bin: the build compiles with it, so the
    doctor must not call it missing."""
    from cubridge.build import nvcc as nvcc_module
    from cubridge.doctor import probe_nvcc

    fake = tmp_path / "cuda" / "bin" / "nvcc"
    fake.parent.mkdir(parents=True)
    fake.write_text("#!/bin/sh\ncase \"$1\" in\n"
                    "  --version) echo 'Cuda compilation tools, release 13.0, V13.0.88';;\n"
                    "  --list-gpu-code) echo sm_80 sm_90;;\nesac\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setattr(nvcc_module, "FALLBACK_ROOTS", ())
    assert nvcc_module.find_nvcc() == fake
    found = {f.name: f for f in probe_nvcc()}
    assert found["nvcc"].ok and found["nvcc"].detail == f"13.0 at {fake}"
    assert found["nvcc targets"].ok
    monkeypatch.delenv("CUDA_HOME")
    found = {f.name: f for f in probe_nvcc()}
    assert not found["nvcc"].ok and "CUDA_HOME" in found["nvcc"].detail
