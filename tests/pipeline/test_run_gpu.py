"""`cubridge run` and `cubridge.compile` end to end on a GPU (device machine)."""

from pathlib import Path

import pytest
import torch

import cubridge
from cubridge.attention import Shape
from cubridge.pipeline.run import RunOptions, run
from cubridge.spec import load, make_aux

SPECS = Path(__file__).resolve().parents[2] / "examples" / "specs"

pytestmark = pytest.mark.gpu


def test_run_verifies_and_benchmarks_on_gpu(tmp_path):
    out = tmp_path / "run"
    result = run(SPECS / "sliding_window_1024.py", RunOptions(
        out=out, bench_seq_lens=[2048], bench_configs=["llama2_7b"], bench_peers=["sdpa"],
        log=print))
    assert not result.stopped
    assert list(result.stages) == ["check", "load", "select", "route", "transfer", "verify-ir",
                                   "lower", "compile", "verify-gpu", "bench"]
    assert "PASS" in result.stages["verify-gpu"].summary
    assert (out / "bench" / "results.json").is_file()
    assert "cubridge" in (out / "report.md").read_text()


def test_compile_gives_a_kernel_usable_in_a_compiled_model(tmp_path):
    spec_path = SPECS / "alibi_causal.py"
    kernel = cubridge.compile(spec_path, out=tmp_path / "run")
    spec = load(spec_path)
    shape = Shape(2, 8, 2, 300, 300, 128)
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 8, 300, 128, generator=gen).to("cuda", torch.bfloat16)
    k = torch.randn(2, 2, 300, 128, generator=gen).to("cuda", torch.bfloat16)
    v = torch.randn(2, 2, 300, 128, generator=gen).to("cuda", torch.bfloat16)
    aux = {n: t.to("cuda") for n, t in make_aux(spec, shape, gen).items()}

    def block(q, k, v):  # a model fragment around the kernel
        out, _ = kernel(q * 1.0, k, v, **aux)
        return out.float().sum(dim=-1)

    eager = block(q, k, v)
    compiled = torch.compile(block, fullgraph=True)(q, k, v)
    ref = spec.reference(q.double(), k.double(), v.double(),
                         **{n: (t.double() if t.is_floating_point() else t)
                            for n, t in aux.items()})
    ref = (ref[0] if isinstance(ref, tuple) else ref).sum(dim=-1)
    assert torch.allclose(eager, compiled)
    rel = ((eager.double() - ref).norm() / ref.norm()).item()
    assert rel < 2e-2, rel
