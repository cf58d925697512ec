"""The lowering stage's GPU check, isolated: a candidate that faults, crashes or
hangs is a rejected round with a precise message, and the loop goes on to the
next reply. The child (python -m cubridge.llm_path.gpu_check) is stood in for by a
small program that acts out the marker in the candidate's source, and
compute-sanitizer by a script printing a memcheck report: the mechanics run on
the CPU. tests/llm_path/test_lowering_isolation_gpu.py does the same with real
kernels on a GPU."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from stage_fixtures import SPECS

from cubridge.kernels import get_kernel
from cubridge.llm import LLMClient, Request, load_config, read_exchanges, record_fixture, user
from cubridge.llm.loop import Rejected, ask_until_valid
from cubridge.llm.request import Message
from cubridge.llm.sandbox.watchdog import Watched
from cubridge.llm_path.gpu_check import IsolatedGpuCheck, failing_case

STAND_IN = r'''
import json, os, signal, sys, time
from pathlib import Path
from cubridge.llm.sandbox.watchdog import emit

job = json.loads(Path(sys.argv[1]).read_text())
source = Path(job["source_file"]).read_text()
Path(sys.argv[1] + ".ran").write_text("yes")
cases = [[[1, 2, 1, 65, 129, 16, None], d] for d in ("normal", "scaled", "outlier")]
emit("ready", device="stand-in")
emit("build", build="D16_Dv16", index=0, cases=cases)
emit("case", build="D16_Dv16", done=1, total=3, verdict="pass")
if "SEGV" in source:
    os.kill(os.getpid(), signal.SIGSEGV)
if "HANG" in source:
    time.sleep(600)
if "FAULT" in source:
    emit("case", build="D16_Dv16", done=2, total=3, verdict="error")
    emit("fault", message="RuntimeError: CUDA error: an illegal memory access was encountered",
         cuda=True)
    sys.exit(3)
if "WRONG" in source:
    emit("verified", ok=False, summary="FAIL 2/3 cases",
         failures=["fail: B1 H2/1 S65x129 D16 scaled: rel err 3.1e-01 > 2.0e-02"])
    sys.exit(0)
emit("case", build="D16_Dv16", done=2, total=3, verdict="pass")
emit("case", build="D16_Dv16", done=3, total=3, verdict="pass")
emit("verified", ok=True, summary="PASS 3/3 cases")
emit("timed", ms=1.25)
'''

SANITIZER = r'''
import json, sys
from pathlib import Path
Path(sys.argv[0] + ".job").write_text(Path(sys.argv[-1]).read_text())
print("========= COMPUTE-SANITIZER")
print("========= Invalid __global__ write of size 4 bytes")
print("=========     at fa_sm80_fwd+0x1a0 in kernel.cu:405")
print("=========     by thread (0,0,0) in block (0,0,0)")
print("=========     Address 0x10 is out of bounds")
print("=========     Saved host backtrace up to driver entry point at kernel launch time")
print("=========     Host Frame: cuLaunchKernel [0x1234] in libcuda.so.1")
print("=========")
print("========= ERROR SUMMARY: 1 error")
sys.exit(86)
'''


class _Build:
    def to_json(self):
        return {"head_dim": 16, "head_dim_v": 16, "config": {}, "causal": False}


@pytest.fixture
def check(tmp_path):
    child = tmp_path / "stand_in.py"
    child.write_text(STAND_IN)
    sanitizer = tmp_path / "compute-sanitizer"
    sanitizer.write_text(SANITIZER)
    sanitizer.chmod(0o755)

    def make(with_sanitizer: bool = True, silence_s: float = 3.0) -> IsolatedGpuCheck:
        return IsolatedGpuCheck(
            kernel=get_kernel("fa_sm80"), spec_path=SPECS / "cosine.py", dtype=torch.bfloat16,
            arch="sm_90a", seed=0, silence_s=silence_s, workdir=tmp_path / "gpu_check",
            child=[sys.executable, str(child)],
            sanitizer=_python_script(sanitizer) if with_sanitizer else None)
    return make


def _python_script(path: Path) -> Path:
    """The fake sanitizer as an executable that runs under this interpreter."""
    wrapper = path.with_suffix(".sh")
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} {path} \"$@\"\n")
    wrapper.chmod(0o755)
    return wrapper


def test_a_passing_candidate_is_verified_and_timed(check):
    result = check()([(_Build(), None)], "// PASS")
    assert result.verification == "PASS 3/3 cases" and result.time_ms == 1.25


def test_a_wrong_candidate_is_rejected_with_the_failing_cases(check):
    with pytest.raises(Rejected, match="fails the spec on the GPU: FAIL 2/3") as err:
        check()([(_Build(), None)], "// WRONG")
    assert "rel err 3.1e-01" in str(err.value)


def test_a_cuda_fault_names_the_case_and_brings_the_sanitizer_report(check, tmp_path):
    with pytest.raises(Rejected) as err:
        check()([(_Build(), None)], "// FAULT")
    text = str(err.value)
    assert "the kernel failed on the GPU at build D16_Dv16, verification case B=1 Hq=2 Hk=1 " \
           "Sq=65 Sk=129 D=16, scaled inputs" in text
    assert "illegal memory access" in text
    assert "compute-sanitizer memcheck on that case:" in text
    assert "Invalid __global__ write of size 4 bytes" in text and "kernel.cu:405" in text
    assert "Host Frame" not in text and "ERROR SUMMARY" not in text
    # The sanitizer reran only the faulting case, without timing.
    rerun = json.loads((tmp_path / "compute-sanitizer.job").read_text())
    assert rerun["only"] == [[0, [1, 2, 1, 65, 129, 16, None], "scaled"]]
    assert rerun["time_seq_len"] is None


def test_a_segfault_is_a_crash_at_the_running_case(check):
    with pytest.raises(Rejected) as err:
        check(with_sanitizer=False)([(_Build(), None)], "// SEGV")
    text = str(err.value)
    assert "took its process down on the GPU at build D16_Dv16, verification case B=1 " \
           "Hq=2 Hk=1 Sq=65 Sk=129 D=16, scaled inputs: the process was killed by SIGSEGV" in text
    assert "compute-sanitizer is not installed here" in text


@pytest.mark.slow
def test_a_hang_is_killed_and_named(check):
    with pytest.raises(Rejected) as err:
        check(silence_s=1.5)([(_Build(), None)], "// HANG")
    text = str(err.value)
    assert text.startswith("the kernel hung on the GPU at build D16_Dv16, verification case")
    assert "no progress for 1.5 s" in text and "__syncthreads" in text


def test_failing_case_without_a_build_event_is_none():
    assert failing_case(Watched([], "exited", 1, events=[{"event": "ready"}])) is None


def test_the_loop_rejects_a_crash_and_a_hang_then_takes_a_correct_reply(check, tmp_path):
    """Three recorded replies, replayed by turn: the feedback the stand-in produces
    differs from what was recorded, as a real GPU's words would."""
    opening = [user("Lower the kernel.")]
    replies = ["// SEGV edit", "// HANG edit", "// PASS edit"]
    fixtures = tmp_path / "fixtures"
    messages = list(opening)
    for reply in replies:
        record_fixture(fixtures, "lower", Request.of(messages, max_tokens=8192),
                       reply, label="recorded fixture: test replies")
        messages += [Message("assistant", reply), user("(feedback as recorded)")]
    config = load_config({"provider": "replay", "replay_dir": str(fixtures)},
                         {"XDG_CONFIG_HOME": str(tmp_path / "no-config")})
    client = LLMClient.from_config(config, tmp_path / "run", "lower", log=lambda _: None)
    gpu = check(with_sanitizer=False, silence_s=1.5)
    outcome = ask_until_valid(client, opening, lambda text: gpu([(_Build(), None)], text),
                              rounds=3, max_tokens=8192)
    assert outcome.value.verification == "PASS 3/3 cases"
    errors = [r.error for r in outcome.rounds]
    assert "killed by SIGSEGV" in errors[0] and "hung on the GPU" in errors[1]
    assert errors[2] is None
    recorded = sorted(read_exchanges(tmp_path / "run"), key=lambda e: e.seq)
    assert [e.verification["ok"] for e in recorded] == [False, False, True]
    assert "replayed by turn" in recorded[1].reply.label
    # The model was told what happened, in the conversation.
    assert "killed by SIGSEGV" in recorded[1].request.messages[-1].content

