"""`cubridge doctor` on this machine, and its stage logic on made-up findings."""

from __future__ import annotations

import json
import re
import shutil

import torch

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
    if shutil.which("nvcc") is None:
        assert "not on PATH" in out
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
