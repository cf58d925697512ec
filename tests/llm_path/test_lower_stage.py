"""The LLM lowering stage's ReAct loop through the openai client, with nvcc:
edit actions that break the build come back with nvcc's diagnostics and the
edited lines around them, edits that do not apply come back with the edit
error, and a reply that compiles without spills passes; without a GPU the
stage says it verified by compiling only."""

from __future__ import annotations

import json
import re

import pytest
import torch
from llm_fakes import make_client
from stage_fixtures import FAST, FIXTURE_LABEL, SPECS, fixture_reply

from cubridge.kernels import get_kernel
from cubridge.llm import LLMClient, Request, code_block, load_config, read_exchanges, record_fixture
from cubridge.llm_path.correspondence import library_correspondence_path
from cubridge.llm_path.lower import builds_for, describe_target, lower, lowering_inputs
from cubridge.rundir import RunDir
from cubridge.spec import load

pytestmark = pytest.mark.nvcc

BROKEN = """The scale multiply goes first.

@@@ replace "const float to_log2 = hooks::kHasScoreMod"
  const float to_log2 = hooks::kHasScoreMod ? kLog2e : p.scale_log2 +;
@@@ end
"""
NOT_APPLICABLE = """@@@ replace 9000..9001
x
@@@ end
"""
COMPILES = """A comment only: the cosine scaling itself is not part of this test.

@@@ insert before "CUBRIDGE_EXPORT_KERNEL_INFO(fa_sm80::kBlockM"
// lowered by cubridge (test reply)
@@@ end
"""


# The structural variants whose lowerings are also compiled for sm_80: a line
# each edit must have put into fa_sm80.cu.
STRUCTURAL_MARKERS = {
    "learnable_sink": "const float sink_log2 = aux_load<float>(p.aux, 0, h) * kLog2e;",
    "softmax_one": "const float total = fmaf(sum, keep, exp2f(-final_max));",
    "gated_output": "const float gate = aux_load<float>(p.aux, 0, b, h, row);",
    "differential": "gemm_qk_half<kQkSteps / 2>(s, q_tile, k_tile, warp, row_major_lane,",
}


@pytest.fixture
def target(tmp_path):
    path = tmp_path / "target_cuir.py"
    path.write_text(code_block(fixture_reply("transfer_cosine.md"), "python"))
    return path


@pytest.mark.slow
def test_compile_errors_and_edit_errors_are_fed_back(llm_server, tmp_path, target):
    llm_server.reply(BROKEN, NOT_APPLICABLE, COMPILES)
    client = make_client("openai", llm_server, tmp_path, stage="lower")
    result = lower(target, client, RunDir(tmp_path, log=lambda _: None), SPECS / "cosine.py",
                   FAST, kernel=get_kernel("fa_sm80"), arch="sm_90a")
    errors = [e.verification.get("error") for e in sorted(read_exchanges(tmp_path),
                                                         key=lambda e: e.seq)]
    assert "nvcc rejected the edited fa_sm80.cu" in errors[0]
    assert "error" in errors[0] and "p.scale_log2 +;" in errors[0]  # the edited line is shown
    assert "9000" in errors[1] and errors[2] is None
    # The compiler's words went back to the model after its reply.
    sent = llm_server.requests[1]["body"]["messages"]
    assert sent[-2]["content"] == BROKEN and errors[0] in sent[-1]["content"]
    # The first prompt: IR diff, the recorded correspondence, the aux slots and the
    # ABI, the register budget, the edit format and the mapped source regions; no
    # CuIR manual.
    system, prompt = (m["content"] for m in llm_server.requests[0]["body"]["messages"])
    assert "CuIR reference" not in system and "CuIR reference" not in prompt
    assert "diff FaSm80 -> FaSm80Cosine" in prompt and "@@@ replace" in prompt
    assert "CUBRIDGE_HEAD_DIM=128" in prompt and "struct AuxArgs" in prompt
    assert "`aux_load<float>(p.aux, 0, i0)`" in prompt
    attention = next(e for e in json.loads(library_correspondence_path(get_kernel("fa_sm80"))
                                           .read_text())["correspondence"]
                     if e["method"] == "attention")  # (its line ranges move with fa_sm80.cu)
    ranges = ", ".join(f"{a}-{b}" for a, b in attention["cuda_lines"])
    assert f"| attention | {ranges} |" in prompt
    assert "the unmodified fa_sm80 uses" in prompt and "may spill at most" in prompt

    assert "// lowered by cubridge (test reply)" in result.source.read_text()
    meta = json.loads((tmp_path / "lower.json").read_text())
    res = meta["resources"]["D128_Dv128"]
    assert res["spill_store_bytes"] + res["spill_load_bytes"] <= meta["spill_budgets"][
        "D128_Dv128"]
    if not torch.cuda.is_available():
        assert meta["verification"].startswith("compile-only")
        assert "not run or verified" in result.record.summary


# ptxas's notes that it serialised or fenced the wgmma pipeline (C7508-C7520; see
# tests/kernels/test_fa_sm90_compile.py): a lowering of fa_sm90 must leave none.
PTXAS_WGMMA_NOTES = re.compile(r"\(C75\d\d\)[^\n]*")


