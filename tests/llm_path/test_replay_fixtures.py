"""Replay of the recorded expert replies (tests/fixtures/llm, written by a
person/agent, labelled as such): the transfer of fa_sm80 to cosine attention,
to MLA (192/128 head dims) and to the other structural examples (learnable
sink, softmax_1, gated output, differential), of fa_sm90 to cosine attention
and to MLA,
and the lift of fa_sm80.cu, each run through its stage with the replay provider
and verified by the CuIR executor on CPU."""

from __future__ import annotations

import json

import pytest
from stage_fixtures import FAST, FIXTURE_LABEL, ROOT, SPECS, fixture_reply

from cubridge.kernels import get_kernel
from cubridge.llm import LLMClient, Request, load_config, read_exchanges, record_fixture
from cubridge.llm_path.lift import lift, lift_messages
from cubridge.llm_path.settings import StageSettings
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


# fa_sm90's K/V ring has two slots of 128 keys: 600 keys (5 blocks) reuse each slot,
# so the producer rewrites a slot's K norms after the consumers released it.
RING_WRAPS = StageSettings(rounds=4, ir_sizes=((1, 65, 600),), sandbox_timeout_s=120, seed=1,
                           ir_spec_lengths=False)


# fa_sm80's cosine fixture is replayed through `cubridge run` (test_route_and_run.py).
@pytest.mark.slow
@pytest.mark.parametrize(("spec", "fixture", "library", "kernel", "settings"), [
    ("mla", "transfer_mla.md", "fa_sm80", "FaSm80Mla", FAST),
    ("learnable_sink", "transfer_learnable_sink.md", "fa_sm80", "FaSm80LearnableSink", FAST),
    ("softmax_one", "transfer_softmax_one.md", "fa_sm80", "FaSm80SoftmaxOne", FAST),
    ("gated_output", "transfer_gated_output.md", "fa_sm80", "FaSm80GatedOutput", FAST),
    ("differential", "transfer_differential.md", "fa_sm80", "FaSm80Differential", FAST),
    ("cosine", "transfer_cosine_fa_sm90.md", "fa_sm90", "FaSm90Cosine", RING_WRAPS),
    ("mla", "transfer_mla_fa_sm90.md", "fa_sm90", "FaSm90Mla", RING_WRAPS),
])
def test_transfer_replayed_from_recorded_fixture_verifies(spec, fixture, library, kernel,
                                                          settings, tmp_path):
    spec_path = SPECS / f"{spec}.py"
    fixtures, run = tmp_path / "fixtures", tmp_path / "run"
    kernel_entry = get_kernel(library)
    _record(fixtures, "transfer", transfer_messages(spec_path, kernel_entry), fixture,
            settings)
    client = _replay_client(fixtures, run, "transfer")
    result = transfer(spec_path, client, RunDir(run, log=lambda _: None), settings,
                      kernel=kernel_entry)

    assert client.calls_made == 1
    meta = json.loads((run / "transfer.json").read_text())
    assert meta["kernel"] == kernel and meta["source_kernel"] == library
    table = (run / "verify_ir.txt").read_text()
    assert table.startswith(f"PASS: cuir_{kernel} against spec {spec} on cpu")
    if spec == "mla":  # the 192/128 split really ran
        assert "D192/128" in table
    if library == "fa_sm90":  # the ring wrapped: more key blocks than slots
        assert "S65x600" in table
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
