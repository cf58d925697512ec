"""`cubridge eval` end to end without a network: the recorded expert fixtures
(tests/fixtures/llm, labelled, not model output) replayed for cosine and MLA,
two samples each. Sample 0 answers right at once; sample 1's transfer is
right on its second reply (after a feedback round), and its lowering never
gives an edit. The pass@k tables must say exactly that, and the GPU column
must say "not run" here, never "passed". The other structural examples with
recorded fixtures (learnable sink, softmax_1, gated output, differential)
are replayed one sample each: every measure passes at once."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "llm_path"))
from stage_fixtures import FIXTURE_LABEL, SPECS, fixture_reply  # noqa: E402

from cubridge.cli import main  # noqa: E402
from cubridge.kernels import get_kernel  # noqa: E402
from cubridge.llm import Request, assistant, code_block, record_fixture, user  # noqa: E402
from cubridge.llm.templates import render  # noqa: E402
from cubridge.llm_path.lower import lowering_inputs  # noqa: E402
from cubridge.llm_path.settings import StageSettings  # noqa: E402
from cubridge.llm_path.transfer import transfer_messages  # noqa: E402
from cubridge.pipeline.evaluate import pass_at_k  # noqa: E402

NO_CODE = "I would rather explain than answer."
NO_IR = "no ```python block in the reply"
NO_EDITS = ("no edit actions in the reply (expected '@@@ replace N..M' / '@@@ insert after N' / "
            "'@@@ insert before N' / '@@@ delete N..M' blocks, each closed by '@@@ end', or "
            "'@@@ keep' where the file builds the target as it is)")


def test_pass_at_k_is_the_unbiased_estimator():
    assert pass_at_k(5, 0, 1) == 0.0 and pass_at_k(5, 5, 5) == 1.0
    assert pass_at_k(2, 1, 1) == 0.5 and pass_at_k(5, 1, 3) == pytest.approx(0.6)
    assert pass_at_k(2, 1, 3) is None  # k > n: not reported


def _record(fixtures: Path, stage: str, messages, reply: str, sample: int) -> None:
    record_fixture(fixtures, stage, Request.of(messages, temperature=None, max_tokens=8192,
                                               stop=None, sample=sample),
                   reply, label=FIXTURE_LABEL)


def _rounds(messages, replies_and_errors):
    """The requests of a conversation: each rejected reply and its feedback appended."""
    convo = list(messages)
    out = []
    for reply, error in replies_and_errors:
        out.append((list(convo), reply))
        if error is not None:
            convo += [assistant(reply), user(render("feedback", error=error))]
    return out


def _replayed_eval(tmp_path, monkeypatch, arch):
    lib, fixtures = get_kernel("fa_sm80"), tmp_path / "fixtures"
    settings = StageSettings(rounds=2)
    for variant in ("cosine", "mla"):
        spec = SPECS / f"{variant}.py"
        transfer = transfer_messages(spec, lib)
        good_ir = fixture_reply(f"transfer_{variant}.md")
        for sample, script in ((0, [(good_ir, None)]), (1, [(NO_CODE, NO_IR), (good_ir, None)])):
            for messages, reply in _rounds(transfer, script):
                _record(fixtures, "transfer", messages, reply, sample)
        target = tmp_path / f"{variant}_target.py"
        target.write_text(code_block(good_ir, "python"))
        lower = lowering_inputs(target, lib, spec, arch, settings).messages
        script0 = [(fixture_reply(f"lower_{variant}.md"), None)]
        script1 = [(NO_CODE, NO_EDITS), (NO_CODE, NO_EDITS)]
        for sample, script in ((0, script0), (1, script1)):
            for messages, reply in _rounds(lower, script):
                _record(fixtures, "lower", messages, reply, sample)

    return _eval(tmp_path, monkeypatch, arch, fixtures, ("cosine", "mla", "causal"), k=2)


def _eval(tmp_path, monkeypatch, arch, fixtures, variants, k):
    """`cubridge eval` of the example specs over the recorded fixtures."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-config"))
    out = tmp_path / "eval"
    code = main(["eval", *(str(SPECS / f"{v}.py") for v in variants),
                 "--k", str(k), "--rounds", "2", "--arch", arch, "--kernel", "fa_sm80",
                 "--out", str(out), "--llm-provider", "replay",
                 "--llm-replay-dir", str(fixtures)])
    assert code == 0
    return out, json.loads((out / "eval.json").read_text())


