"""The contract every library kernel keeps on the GPU, run for each entry of
`list_kernels()` that supports this device: against a float64 reference (tails,
Sq != Sk, GQA/MQA, both dtypes and head dims, more tiles than SMs), with hook
headers that use every hook point, with strided views, against the verifier,
against its own CuIR, and with clear errors for inputs it cannot take. What only
one kernel has (fa_sm80's visit list and staged reads) is tested in its own file."""

from __future__ import annotations

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

from cubridge import ir, verify
from cubridge.build.driver import device_arch
from cubridge.kernels import get_kernel, kernel_names
from cubridge.spec import loader

pytestmark = [pytest.mark.gpu, requires_gpu]
HOOKS = Path(__file__).parent / "hooks"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "specs"

SHAPES = [  # B, Hq, Hk, Sq, Sk
    (2, 4, 4, 256, 256),
    (1, 8, 2, 200, 333),
    (2, 6, 1, 333, 129),
    (1, 2, 2, 1, 77),
    (1, 4, 2, 1000, 1000),
    (3, 40, 8, 700, 1500),  # more tiles than SMs: persistent CTAs run several
]


@pytest.fixture(params=kernel_names())
def kernel(request):
    entry = get_kernel(request.param)
    why = entry.unsupported(arch=device_arch(torch.device("cuda")))
    if why:
        pytest.skip(f"{entry.name}: {why}")
    return entry