@pytest.mark.slow
@pytest.mark.parametrize(("variant", "library", "build", "marker", "arch"), [
    ("cosine", "fa_sm80", "D128_Dv128",
     "cosine_scale(s, inv_q_lane, inv_k_lo, inv_k_hi, p, h, lane);", "sm_90a"),
    ("mla", "fa_sm80", "D192_Dv128", "constexpr int kHeadDimV = CUBRIDGE_HEAD_DIM_V;", "sm_90a"),
    ("cosine", "fa_sm90", "D128_Dv128",
     "cosine_scale(s, q_scale, sh.k_inv_norm[slot.index], pos);", "sm_90a"),
    ("mla", "fa_sm90", "D192_Dv128", "constexpr int kHeadDimV = CUBRIDGE_HEAD_DIM_V;", "sm_90a"),
    *[(variant, "fa_sm80", "D128_Dv128", marker, arch)
      for variant, marker in STRUCTURAL_MARKERS.items() for arch in ("sm_80", "sm_90a")],
])
def test_lowering_replayed_from_recorded_fixture_compiles(variant, library, build, marker, arch,
                                                          tmp_path):
    """The expert's lowerings (recorded fixtures) of fa_sm80.cu to the structural
    variants (cosine, MLA 192/128, the learnable sink, ...) and of fa_sm90.cu to
    cosine attention and MLA (`@@@ keep`: fa_sm90 builds 192/128 as it is): each
    applies to the current source and compiles for `arch`
    within the spill budget the prompt states (fa_sm90's also in fp16, with no
    ptxas note of a serialised wgmma pipeline). Verified by compiling only here;
    GPU verification needs an H100 (tests/llm_path/test_lowered_on_gpu.py)."""
    suffix = "" if library == "fa_sm80" else f"_{library}"
    target = tmp_path / "target_cuir.py"
    target.write_text(code_block(fixture_reply(f"transfer_{variant}{suffix}.md"), "python"))
    lib, spec_path = get_kernel(library), SPECS / f"{variant}.py"
    description = describe_target(target, lib, FAST)
    messages = lowering_inputs(target, lib, spec_path, arch, FAST,
                               description=description).messages
    fixtures, run = tmp_path / "fixtures", tmp_path / "run"
    record_fixture(fixtures, "lower", Request.of(messages, temperature=None, max_tokens=8192,
                                                 stop=None, sample=0),
                   fixture_reply(f"lower_{variant}{suffix}.md"), label=FIXTURE_LABEL)
    config = load_config({"provider": "replay", "replay_dir": str(fixtures)},
                         {"XDG_CONFIG_HOME": str(tmp_path / "no-config")})
    client = LLMClient.from_config(config, run, "lower", log=lambda _: None)
    result = lower(target, client, RunDir(run, log=lambda _: None), spec_path, FAST,
                   kernel=lib, arch=arch, description=description)
    assert marker in result.source.read_text()
    meta = json.loads((run / "lower.json").read_text())
    assert meta["kernel"] == library
    res = meta["resources"][build]
    assert res["spill_store_bytes"] + res["spill_load_bytes"] <= meta["spill_budgets"][build]
    (exchange,) = read_exchanges(run)
    assert FIXTURE_LABEL in exchange.label and exchange.verification["ok"]
    if (variant, library) == ("mla", "fa_sm90"):  # kept as it is, built 192/128 causal
        assert not meta["source_edited"] and result.source.read_text() == lib.source.read_text()
        assert [(b["head_dim"], b["head_dim_v"], b["causal"]) for b in meta["builds"]] == \
            [(192, 128, True)]
        assert "no edit (@@@ keep" in result.record.summary
    if library == "fa_sm90":
        source = result.source.read_text()
        (kernel_build,) = builds_for(load(spec_path), lib, description["config"])
        for dtype in (torch.bfloat16, torch.float16):
            compiled = lib.compile_build(kernel_build, dtype, "sm_90a", source=source)
            resources = compiled.resources_of(lib.entry)
            assert resources.spill_store_bytes + resources.spill_load_bytes <= \
                meta["spill_budgets"][build], f"{dtype}: {resources}"
            notes = PTXAS_WGMMA_NOTES.findall(compiled.log)
            assert not notes, f"{dtype}: ptxas {notes}"


def test_the_lowering_prompt_says_where_a_padded_head_dim_runs():
    """A head dim fa_sm90 pads (112) is built at 128: the builds the prompt lists say so,
    so an edit is written for the 128-wide tiles the source really has."""
    from cubridge.llm_path.lower import _defines_text

    fa_sm90 = get_kernel("fa_sm90")
    text = _defines_text(fa_sm90, [fa_sm90.build_for(112), fa_sm90.build_for(128)], torch.bfloat16)
    padded, native = text.splitlines()
    assert "CUBRIDGE_HEAD_DIM=128" in padded and "CUBRIDGE_HEAD_DIM=128" in native
    assert padded.endswith("(the problem's head dim 112 runs on the 128-wide build: its loads "
                           "zero-fill the columns past 112, its stores skip them)")
    assert "zero-fill" not in native
