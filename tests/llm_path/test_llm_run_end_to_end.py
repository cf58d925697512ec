"""`cubridge run` on the LLM path through to a kernel, replayed from the recorded
expert fixtures (labelled, not model output) for cosine attention: LLM transfer
-> LLM lowering (nvcc) -> compile -> on a GPU: verification, kernel.py,
benchmark; without one the run stops after compiling and says so. Both paths
write the same artifacts."""

from __future__ import annotations

import json

import pytest
import torch
from stage_fixtures import FIXTURE_LABEL, SPECS, fixture_reply

from cubridge.kernels import get_kernel
from cubridge.llm import Request, code_block, record_fixture
from cubridge.llm_path.lower import lowering_inputs
from cubridge.llm_path.settings import StageSettings
from cubridge.llm_path.transfer import transfer_messages
from cubridge.pipeline.run import RunOptions, run
from cubridge.pipeline.variant import load_variant

SETTINGS = StageSettings(ir_sizes=((1, 65, 129),), seed=3)


# The recorded replies (transfer, lowering) of a spec for each library kernel.
FIXTURES = {
    ("cosine", "fa_sm80"): ("transfer_cosine.md", "lower_cosine.md"),
    ("cosine", "fa_sm90"): ("transfer_cosine_fa_sm90.md", "lower_cosine_fa_sm90.md"),
    ("mla", "fa_sm90"): ("transfer_mla_fa_sm90.md", "lower_mla_fa_sm90.md"),
}


def _replayed_cosine_run(tmp_path, monkeypatch, kernel="fa_sm80", **options):
    return _replayed_run(tmp_path, monkeypatch, "cosine", kernel, **options)


def _replayed_run(tmp_path, monkeypatch, spec, kernel, **options):
    spec_path, fixtures, out = SPECS / f"{spec}.py", tmp_path / "fixtures", tmp_path / "run"
    lib = get_kernel(kernel)
    transfer_reply, lower_reply = (fixture_reply(name) for name in FIXTURES[(spec, kernel)])
    record_fixture(fixtures, "transfer", Request.of(
        transfer_messages(spec_path, lib), temperature=None, max_tokens=8192, stop=None, sample=0),
        transfer_reply, label=FIXTURE_LABEL)
    # The lowering prompt quotes the target CuIR the transfer will write: the same program.
    out.mkdir()
    target = out / "target_cuir.py"
    target.write_text(code_block(transfer_reply, "python"))
    record_fixture(fixtures, "lower", Request.of(
        lowering_inputs(target, lib, spec_path, "sm_90a", SETTINGS).messages,
        temperature=None, max_tokens=8192, stop=None, sample=0),
        lower_reply, label=FIXTURE_LABEL)
    monkeypatch.setenv("CUBRIDGE_LLM_PROVIDER", "replay")
    monkeypatch.setenv("CUBRIDGE_LLM_REPLAY_DIR", str(fixtures))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-config"))
    # --kernel: the fixtures were recorded against that kernel (sm_90a selects fa_sm90)
    return out, run(spec_path, RunOptions(out=out, log=print, arch="sm_90a", kernel=kernel,
                                          llm_settings=SETTINGS, **options))


@pytest.mark.slow
@pytest.mark.nvcc
@pytest.mark.skipif(torch.cuda.is_available(), reason="tests the no-GPU stop")
@pytest.mark.parametrize("kernel", ["fa_sm80", "fa_sm90"])
def test_llm_path_compiles_and_stops_without_gpu(kernel, tmp_path, monkeypatch):
    out, result = _replayed_cosine_run(tmp_path, monkeypatch, kernel, bench=False)
    assert "no CUDA GPU visible: stopped after compiling" in result.stopped
    assert list(result.stages) == ["check", "load", "select", "route", "transfer", "lower",
                                   "compile"]
    assert result.stages["select"].summary.startswith(f"{kernel} for sm_90a")
    lower = json.loads((out / "lower.json").read_text())
    assert lower["verification"].startswith("compile-only")
    assert lower["path"] == "llm" and lower["source_edited"] and lower["kernel"] == kernel
    assert "cosine" in (out / "kernel.cu").read_text().lower()
    assert json.loads((out / "plan.json").read_text())["path"] == "llm"
    kernel_variant = load_variant(out)  # kernel.py's variant, built from the run directory alone
    assert kernel_variant.path == "llm"
    assert kernel_variant.source == (out / "kernel.cu").read_text()
    assert kernel_variant.aux_order == ("logit_scale",)

    # The rules path writes the same artifacts (an LLM run adds its exchanges, llm/).
    rules = run(SPECS / "causal.py", RunOptions(out=tmp_path / "rules", log=print, bench=False,
                                               arch="sm_90a", kernel=kernel))
    assert rules.stopped == result.stopped.replace(str(out), str(tmp_path / "rules"))

    def names(d):
        return sorted(p.name for p in d.iterdir() if p.name != "llm")

    assert names(out) == names(tmp_path / "rules")


