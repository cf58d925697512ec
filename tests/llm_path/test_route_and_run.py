"""Which path `cubridge run` takes, and the LLM path end to end: a spec whose
change leaves the hooks (cosine) runs the LLM transfer, here replayed from
the recorded expert fixture, and the run says which path it took and why."""

from __future__ import annotations

import dataclasses
import json

import pytest
from stage_fixtures import FIXTURE_LABEL, SPECS, fixture_reply

from cubridge.attention import HeadConfig
from cubridge.kernels import get_kernel
from cubridge.llm import Request, record_fixture
from cubridge.llm_path.settings import StageSettings
from cubridge.llm_path.transfer import transfer_messages
from cubridge.pipeline.route import choose_path
from cubridge.pipeline.run import RunOptions, run
from cubridge.spec import load


@pytest.mark.parametrize(("spec", "path", "why"), [
    ("causal", "rules", "mask_mod traces into fa_sm80's hooks"),
    ("alibi_causal", "rules", "score_mod and mask_mod trace"),
    ("full", "rules", "plain softmax attention"),
    ("cosine", "llm", "reference is not plain softmax attention"),
    ("sigmoid_causal", "rules", "score_mod and mask_mod trace"),
    ("mla", "llm", "head dims (QK/V) 192/128 are not among fa_sm80's 64, 128, 256 (QK = V)"),
])
def test_choose_path(spec, path, why):
    choice = choose_path(load(SPECS / f"{spec}.py"), get_kernel("fa_sm80"))
    assert choice.path == path and why in choice.reason
    assert (choice.plan is not None) == (path == "rules")  # the rules carry the traced hooks


def test_head_dim_256_takes_the_rules_on_both_kernels():
    """Gemma 2's D = 256 is one of fa_sm90's tiles (64-key blocks, one Q buffer) and of
    fa_sm80's (64 x 32 tiles of four 16-row warps); a head dim past both tiles goes to
    the LLM path and says why."""
    spec = load(SPECS / "gemma2_global.py")
    on_hopper = choose_path(spec, get_kernel("fa_sm90"))
    assert on_hopper.path == "rules" and on_hopper.plan.table_block == (64, 64)
    on_ampere = choose_path(spec, get_kernel("fa_sm80"))
    assert on_ampere.path == "rules" and on_ampere.plan.table_block == (16, 32)
    wide = dataclasses.replace(spec, configs=[HeadConfig("wide", 8, 8, 320)])
    too_wide = choose_path(wide, get_kernel("fa_sm80"))
    assert too_wide.path == "llm"
    assert "head dims (QK/V) 320/320 are not among fa_sm80's 64, 128, 256 (QK = V)" in \
        too_wide.reason


def test_mla_head_dims_take_the_rules_on_fa_sm90_with_a_mask_mod():
    """fa_sm90 builds QK/V 192/128 as it is: DeepSeek's MLA written with a mask_mod
    takes the rules there; the same attention stated by its reference alone
    (examples/specs/mla.py) leaves the hooks (no mods, not plain attention): the LLM
    path, on fa_sm90 too; fa_sm80 has no 192/128 build."""
    fa_sm90 = get_kernel("fa_sm90")
    rules = choose_path(load(SPECS / "deepseek_mla.py"), fa_sm90)
    assert rules.path == "rules" and rules.plan.table_block == (64, 128)
    llm = choose_path(load(SPECS / "mla.py"), fa_sm90)
    assert llm.path == "llm" and "reference is not plain softmax attention" in llm.reason
    on_ampere = choose_path(load(SPECS / "deepseek_mla.py"), get_kernel("fa_sm80"))
    assert on_ampere.path == "llm" and "192/128 are not among fa_sm80's" in on_ampere.reason


_ELEMENTWISE_SPEC = """
import torch
from cubridge.attention import LLAMA2_7B
from cubridge.spec.helpers import elementwise_attention, expand_kv, positions, scaled_scores

NAME = "{name}"
CONFIGS = [LLAMA2_7B]
NORMALIZER = "{normalizer}"


def reference(q, k, v):
    k, v = expand_kv(q, k, v)
    s = scaled_scores(q, k)
    s = {extra}
    q_idx, kv_idx = positions(q, k)
    return elementwise_attention(torch.{normalizer}(s), q_idx >= 0, v)
"""


@pytest.mark.parametrize("normalizer", ["sigmoid", "relu"])
def test_elementwise_spec_without_mods_routes_by_its_reference(tmp_path, normalizer):
    """A sigmoid/relu spec without mods whose reference is more than plain
    attention leaves the hooks (LLM path); the plain one takes the rules."""
    more = tmp_path / "more.py"
    more.write_text(_ELEMENTWISE_SPEC.format(name="more", normalizer=normalizer,
                                             extra="s - 0.1 * s * s"))
    plain = tmp_path / "plain.py"
    plain.write_text(_ELEMENTWISE_SPEC.format(name="plain", normalizer=normalizer, extra="s"))
    kernel = get_kernel("fa_sm80")
    choice = choose_path(load(more), kernel)
    assert choice.path == "llm" and f"not plain {normalizer} attention" in choice.reason
    choice = choose_path(load(plain), kernel)
    assert choice.path == "rules" and f"plain {normalizer} attention" in choice.reason


