"""Generated CUDA never takes the tool down (GPU, pytest -m gpu): one lowering
stage, replayed from three recorded replies, meets an edit that writes out of
bounds, then one that hangs, then the recorded cosine lowering. The first two
end as rejected rounds with a precise message (the CUDA error and, where
compute-sanitizer is installed, its memcheck report; the hang killed after
StageSettings.gpu_timeout_s without progress), and the same run then verifies
and times the third. The process running the stage keeps a working CUDA context.

The compile-only test below (marker nvcc) checks on any machine with nvcc that
the two faulty edits apply to today's fa_sm80.cu and compile within the spill
budget, so that on the GPU they fail by faulting and hanging, not earlier."""

from __future__ import annotations

import dataclasses
import json
import time

import pytest
import torch
from stage_fixtures import FAST, FIXTURE_LABEL, SPECS, fixture_reply

from cubridge.build.sanitizer import find_compute_sanitizer
from cubridge.kernels import get_kernel
from cubridge.llm import (
    LLMClient,
    Request,
    apply_edits,
    assistant,
    code_block,
    load_config,
    parse_edits,
    read_exchanges,
    record_fixture,
    user,
)
from cubridge.llm_path.lower import builds_for, describe_target, lower, lowering_inputs
from cubridge.rundir import RunDir
from cubridge.spec import load

REPLIES = ["lower_oob_write.md", "lower_hang.md", "lower_cosine.md"]
HANG_TIMEOUT_S = 60.0


@pytest.mark.nvcc
@pytest.mark.slow
@pytest.mark.parametrize("fixture", REPLIES[:2])
def test_faulty_edits_compile_within_the_spill_budget(fixture):
    lib = get_kernel("fa_sm80")
    source = apply_edits(lib.source.read_text(), parse_edits(fixture_reply(fixture)))
    spec = load(SPECS / "cosine.py")
    for build in builds_for(spec, lib, {"causal": False}):
        res = lib.compile_build(build, spec.dtypes[0], "sm_90a", source=source) \
            .resources_of(lib.entry)
        assert res.within_spill_budget, res


@pytest.mark.gpu
def test_a_fault_and_a_hang_are_rejected_rounds_then_a_correct_reply_verifies(tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU visible")
    from cubridge.build.driver import device_arch

    lib, spec_path = get_kernel("fa_sm80"), SPECS / "cosine.py"
    arch = device_arch(torch.device("cuda"))
    target = tmp_path / "target_cuir.py"
    target.write_text(code_block(fixture_reply("transfer_cosine.md"), "python"))
    settings = dataclasses.replace(FAST, rounds=3, gpu_timeout_s=HANG_TIMEOUT_S)
    description = describe_target(target, lib, settings)
    messages = lowering_inputs(target, lib, spec_path, arch, settings,
                               description=description).messages
    # Three turns of one conversation; the feedback between them is whatever the
    # GPU says, so the replies are replayed by turn.
    fixtures, run = tmp_path / "fixtures", tmp_path / "run"
    conversation = list(messages)
    for name in REPLIES:
        record_fixture(fixtures, "lower", Request.of(conversation, temperature=None,
                                                     max_tokens=8192, stop=None, sample=0),
                       fixture_reply(name), label=FIXTURE_LABEL)
        conversation += [assistant(fixture_reply(name)), user("(the GPU's feedback)")]
    config = load_config({"provider": "replay", "replay_dir": str(fixtures)},
                         {"XDG_CONFIG_HOME": str(tmp_path / "no-config")})
    client = LLMClient.from_config(config, run, "lower", log=lambda _: None)

    start = time.monotonic()
    result = lower(target, client, RunDir(run, log=lambda _: None), spec_path, settings,
                   kernel=lib, arch=arch, description=description)
    seconds = time.monotonic() - start

    exchanges = sorted(read_exchanges(run), key=lambda e: e.seq)
    errors = [e.verification.get("error") for e in exchanges]
    print("\n\n".join(str(e) for e in errors))  # the lead reads these messages
    assert [e.verification["ok"] for e in exchanges] == [False, False, True]
    fault, hang = errors[0], errors[1]
    assert fault.startswith("the kernel failed on the GPU at build D128_Dv128, verification "
                            "case"), fault
    assert "illegal" in fault.lower(), fault
    if find_compute_sanitizer() is not None:
        # The rerun's report is attached. On the H100 of 2026-11-24 memcheck
        # said only "Target application returned an error" for this write, not
        # the access itself, so the test does not demand the access line.
        assert "compute-sanitizer memcheck on that case" in fault, fault
    else:
        assert "compute-sanitizer is not installed here" in fault
    assert hang.startswith("the kernel hung on the GPU at build D128_Dv128"), hang
    assert f"no progress for {HANG_TIMEOUT_S:g} s" in hang
    # The model heard about the fault in the conversation.
    assert "the kernel failed on the GPU" in exchanges[1].request.messages[-1].content

    meta = json.loads((run / "lower.json").read_text())
    assert meta["verification"].startswith("PASS"), meta["verification"]
    assert meta["candidates"][0]["time_ms"] > 0
    assert "cosine_scale(s, inv_q_lane, inv_k_lo, inv_k_hi, p, h, lane);" in \
        result.source.read_text()
    assert (run / "gpu_check" / "candidate1.cu").is_file()  # every candidate kept to audit
    # The stage's own process never launched a candidate: its CUDA context works.
    x = torch.ones(1024, device="cuda")
    assert float((x * 2).sum()) == 2048.0
    torch.cuda.synchronize()
    print(f"stage took {seconds:.0f} s")