GPU_CHECK_STAND_IN = """
from cubridge.llm.sandbox.watchdog import emit
emit("ready", device="stand-in")
emit("build", build="D128_Dv128", index=0, cases=[[[1, 2, 1, 65, 129, 128, None], "normal"]])
emit("case", build="D128_Dv128", done=1, total=1, verdict="pass")
emit("verified", ok=True, summary="PASS 1/1 cases (stand-in GPU)")
emit("timed", ms=2.5)
"""


@pytest.mark.slow
@pytest.mark.nvcc
@pytest.mark.skipif(torch.cuda.is_available(), reason="stands in for the GPU")
def test_a_run_stopped_without_gpu_resumes_from_its_recorded_exchanges(tmp_path, monkeypatch):
    """Stopped on a CPU machine after compiling, the run is taken to a GPU machine:
    the lowering is checked again, now on the GPU, from the recorded exchange (no
    provider call: the replay directory is empty there). The GPU check's child is
    stood in for; tests/llm_path/test_llm_run_end_to_end.py's GPU test does it for real."""
    import functools
    import sys

    from cubridge.llm_path.gpu_check import IsolatedGpuCheck

    out, first = _replayed_cosine_run(tmp_path, monkeypatch, bench=False)
    assert "no CUDA GPU visible" in first.stopped
    assert "nothing was run or timed" in first.stages["lower"].summary
    assert "kept the first verified" not in first.stages["lower"].summary

    empty = tmp_path / "no-recordings"
    empty.mkdir()
    monkeypatch.setenv("CUBRIDGE_LLM_REPLAY_DIR", str(empty))  # any call would miss
    child = tmp_path / "gpu_child.py"
    child.write_text(GPU_CHECK_STAND_IN)
    monkeypatch.setattr("cubridge.llm_path.lower.gpu_here", lambda: True)
    monkeypatch.setattr("cubridge.llm_path.lower.IsolatedGpuCheck", functools.partial(
        IsolatedGpuCheck, child=[sys.executable, str(child)], sanitizer=None))
    second = run(SPECS / "cosine.py", RunOptions(out=out, log=print, arch="sm_90a",
                                                  kernel="fa_sm80", llm_settings=SETTINGS,
                                                  bench=False))
    assert "no CUDA GPU visible" in second.stopped  # the stand-in GPU ends at lowering
    lower = json.loads((out / "lower.json").read_text())
    assert lower["verification"] == "PASS 1/1 cases (stand-in GPU)"
    assert lower["candidates"][0]["time_ms"] == 2.5
    assert "fastest of 1 verified candidate(s): 2.500 ms" in second.stages["lower"].summary
    assert "[llm lower] 0 calls, 1 cached" in second.stages["lower"].summary