@pytest.mark.slow
@pytest.mark.nvcc
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the report without a GPU")
def test_eval_replays_fixtures_into_pass_at_k_tables(tmp_path, monkeypatch):
    out, report = _replayed_eval(tmp_path, monkeypatch, "sm_80")
    for variant in ("cosine", "mla"):
        p = report["pass_at"][variant]
        assert p["ir"] == {"1": 1.0, "3": None, "5": None}
        assert p["compile"]["1"] == 0.5
        assert p["gpu"] == {"1": None, "3": None, "5": None}  # not run, never passed
    specs = {s["spec"]: s for s in report["specs"]}
    assert specs["causal"]["skipped"].startswith("rules path")
    s0, s1 = specs["cosine"]["samples"]
    assert (s0["transfer"]["rounds"], s1["transfer"]["rounds"]) == (1, 2)
    assert s1["lower"]["rounds"] == 2 and NO_EDITS in s1["lower"]["error"]
    assert s0["gpu"] is None and s0["transfer"]["input_tokens"] > 0
    md = (out / "eval.md").read_text()
    assert "| cosine | fa_sm80 | 2 | 1.00 | n/a | n/a | 0.50 | n/a | n/a | n/a |" in md
    assert "GPU verification was not run" in md and (out / "eval.png").stat().st_size > 0
    assert "mla: fa_sm80 for sm_80, D=192/128, bfloat16, softmax: --kernel fa_sm80 overrides" in md


@pytest.mark.gpu
def test_eval_on_the_gpu_verifies_and_times_the_replayed_kernels(tmp_path, monkeypatch):
    """On the GPU the same replay: sample 0 of cosine and MLA is GPU-verified and
    timed against fa_sm80's own causal build; sample 1 never compiled."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU visible")
    from cubridge.build.driver import device_arch

    out, report = _replayed_eval(tmp_path, monkeypatch, device_arch(torch.device("cuda")))
    specs = {s["spec"]: s for s in report["specs"]}
    for variant in ("cosine", "mla"):
        assert report["pass_at"][variant]["gpu"]["1"] == 0.5
        s0, s1 = specs[variant]["samples"]
        assert s0["gpu"] is True and s0["time_ms"] > 0 and s1["gpu"] is None
        assert specs[variant]["source_causal_ms"] > 0
    assert "x |" in (out / "eval.md").read_text()  # the ratio to the source's causal


# Structural examples replayed one sample each (their transfer verification
# dominates the cost: about 20 s a spec on 2 cores).
STRUCTURAL = ("learnable_sink", "softmax_one", "gated_output", "differential")


def _replayed_structural_eval(tmp_path, monkeypatch, arch):
    lib, fixtures = get_kernel("fa_sm80"), tmp_path / "fixtures"
    for variant in STRUCTURAL:
        spec = SPECS / f"{variant}.py"
        good_ir = fixture_reply(f"transfer_{variant}.md")
        _record(fixtures, "transfer", transfer_messages(spec, lib), good_ir, 0)
        target = tmp_path / f"{variant}_target.py"
        target.write_text(code_block(good_ir, "python"))
        lower = lowering_inputs(target, lib, spec, arch, StageSettings(rounds=2)).messages
        _record(fixtures, "lower", lower, fixture_reply(f"lower_{variant}.md"), 0)

    return _eval(tmp_path, monkeypatch, arch, fixtures, STRUCTURAL, k=1)


@pytest.mark.slow
@pytest.mark.nvcc
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the report without a GPU")
def test_eval_replays_the_structural_examples(tmp_path, monkeypatch):
    out, report = _replayed_structural_eval(tmp_path, monkeypatch, "sm_80")
    specs = {s["spec"]: s for s in report["specs"]}
    md = (out / "eval.md").read_text()
    for variant in STRUCTURAL:
        p = report["pass_at"][variant]
        assert p["ir"] == {"1": 1.0, "3": None, "5": None}
        assert p["compile"] == {"1": 1.0, "3": None, "5": None}
        assert p["gpu"] == {"1": None, "3": None, "5": None}  # not run, never passed
        (sample,) = specs[variant]["samples"]
        assert (sample["transfer"]["rounds"], sample["lower"]["rounds"]) == (1, 1)
        assert sample["ir"] and sample["compile"] and sample["gpu"] is None
        assert f"| {variant} | fa_sm80 | 1 | 1.00 | n/a | n/a | 1.00 | n/a | n/a | n/a |" in md


@pytest.mark.gpu
def test_eval_on_the_gpu_verifies_the_structural_examples(tmp_path, monkeypatch):
    """On the GPU: the recorded learnable-sink, softmax_1, gated-output and
    differential lowerings are GPU-verified and timed against fa_sm80's own
    causal build."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU visible")
    from cubridge.build.driver import device_arch

    out, report = _replayed_structural_eval(tmp_path, monkeypatch,
                                            device_arch(torch.device("cuda")))
    specs = {s["spec"]: s for s in report["specs"]}
    for variant in STRUCTURAL:
        assert report["pass_at"][variant]["gpu"]["1"] == 1.0, specs[variant]
        (sample,) = specs[variant]["samples"]
        assert sample["gpu"] is True and sample["time_ms"] > 0
        assert specs[variant]["source_causal_ms"] > 0
