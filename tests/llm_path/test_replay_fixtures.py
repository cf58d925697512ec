"""Replay of the recorded expert replies (tests/fixtures/llm, written by a
person/agent, labelled as such): the transfer of fa_sm80 to cosine attention,
to MLA (192/128 head dims) and to the other structural examples (learnable
sink, softmax_1, gated output, differential), and the lift of fa_sm80.cu, each
run through its stage with the replay provider and verified by the CuIR
executor on CPU."""

from __future__ import annotations

import json

import pytest
from stage_fixtures import FAST, FIXTURE_LABEL, ROOT, SPECS, fixture_reply

from cubridge.kernels import get_kernel
from cubridge.llm import LLMClient, Request, load_config, read_exchanges, record_fixture
from cubridge.llm_path.lift import lift, lift_messages
from cubridge.llm_path.transfer import transfer, transfer_messages
from cubridge.rundir import RunDir


def _replay_client(fixtures, run_dir, stage: str) -> LLMClient:
    config = load_config({"provider": "replay", "replay_dir": str(fixtures)},
                         {"XDG_CONFIG_HOME": str(run_dir / "no-config")})
    return LLMClient.from_config(config, run_dir, stage, log=lambda _: None)


def _record(fixtures, stage: str, messages, name: str, settings=FAST) -> None:
    request = Request.of(messages, temperature=settings.temperature, max_tokens=8192,
                         stop=None, sample=0)
    record_fixture(fixtures, stage, request, fixture_reply(name), label=FIXTURE_LABEL)


# The cosine fixture is replayed through `cubridge run` (test_route_and_run.py).
@pytest.mark.slow
@pytest.mark.parametrize(("spec", "fixture", "kernel"), [
    ("mla", "transfer_mla.md", "FaSm80Mla"),
    ("learnable_sink", "transfer_learnable_sink.md", "FaSm80LearnableSink"),
    ("softmax_one", "transfer_softmax_one.md", "FaSm80SoftmaxOne"),
    ("gated_output", "transfer_gated_output.md", "FaSm80GatedOutput"),
    ("differential", "transfer_differential.md", "FaSm80Differential"),
])
def test_transfer_replayed_from_recorded_fixture_verifies(spec, fixture, kernel, tmp_path):
    spec_path = SPECS / f"{spec}.py"
    fixtures, run = tmp_path / "fixtures", tmp_path / "run"
    kernel_entry = get_kernel("fa_sm80")
    _record(fixtures, "transfer", transfer_messages(spec_path, kernel_entry), fixture)
    client = _replay_client(fixtures, run, "transfer")
    result = transfer(spec_path, client, RunDir(run, log=lambda _: None), FAST,
                      kernel=kernel_entry)

    assert client.calls_made == 1
    meta = json.loads((run / "transfer.json").read_text())
    assert meta["kernel"] == kernel
    table = (run / "verify_ir.txt").read_text()
    assert table.startswith(f"PASS: cuir_{kernel} against spec {spec} on cpu")
    if spec == "mla":  # the 192/128 split really ran
        assert "D192/128" in table
    (exchange,) = read_exchanges(run)
    assert "replayed from" in exchange.label and FIXTURE_LABEL in exchange.label
    assert result.target.read_text() in fixture_reply(fixture)


@pytest.mark.slow
def test_lift_of_fa_sm80_replayed_verifies_with_its_correspondence(tmp_path):
    cu = ROOT / "cubridge" / "kernels" / "fa_sm80" / "fa_sm80.cu"
    spec = ROOT / "cubridge" / "kernels" / "common" / "standard_attention_spec.py"
    fixtures, run = tmp_path / "fixtures", tmp_path / "run"
    _record(fixtures, "lift", lift_messages(cu, spec), "lift_fa_sm80.md")
    client = _replay_client(fixtures, run, "lift")
    result = lift(cu, client, RunDir(run, log=lambda _: None), FAST)

    corr = json.loads(result.correspondence.read_text())
    methods = {e["method"] for e in corr["correspondence"]}
    assert {"run", "attention", "load_k", "load_v"} <= methods
    lines = len(cu.read_text().splitlines())
    assert all(1 <= a <= b <= lines for e in corr["correspondence"] for a, b in e["cuda_lines"])
    verify_ir = (run / "verify_ir.txt").read_text()
    assert "PASS: cuir_FaSm80 against spec standard_attention" in verify_ir
    assert "class FaSm80(KernelBase)" in result.program.read_text()