def _needs_head_dim(kernel, d: int) -> None:
    if not kernel.metadata.supports_dims(d):  # (16-120, 192: where the entry pads them)
        pytest.skip(f"{kernel.name} has no head dim {d}")


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "B{}H{}-{}S{}x{}".format(*s))
@pytest.mark.parametrize("d", [16, 32, 40, 64, 72, 80, 96, 128, 192, 256])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_matches_float64_reference(kernel, shape, d, dtype, causal):
    _needs_head_dim(kernel, d)
    b, hq, hk, sq, sk = shape
    q, k, v = gpu_inputs(b, hq, hk, sq, sk, d, dtype)
    out = torch.full((b, hq, sq, d), float("nan"), device="cuda", dtype=dtype)  # poisoned
    lse = torch.full((b, hq, sq), float("nan"), device="cuda")
    kernel.attention(q, k, v, causal=causal, out=out, lse=lse)
    ref, ref_lse = reference_attention(q, k, v, mask=causal_mask if causal else None)
    assert not out.isnan().any() and not lse.isnan().any(), "unwritten or NaN outputs"
    assert rel_error(out, ref) < tolerance(dtype)
    # causal rows past Sk see all keys; rows with no key give lse = -inf
    assert torch.equal(torch.isinf(lse), torch.isinf(ref_lse))
    finite = torch.isfinite(ref_lse)
    assert (lse.double()[finite] - ref_lse[finite]).abs().max().item() < 1e-3
    # the op path (fresh allocation) gives the same bits as the out= path
    out2, lse2 = kernel.attention(q, k, v, causal=causal)
    assert torch.equal(out2, out) and torch.equal(lse2, lse)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "B{}H{}-{}S{}x{}".format(*s))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_head_dim_pairs_match_float64_reference(kernel, shape, dtype, causal):
    """Each QK/V pair the entry builds as it is (MLA's 192/128): V and O have their own
    width; a v of another width is a clear error."""
    pairs = sorted(kernel.metadata.pair_configs)
    if not pairs:
        pytest.skip(f"{kernel.name} builds no QK/V head-dim pair")
    b, hq, hk, sq, sk = shape
    for d, dv in pairs:
        q, k, _ = gpu_inputs(b, hq, hk, sq, sk, d, dtype)
        _, _, v = gpu_inputs(b, hq, hk, sq, sk, dv, dtype)
        out = torch.full((b, hq, sq, dv), float("nan"), device="cuda", dtype=dtype)
        lse = torch.full((b, hq, sq), float("nan"), device="cuda")
        kernel.attention(q, k, v, causal=causal, out=out, lse=lse)
        ref, ref_lse = reference_attention(q, k, v, mask=causal_mask if causal else None)
        assert not out.isnan().any() and not lse.isnan().any(), "unwritten or NaN outputs"
        assert rel_error(out, ref) < tolerance(dtype), (d, dv)
        assert torch.equal(torch.isinf(lse), torch.isinf(ref_lse))
        finite = torch.isfinite(ref_lse)
        assert (lse.double()[finite] - ref_lse[finite]).abs().max().item() < 1e-3
        out2, lse2 = kernel.attention(q, k, v, causal=causal)
        assert out2.shape == (b, hq, sq, dv) and torch.equal(out2, out)
        narrow = v[..., :dv // 2].contiguous()  # (a V head dim no build takes beside d)
        with pytest.raises(ValueError, match=rf"v's head dim {dv // 2} is not one taken with "
                           rf"a QK head dim of {d}"):
            kernel.attention(q, k, narrow, causal=causal)


@pytest.mark.parametrize("d", [96, 128, 256])
def test_repeated_runs_give_the_same_bits(kernel, d):
    """A race (a slot overwritten early, a missing barrier) shows as outputs that
    move between runs on the same inputs."""
    _needs_head_dim(kernel, d)
    q, k, v = gpu_inputs(4, 32, 8, 1024, 1024, d, torch.bfloat16)
    first, _ = kernel.attention(q, k, v, causal=True)
    for _ in range(5):
        assert torch.equal(kernel.attention(q, k, v, causal=True)[0], first)


def test_scale_and_strided_views(kernel):
    q, k, v = gpu_inputs(2, 4, 2, 300, 260, 128, torch.bfloat16)
    qt = q.transpose(1, 2).contiguous().transpose(1, 2)  # [B,S,H,D] memory, viewed as BHSD
    kt = k.transpose(1, 2).contiguous().transpose(1, 2)
    out, lse = kernel.attention(qt, kt, v, scale=0.05)
    ref, ref_lse = reference_attention(q, k, v, scale=0.05)
    assert rel_error(out, ref) < tolerance(torch.bfloat16)
    assert (lse.double() - ref_lse).abs().max().item() < 1e-3


def test_window_alibi_hooks_use_score_mod_mask_and_aux(kernel):
    q, k, v = gpu_inputs(2, 4, 2, 517, 517, 128, torch.bfloat16)
    slopes = torch.rand(4, device="cuda") * 0.1
    out, lse = kernel.attention(q, k, v, hooks_header=(HOOKS / "window_alibi.cuh").read_text(),
                                aux=[slopes])
    ref, ref_lse = reference_attention(
        q, k, v, score_mod=lambda s, qi, ki, hi: s + slopes.double().view(1, -1, 1, 1) * (ki - qi),
        mask=lambda qi, ki, hi: (qi >= ki) & (qi - ki < 100))
    assert rel_error(out, ref) < tolerance(torch.bfloat16)
    assert (lse.double() - ref_lse).abs().max().item() < 1e-3


def test_empty_blocks_inside_the_range_are_skipped(kernel):
    q, k, v = gpu_inputs(1, 4, 4, 300, 700, 64, torch.float16)
    out, lse = kernel.attention(
        q, k, v, hooks_header=(HOOKS / "alternate_blocks.cuh").read_text())
    ref, ref_lse = reference_attention(q, k, v, mask=lambda qi, ki, hi: (ki // 64) % 2 == 0)
    assert rel_error(out, ref) < tolerance(torch.float16)
    assert (lse.double() - ref_lse).abs().max().item() < 1e-3


def test_elementwise_normaliser_has_no_lse(kernel):
    q, k, v = gpu_inputs(1, 4, 4, 333, 333, 128, torch.bfloat16)
    out, lse = kernel.attention(q, k, v, hooks_header=(HOOKS / "sigmoid_causal.cuh").read_text())
    ref, _ = reference_attention(q, k, v, mask=causal_mask,
                                 activation=lambda s: torch.sigmoid(s - 2))
    assert lse is None
    assert rel_error(out, ref) < tolerance(torch.bfloat16)


@pytest.mark.parametrize("name", ["full", "causal"])
def test_passes_the_verifier(kernel, name):
    spec = loader.load(EXAMPLES / f"{name}.py")

    def impl(q, k, v, scale=None):
        return kernel.attention(q, k, v, scale=scale, causal=name == "causal")

    report = verify.verify(spec, impl, device="cuda")
    assert report.passed, report.summary()


def test_kernel_spec_passes_the_verifier(kernel):
    report = verify.verify(kernel.spec(),
                           lambda q, k, v, scale=None: kernel.attention(q, k, v, scale),
                           device="cuda")
    assert report.passed, report.summary()


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d", [40, 64, 96, 128, 256])
def test_agrees_with_its_cuir(kernel, causal, d):
    """Kernel (GPU) and its CuIR program (CPU executor, the build's own tile config)
    on the same inputs: the same numerics (bf16 P, fp32 accumulation), so they
    agree far more closely than either needs to agree with float64."""
    _needs_head_dim(kernel, d)
    cfg = kernel.default_config(d, masked=causal)
    program = ir.attention_fn(kernel.cuir_class(), causal=causal, **cfg.cuir_kwargs())
    q, k, v = gpu_inputs(1, 4, 2, 200, 150, d, torch.bfloat16)
    out, lse = kernel.attention(q, k, v, causal=causal)
    ir_out, ir_lse = program(q.cpu(), k.cpu(), v.cpu())
    ref, _ = reference_attention(q, k, v, mask=causal_mask if causal else None)
    assert rel_error(out.cpu(), ir_out.double()) < 0.5 * tolerance(torch.bfloat16)
    assert rel_error(out, ref) < tolerance(torch.bfloat16)
    assert torch.equal(torch.isinf(lse.cpu()), torch.isinf(ir_lse))
    finite = torch.isfinite(ir_lse)
    assert (lse.cpu()[finite] - ir_lse[finite]).abs().max().item() < 1e-4


def test_bad_inputs_get_clear_errors(kernel):
    q, k, v = gpu_inputs(1, 4, 4, 64, 64, 128, torch.bfloat16)
    with pytest.raises(TypeError, match="dtype"):
        kernel.attention(q.float(), k.float(), v.float())
    with pytest.raises(ValueError, match="head dim 36"):  # (no entry builds or pads 36)
        kernel.attention(q[..., :36].contiguous(), k[..., :36].contiguous(),
                         v[..., :36].contiguous())
    with pytest.raises(ValueError, match="multiple of kv heads"):
        kernel.attention(q[:, :3], k[:, :2], v[:, :2])
    with pytest.raises(ValueError, match="contiguous in its last dim"):
        kernel.attention(q.transpose(2, 3), k, v)
    with pytest.raises(ValueError, match="is on cpu"):
        kernel.attention(q.cpu(), k.cpu(), v.cpu())
