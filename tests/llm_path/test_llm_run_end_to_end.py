"""`cubridge run` on the LLM path through to a kernel, replayed from the recorded
expert fixtures (labelled, not model output) for cosine attention: LLM transfer
-> LLM lowering (nvcc) -> on a GPU: verification, kernel.py, benchmark; without
one the run stops after compiling and says so."""

from __future__ import annotations

import json

import pytest
import torch
from stage_fixtures import FIXTURE_LABEL, SPECS, fixture_reply

from cubridge.build.nvcc import nvcc_available
from cubridge.llm import Request, code_block, record_fixture
from cubridge.llm_path.library import library_kernel
from cubridge.llm_path.lower import builds_for, describe_target, lower_messages
from cubridge.llm_path.settings import StageSettings
from cubridge.llm_path.transfer import transfer_messages
from cubridge.pipeline.run import RunOptions, load_variant, run

SETTINGS = StageSettings(ir_sizes=((1, 65, 129),), seed=3)


def _replayed_cosine_run(tmp_path, monkeypatch, **options):
    from cubridge.spec import load

    spec_path, fixtures, out = SPECS / "cosine.py", tmp_path / "fixtures", tmp_path / "run"
    record_fixture(fixtures, "transfer", Request.of(
        transfer_messages(spec_path), temperature=None, max_tokens=8192, stop=None, sample=0),
        fixture_reply("transfer_cosine.md"), label=FIXTURE_LABEL)
    # The lowering prompt quotes the target CuIR the transfer will write: the same program.
    out.mkdir()
    target = out / "target_cuir.py"
    target.write_text(code_block(fixture_reply("transfer_cosine.md"), "python"))
    lib = library_kernel("fa_sm80")
    description = describe_target(target, lib, SETTINGS)
    builds = builds_for(load(spec_path), description["config"])
    record_fixture(fixtures, "lower", Request.of(
        lower_messages(target, lib, spec_path, "sm_90a", description, builds, None),
        temperature=None, max_tokens=8192, stop=None, sample=0),
        fixture_reply("lower_cosine.md"), label=FIXTURE_LABEL)
    monkeypatch.setenv("CUBRIDGE_LLM_PROVIDER", "replay")
    monkeypatch.setenv("CUBRIDGE_LLM_REPLAY_DIR", str(fixtures))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-config"))
    monkeypatch.setattr("cubridge.llm_path.run.StageSettings", lambda: SETTINGS)
    return out, run(spec_path, RunOptions(out=out, log=print, arch="sm_90a", **options))


@pytest.mark.nvcc
@pytest.mark.skipif(not nvcc_available(), reason="nvcc not installed")
@pytest.mark.skipif(torch.cuda.is_available(), reason="tests the no-GPU stop")
def test_llm_path_compiles_and_stops_without_gpu(tmp_path, monkeypatch):
    out, result = _replayed_cosine_run(tmp_path, monkeypatch, bench=False)
    assert "was compiled, not run" in result.stopped
    assert (out / "fa_sm80_lowered.cu").is_file()
    assert json.loads((out / "lower.json").read_text())["verification"].startswith("compile-only")
    assert not (out / "kernel.py").exists()  # no kernel module before GPU verification


@pytest.mark.gpu
def test_llm_path_gives_a_verified_benchmarked_kernel(tmp_path, monkeypatch):
    from cubridge.verify import verify

    out, result = _replayed_cosine_run(tmp_path, monkeypatch, bench_seq_lens=[2048],
                                       bench_configs=["llama2_7b"], bench_peers=[])
    assert not result.stopped, result.stopped
    assert "PASS" in json.loads((out / "lower.json").read_text())["verification"]
    kernel = load_variant(out)  # what runs/<spec>/kernel.py exposes
    report = verify(result.kernel.spec, kernel, device="cuda", seed=11)
    assert report.passed, report.table()
    bench = json.loads((out / "bench" / "results.json").read_text())
    assert [i["status"] for c in bench["results"] for i in c["impls"]] == ["ok"]