_IF_SPEC = """
from cubridge.attention import LLAMA2_7B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

CONFIGS = [LLAMA2_7B]


def reference(q, k, v):
    q_idx, kv_idx = positions(q, k)
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), q_idx >= kv_idx, v)


def mask_mod(b, h, q_idx, kv_idx):
    if q_idx >= kv_idx:
        return True
    return False
"""


def test_a_python_if_on_a_tensor_is_rejected_by_the_route_not_sent_to_the_llm(
        tmp_path, monkeypatch, capsys):
    """The route (the one place the path is chosen) rejects a mod no path can
    run with its line, so `cubridge transfer` and the MCP tools do too, not
    only `cubridge run`'s spec check."""
    from cubridge.cli import main
    from cubridge.mcp.tools import lower
    from cubridge.spec import SpecError

    for name in ("PROVIDER", "REPLAY_DIR", "CONFIG", "MODEL"):
        monkeypatch.delenv(f"CUBRIDGE_LLM_{name}", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-config"))
    path = tmp_path / "if_mod.py"
    path.write_text(_IF_SPEC)
    line = _IF_SPEC.splitlines().index("    if q_idx >= kv_idx:") + 1
    spec = load(path)  # loading does not call the mods
    with pytest.raises(SpecError) as err:
        choose_path(spec, get_kernel("fa_sm80"))
    assert err.value.location == f"{path}:{line}" and "torch.where" in err.value.message

    out = tmp_path / "run"
    assert main(["transfer", "--spec", str(path), "--out", str(out)]) == 1
    captured = capsys.readouterr()
    assert f"if_mod.py:{line}" in captured.err and "torch.where" in captured.err
    assert "LLM" not in captured.err + captured.out and not (out / "llm").exists()

    with pytest.raises(SpecError, match="torch.where"):  # MCP: hook codegen from a spec
        lower(str(tmp_path / "hooks.cuh"), spec=str(path))


@pytest.mark.slow
def test_cubridge_run_takes_the_llm_path_for_cosine(tmp_path, monkeypatch):
    fixtures, out = tmp_path / "fixtures", tmp_path / "run"
    request = Request.of(transfer_messages(SPECS / "cosine.py", get_kernel("fa_sm80")),
                         temperature=None,
                         max_tokens=8192, stop=None, sample=0)
    record_fixture(fixtures, "transfer", request, fixture_reply("transfer_cosine.md"),
                   label=FIXTURE_LABEL)
    monkeypatch.setenv("CUBRIDGE_LLM_PROVIDER", "replay")
    monkeypatch.setenv("CUBRIDGE_LLM_REPLAY_DIR", str(fixtures))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-config"))
    # Keep this test about the path and the transfer: lowering needs nvcc (tested apart).
    monkeypatch.setattr("cubridge.pipeline.run.nvcc_available", lambda: False)
    lines: list[str] = []
    result = run(SPECS / "cosine.py", RunOptions(
        out=out, log=lines.append, bench=False, kernel="fa_sm80",  # (fixture's kernel)
        llm_settings=StageSettings(ir_sizes=((1, 65, 129),), seed=2)))

    assert any(line.startswith("[route] LLM stages on fa_sm80: the spec has no "
                               "FlexAttention-style mods")
               for line in lines)
    assert "nvcc not found: stopped after the verified target CuIR" in result.stopped
    manifest = json.loads((out / "manifest.json").read_text())
    assert "PASS: cuir_FaSm80Cosine" in manifest["stages"]["transfer"]["summary"]
    report = (out / "report.md").read_text()
    assert "LLM transfer fa_sm80 -> FaSm80Cosine" in report and "Stopped: nvcc not found" in report
    assert (out / "target_cuir.py").is_file() and (out / "spec.py").is_file()


@pytest.mark.slow
def test_a_person_completes_the_llm_path_with_the_manual_provider(tmp_path, monkeypatch):
    """`cubridge run` on cosine with the manual provider: the prompt appears as a
    file, a person writes the reply file, the run verifies it and goes on."""
    import threading
    import time

    manual, out = tmp_path / "manual", tmp_path / "run"
    monkeypatch.setenv("CUBRIDGE_LLM_PROVIDER", "manual")
    monkeypatch.setenv("CUBRIDGE_LLM_MANUAL_DIR", str(manual))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-config"))
    monkeypatch.setattr("cubridge.pipeline.run.nvcc_available", lambda: False)

    def person() -> None:  # waits for the prompt, answers it as the expert
        for _ in range(600):
            prompts = list(manual.glob("*.prompt.md")) if manual.is_dir() else []
            if prompts:
                assert "Semantic alignment" in prompts[0].read_text()
                reply = prompts[0].with_name(prompts[0].name.replace(".prompt.md", ".reply.md"))
                reply.write_text(fixture_reply("transfer_cosine.md"))
                return
            time.sleep(0.1)

    helper = threading.Thread(target=person, daemon=True)
    helper.start()
    result = run(SPECS / "cosine.py", RunOptions(
        out=out, log=lambda _: None, bench=False,
        llm_settings=StageSettings(ir_sizes=((1, 65, 129),), seed=4)))
    helper.join(timeout=5)
    assert "stopped after the verified target CuIR" in result.stopped
    manifest = json.loads((out / "manifest.json").read_text())
    assert "PASS: cuir_FaSm80Cosine" in manifest["stages"]["transfer"]["summary"]
    exchange = next((out / "llm" / "transfer").glob("0001-*.json"))
    assert "written by hand" in exchange.read_text()
