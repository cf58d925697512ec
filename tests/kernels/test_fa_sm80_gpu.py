"""What only fa_sm80 has, on the GPU: the custom op under torch.compile and
opcheck, a patched source, the visit list's on-the-fly tail and staged reads.
The contract every library kernel keeps is tests/kernels/test_library_kernels_gpu.py."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from kernel_helpers import (
    causal_mask,
    gpu_inputs,
    reference_attention,
    rel_error,
    requires_gpu,
    tolerance,
)

from cubridge.build.attention_op import register
from cubridge.build.driver import device_arch
from cubridge.kernels import get_kernel

fa_sm80 = get_kernel("fa_sm80")

pytestmark = [pytest.mark.gpu, requires_gpu]
HOOKS = Path(__file__).parent / "hooks"


def test_custom_op_under_torch_compile_and_opcheck():
    q, k, v = gpu_inputs(1, 4, 4, 256, 256, 128, torch.bfloat16)
    kernel = fa_sm80.launchable(128, torch.bfloat16, device_arch(q.device), causal=True)
    key = register(kernel)
    scale = 1 / math.sqrt(128)

    def f(q, k, v):
        out, lse = torch.ops.cubridge.attention_fwd(q, k, v, [], scale, key)
        return out * 2, lse

    compiled = torch.compile(f, fullgraph=True)
    out, lse = compiled(q, k, v)
    ref, ref_lse = reference_attention(q, k, v, mask=causal_mask)
    assert rel_error(out / 2, ref) < tolerance(torch.bfloat16)
    torch.library.opcheck(torch.ops.cubridge.attention_fwd.default, (q, k, v, [], scale, key),
                          test_utils=("test_schema", "test_faketensor"))


def test_entry_point_under_torch_compile_and_patched_source():
    q, k, v = gpu_inputs(1, 4, 2, 300, 300, 128, torch.bfloat16)
    compiled = torch.compile(lambda q, k, v: fa_sm80.attention(q, k, v, causal=True)[0] * 2)
    ref, _ = reference_attention(q, k, v, mask=causal_mask)
    assert rel_error(compiled(q, k, v) / 2, ref) < tolerance(torch.bfloat16)
    text = fa_sm80.metadata.source.read_text() + "\n// patched by lowering\n"
    out, _ = fa_sm80.attention(q, k, v, causal=True, source=text)
    assert torch.equal(out, fa_sm80.attention(q, k, v, causal=True)[0])


@pytest.mark.parametrize("cap", [1, 3])
def test_blocks_past_the_visit_list_are_classified_on_the_fly(cap):
    """A CTA lists at most CUBRIDGE_VISIT_CAP live key blocks; later ones are
    found by classifying on the fly. Lowered here, so short sequences cross it:
    EMPTY runs, per-warp kinds and the key tail on both sides of the boundary."""
    source = f"#define CUBRIDGE_VISIT_CAP {cap}\n" + fa_sm80.metadata.source.read_text()
    q, k, v = gpu_inputs(1, 4, 4, 300, 700, 64, torch.float16)
    out, lse = fa_sm80.attention(
        q, k, v, hooks_header=(HOOKS / "alternate_blocks.cuh").read_text(), source=source)
    ref, ref_lse = reference_attention(q, k, v, mask=lambda qi, ki, hi: (ki // 64) % 2 == 0)
    assert rel_error(out, ref) < tolerance(torch.float16)
    assert (lse.double() - ref_lse).abs().max().item() < 1e-3
    q, k, v = gpu_inputs(2, 4, 2, 517, 517, 128, torch.bfloat16)
    out, lse = fa_sm80.attention(q, k, v, causal=True, source=source)
    assert torch.equal(out, fa_sm80.attention(q, k, v, causal=True)[0])


@pytest.mark.parametrize("cap", [2, 2048])
def test_staged_reads_match_the_spec_in_both_entry_points(cap):
    """document_causal stages its key ids per key block and its query ids per
    query block (docs/hooks.md); with the visit list capped the later blocks
    take the on-the-fly path. Tails on both sides, Sq != Sk."""
    from cubridge.attention import Shape
    from cubridge.lower.hook_header import generate_header
    from cubridge.spec.loader import load
    from cubridge.transfer.hooks import plan_hooks

    spec = load(Path(__file__).parents[2] / "examples" / "specs" / "document_causal.py")
    header = generate_header(plan_hooks(spec))
    assert "constexpr int kKeyStaged = 1;" in header.text
    source = f"#define CUBRIDGE_VISIT_CAP {cap}\n" + fa_sm80.metadata.source.read_text()
    shape = Shape(2, 4, 2, 700, 650, 128)
    q, k, v = gpu_inputs(shape.b, shape.hq, shape.hk, shape.sq, shape.sk, shape.d, torch.bfloat16)
    aux = spec.make_aux(shape, torch.Generator().manual_seed(5), torch.device("cuda"))
    out, _ = fa_sm80.attention(q, k, v, hooks_header=header.text,
                               aux=header.pack_aux(aux, shape), source=source)
    ref = spec.reference(q.double(), k.double(), v.double(), **aux)
    ref = ref[0] if isinstance(ref, tuple) else ref
    assert rel_error(out, ref) < tolerance(torch.bfloat16)


@pytest.mark.parametrize("d", [40, 72, 96, 160])
def test_narrower_head_dims_read_and_write_only_their_columns(d):
    """A head dim between the tiles runs on the wider tile ("pads_head_dims"): its
    copies must zero-fill past the problem's columns, never read them, and O's stores
    stop there. q, k, v are views of rows 32 columns wider whose extra columns hold NaN
    (as a packed layout's neighbours would hold other data); O is a view whose extra
    columns must stay as they were."""
    def padded(t: torch.Tensor) -> torch.Tensor:
        wide = torch.full((*t.shape[:3], d + 32), float("nan"), device="cuda", dtype=t.dtype)
        wide[..., :d] = t
        return wide[..., :d]

    q, k, v = gpu_inputs(2, 4, 2, 333, 300, d, torch.bfloat16)
    ref, ref_lse = reference_attention(q, k, v, mask=causal_mask)
    out_wide = torch.full((2, 4, 333, d + 32), 7.0, device="cuda", dtype=torch.bfloat16)
    lse = torch.empty(2, 4, 333, device="cuda")
    fa_sm80.attention(padded(q), padded(k), padded(v), causal=True, out=out_wide[..., :d],
                      lse=lse)
    assert rel_error(out_wide[..., :d], ref) < tolerance(torch.bfloat16)
    assert (out_wide[..., d:] == 7.0).all(), "stores past the problem's columns"
    finite = torch.isfinite(ref_lse)
    assert (lse.double()[finite] - ref_lse[finite]).abs().max().item() < 1e-3
    # the same bits as contiguous inputs
    assert torch.equal(fa_sm80.attention(q, k, v, causal=True)[0], out_wide[..., :d])
