"""On the GPU: the verifier passes the CUDA peers, and the poisoned caching
allocator exposes outputs that a kernel allocates but does not fully write."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from verify_candidates import TiledAttention

from cubridge.attention import Shape
from cubridge.spec import load
from cubridge.verify import verify
from cubridge.verify.peers import flex_impl, sdpa_impl

pytestmark = pytest.mark.gpu
SPEC_DIR = Path(__file__).resolve().parents[2] / "examples" / "specs"
SHAPES = [Shape(2, 16, 2, 200, 127, 128), Shape(1, 16, 2, 65, 1037, 128)]


@pytest.fixture(autouse=True)
def _needs_cuda():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")


def unwritten_tail(q, k, v, scale=None):
    """Computes on the GPU, allocates its output fresh, forgets the last rows."""
    out, lse = TiledAttention()(q.cpu(), k.cpu(), v.cpu(), scale)
    fresh = torch.empty(out.shape, dtype=out.dtype, device=q.device)
    rows = out.shape[2] - 3
    fresh[:, :, :rows] = out[:, :, :rows].to(q.device)
    return fresh, lse.to(q.device)


def test_poisoned_allocator_exposes_unwritten_rows():
    spec = load(SPEC_DIR / "causal.py")
    report = verify(spec, unwritten_tail, device="cuda", shapes=SHAPES[:1], dtypes=["bf16"],
                    seed=0)
    assert not report.passed
    assert all("NaN" in c.reason for c in report.cases), report.table()


@pytest.mark.parametrize("name", ["causal", "alibi_causal", "document_causal"])
def test_cuda_peers_pass(name):
    spec = load(SPEC_DIR / f"{name}.py")
    for impl, lse in ((sdpa_impl(spec), False), (flex_impl(spec, compile=True), True)):
        report = verify(spec, impl, device="cuda", shapes=SHAPES, seed=0, require_lse=lse)
        assert report.passed, report.table()


def test_isolated_cuda_error_is_reported_and_next_case_runs():
    spec = load(SPEC_DIR / "causal.py")
    report = verify(spec, "verify_candidates:cuda_fault_on_short_rows", device="cuda",
                    shapes=[Shape(1, 2, 1, 5, 64, 32), Shape(1, 2, 1, 65, 64, 32)],
                    dtypes=["bf16"], distributions=["normal"], isolate=True, seed=0,
                    timeout_s=60)
    assert [c.verdict for c in report.cases] == ["error", "pass"], report.table()