@pytest.mark.slow
@pytest.mark.nvcc
@pytest.mark.skipif(torch.cuda.is_available(), reason="tests the no-GPU stop")
def test_mla_on_fa_sm90_takes_the_llm_path_and_keeps_the_source(tmp_path, monkeypatch):
    """MLA stated by its reference alone leaves the hooks; on sm_90a the LLM path
    takes fa_sm90, which builds 192/128 as it is: the recorded lowering is `@@@ keep`,
    and the run builds the library source at 192/128, causal, in both dtypes."""
    out, result = _replayed_run(tmp_path, monkeypatch, "mla", "fa_sm90", bench=False)
    assert "no CUDA GPU visible: stopped after compiling" in result.stopped
    assert "the spec has no FlexAttention-style mods" in result.stages["route"].summary
    assert "no edit (@@@ keep" in result.stages["lower"].summary
    lower = json.loads((out / "lower.json").read_text())
    assert lower["path"] == "llm" and lower["kernel"] == "fa_sm90"
    assert not lower["source_edited"]
    assert [(b["head_dim"], b["head_dim_v"], b["causal"], b["config"]["q_buffers"])
            for b in lower["builds"]] == [(192, 128, True, 1)]
    assert (out / "kernel.cu").read_text() == get_kernel("fa_sm90").source.read_text()
    variant = load_variant(out)
    assert variant.path == "llm" and variant.source is None
    assert sorted(json.loads((out / "resources.json").read_text())) == [
        "kernel_d192_dv128_bfloat16_sm_90a.cubin", "kernel_d192_dv128_float16_sm_90a.cubin"]


@pytest.mark.gpu
@pytest.mark.parametrize(("spec", "kernel", "config"), [
    ("cosine", "fa_sm80", "llama2_7b"), ("cosine", "fa_sm90", "llama2_7b"),
    ("mla", "fa_sm90", "mla_16h")])
def test_llm_path_gives_a_verified_benchmarked_kernel(spec, kernel, config, tmp_path,
                                                      monkeypatch):
    """`cubridge run --kernel K` on a spec that leaves the hooks (cosine; MLA, which
    fa_sm90 builds as it is), replayed from K's recorded fixtures: GPU-verified in the
    lowering stage's watched child, then again from the run directory's kernel.py, and
    benchmarked. fa_sm90 needs an sm90 GPU."""
    from cubridge.verify import verify

    if kernel == "fa_sm90" and torch.cuda.is_available() and \
            torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("fa_sm90 runs on sm90 (Hopper) only")
    out, result = _replayed_run(tmp_path, monkeypatch, spec, kernel,
                                bench_seq_lens=[2048], bench_configs=[config], bench_peers=[])
    assert not result.stopped, result.stopped
    lower = json.loads((out / "lower.json").read_text())
    assert "PASS" in lower["verification"] and lower["kernel"] == kernel
    kernel = load_variant(out)  # what runs/<spec>/kernel.py exposes
    report = verify(result.kernel.spec, kernel, device="cuda", seed=11)
    assert report.passed, report.table()
    bench = json.loads((out / "bench" / "results.json").read_text())
    assert [i["status"] for c in bench["results"] for i in c["impls"]] == ["ok"]


@pytest.mark.gpu
def test_a_run_stopped_without_gpu_resumes_on_the_gpu(tmp_path, monkeypatch):
    """The same on a GPU machine, for real: the first run is made to see no GPU (as
    on a CPU machine) and stops after compiling; the rerun, with no recordings to
    replay, answers the lowering from the run's own exchanges, verifies it on the
    GPU in the watched child, and ends in a verified kernel."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU visible")
    with monkeypatch.context() as cpu:
        cpu.setattr(torch.cuda, "is_available", lambda: False)
        out, first = _replayed_cosine_run(tmp_path, monkeypatch, bench=False)
    assert "no CUDA GPU visible" in first.stopped
    assert json.loads((out / "lower.json").read_text())["verification"].startswith(
        "compile-only")
    empty = tmp_path / "no-recordings"
    empty.mkdir()
    monkeypatch.setenv("CUBRIDGE_LLM_REPLAY_DIR", str(empty))
    second = run(SPECS / "cosine.py", RunOptions(out=out, log=print, arch="sm_90a",
                                                  kernel="fa_sm80", llm_settings=SETTINGS,
                                                  bench=False))
    assert not second.stopped, second.stopped
    assert "PASS" in json.loads((out / "lower.json").read_text())["verification"]
    assert "[llm lower] 0 calls, 1 cached" in second.stages["lower"].summary
    assert second.stages["verify-gpu"].summary.startswith("kernel vs spec (isolated worker): PASS")
