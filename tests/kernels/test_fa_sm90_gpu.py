"""fa_sm90 on an sm_90a GPU: against a float64 reference (shapes with tails,
Sq != Sk, GQA/MQA, both dtypes and head dims, several tiles per CTA of the
persistent grid), with hook headers that use every hook point, through
torch.compile, and against the verifier."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from kernel_helpers import reference_attention, rel_error, requires_gpu, tolerance

pytestmark = [pytest.mark.gpu, requires_gpu]
HOOKS = Path(__file__).parent / "hooks"
REPO = Path(__file__).resolve().parents[2]


def _is_sm90() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


requires_sm90 = pytest.mark.skipif(not _is_sm90(), reason="fa_sm90 needs an sm_90 GPU")
pytestmark.append(requires_sm90)

from cubridge.kernels import get_kernel  # noqa: E402

fa_sm90 = get_kernel("fa_sm90")

SHAPES = [  # B, Hq, Hk, Sq, Sk
    (2, 4, 4, 256, 256),
    (1, 8, 2, 200, 333),
    (2, 6, 1, 333, 129),
    (1, 2, 2, 1, 77),
    (1, 4, 2, 1000, 1000),
    (3, 40, 8, 700, 1500),   # more tiles than SMs: each CTA runs several
]


def _inputs(b, hq, hk, sq, sk, d, dtype, seed=0):
    g = torch.Generator(device="cuda").manual_seed(hash((b, hq, hk, sq, sk, d, seed)) % 2**31)
    make = lambda *s: torch.randn(*s, device="cuda", dtype=dtype, generator=g)
    return make(b, hq, sq, d), make(b, hk, sk, d), make(b, hk, sk, d)


def _poisoned(b, hq, sq, d, dtype):
    return (torch.full((b, hq, sq, d), float("nan"), device="cuda", dtype=dtype),
            torch.full((b, hq, sq), float("nan"), device="cuda"))


def _causal(qi, ki, hi):
    return qi >= ki


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "B{}H{}-{}S{}x{}".format(*s))
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_matches_float64_reference(shape, d, dtype, causal):
    b, hq, hk, sq, sk = shape
    q, k, v = _inputs(b, hq, hk, sq, sk, d, dtype)
    out, lse = _poisoned(b, hq, sq, d, dtype)
    fa_sm90.attention(q, k, v, causal=causal, out=out, lse=lse)
    ref, ref_lse = reference_attention(q, k, v, mask=_causal if causal else None)
    assert not out.isnan().any() and not lse.isnan().any(), "unwritten or NaN outputs"
    assert rel_error(out, ref) < tolerance(dtype)
    assert torch.equal(torch.isinf(lse), torch.isinf(ref_lse))
    finite = torch.isfinite(ref_lse)
    assert (lse.double()[finite] - ref_lse[finite]).abs().max().item() < 1e-3
    out2, lse2 = fa_sm90.attention(q, k, v, causal=causal)
    assert torch.equal(out2, out) and torch.equal(lse2, lse)


def test_repeated_runs_give_the_same_bits():
    """A race (a slot overwritten early, a missing barrier) shows as outputs that
    move between runs on the same inputs."""
    q, k, v = _inputs(4, 32, 8, 1024, 1024, 128, torch.bfloat16)
    first, _ = fa_sm90.attention(q, k, v, causal=True)
    for _ in range(5):
        assert torch.equal(fa_sm90.attention(q, k, v, causal=True)[0], first)


def test_scale_and_strided_views():
    q, k, v = _inputs(2, 4, 2, 300, 260, 128, torch.bfloat16)
    qt = q.transpose(1, 2).contiguous().transpose(1, 2)  # [B,S,H,D] memory, viewed as BHSD
    kt = k.transpose(1, 2).contiguous().transpose(1, 2)
    out, lse = fa_sm90.attention(qt, kt, v, scale=0.05)
    ref, ref_lse = reference_attention(q, k, v, scale=0.05)
    assert rel_error(out, ref) < tolerance(torch.bfloat16)
    assert (lse.double() - ref_lse).abs().max().item() < 1e-3


def test_window_alibi_hooks_use_score_mod_mask_and_aux():
    q, k, v = _inputs(2, 4, 2, 517, 517, 128, torch.bfloat16)
    slopes = torch.rand(4, device="cuda") * 0.1
    out, lse = fa_sm90.attention(q, k, v, hooks_header=(HOOKS / "window_alibi.cuh").read_text(),
                                 aux=[slopes])
    ref, ref_lse = reference_attention(
        q, k, v, score_mod=lambda s, qi, ki, hi: s + slopes.double().view(1, -1, 1, 1) * (ki - qi),
        mask=lambda qi, ki, hi: (qi >= ki) & (qi - ki < 100))
    assert rel_error(out, ref) < tolerance(torch.bfloat16)
    assert (lse.double() - ref_lse).abs().max().item() < 1e-3


def test_empty_blocks_inside_the_range_are_skipped():
    q, k, v = _inputs(1, 4, 4, 300, 700, 64, torch.float16)
    out, lse = fa_sm90.attention(
        q, k, v, hooks_header=(HOOKS / "alternate_blocks.cuh").read_text())
    ref, ref_lse = reference_attention(q, k, v, mask=lambda qi, ki, hi: (ki // 64) % 2 == 0)
    assert rel_error(out, ref) < tolerance(torch.float16)
    assert (lse.double() - ref_lse).abs().max().item() < 1e-3


def test_elementwise_normaliser_has_no_lse():
    q, k, v = _inputs(1, 4, 4, 333, 333, 128, torch.bfloat16)
    out, lse = fa_sm90.attention(q, k, v, hooks_header=(HOOKS / "sigmoid_causal.cuh").read_text())
    ref, _ = reference_attention(q, k, v, mask=_causal, activation=lambda s: torch.sigmoid(s - 2))
    assert lse is None
    assert rel_error(out, ref) < tolerance(torch.bfloat16)


def test_custom_op_under_torch_compile():
    q, k, v = _inputs(1, 4, 4, 256, 256, 128, torch.bfloat16)
    compiled = torch.compile(lambda q, k, v: fa_sm90.attention(q, k, v, causal=True)[0] * 2)
    ref, _ = reference_attention(q, k, v, mask=_causal)
    assert rel_error(compiled(q, k, v) / 2, ref) < tolerance(torch.bfloat16)


@pytest.mark.parametrize("name", ["full", "causal"])
def test_passes_the_verifier(name):
    from cubridge import verify
    from cubridge.spec import loader
    spec = loader.load(REPO / "examples" / "specs" / f"{name}.py")

    def impl(q, k, v, scale=None):
        return fa_sm90.attention(q, k, v, scale=scale, causal=name == "causal")

    report = verify.verify(spec, impl, device="cuda")
    assert report.passed, report.summary()


def test_bad_inputs_get_clear_errors():
    q, k, v = _inputs(1, 4, 4, 64, 64, 128, torch.bfloat16)
    with pytest.raises(TypeError, match="dtype"):
        fa_sm90.attention(q.float(), k.float(), v.float())
    with pytest.raises(ValueError, match="head dim 96"):
        fa_sm90.attention(q[..., :96].contiguous(), k[..., :96].contiguous(),
                          v[..., :96].contiguous())


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d", [64, 128])
def test_agrees_with_its_cuir(causal, d):
    """Kernel (GPU) and its CuIR program (CPU executor, the build's own tile config)
    on the same inputs: the same numerics (bf16 P, fp32 accumulation, the same
    lazy rescale), so they agree far more closely than either needs to agree
    with float64."""
    from cubridge import ir
    from cubridge.kernels.fa_sm90.cuir import FaSm90
    cfg = (None if causal else fa_sm90.unmasked_config(d)) or fa_sm90.config(d)
    program = ir.attention_fn(FaSm90, causal=causal, **cfg.cuir_kwargs())
    q, k, v = _inputs(1, 4, 2, 200, 150, d, torch.bfloat16)
    out, lse = fa_sm90.attention(q, k, v, causal=causal)
    ir_out, ir_lse = program(q.cpu(), k.cpu(), v.cpu())
    ref, _ = reference_attention(q, k, v, mask=_causal if causal else None)
    assert rel_error(out.cpu(), ir_out.double()) < 0.5 * tolerance(torch.bfloat16)
    assert rel_error(out, ref) < tolerance(torch.bfloat16)
    assert torch.equal(torch.isinf(lse.cpu()), torch.isinf(ir_lse))
    finite = torch.isfinite(ir_lse)
    assert (lse.cpu()[finite] - ir_lse[finite]).abs().max().item() < 1e-4
