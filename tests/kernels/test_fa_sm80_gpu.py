"""fa_sm80 on the GPU: against a float64 reference (shapes with tails, Sq != Sk,
GQA/MQA, both dtypes and head dims), with hook headers that use every hook
point, through torch.compile, against the verifier and against its CuIR."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from kernel_helpers import reference_attention, rel_error, requires_gpu, tolerance

from cubridge.build.attention_op import register
from cubridge.build.driver import device_arch
from cubridge.kernels import get_kernel

fa_sm80 = get_kernel("fa_sm80")

pytestmark = [pytest.mark.gpu, requires_gpu]
HOOKS = Path(__file__).parent / "hooks"
REPO = Path(__file__).resolve().parents[2]

SHAPES = [  # B, Hq, Hk, Sq, Sk
    (2, 4, 4, 256, 256),
    (1, 8, 2, 200, 333),
    (2, 6, 1, 333, 129),
    (1, 2, 2, 1, 77),
    (1, 4, 2, 1000, 1000),
]


def _inputs(b, hq, hk, sq, sk, d, dtype):
    g = torch.Generator(device="cuda").manual_seed(hash((b, hq, hk, sq, sk, d)) % 2**31)
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
    fa_sm80.attention(q, k, v, causal=causal, out=out, lse=lse)
    ref, ref_lse = reference_attention(q, k, v, mask=_causal if causal else None)
    assert not out.isnan().any() and not lse.isnan().any(), "unwritten or NaN outputs"
    assert rel_error(out, ref) < tolerance(dtype)
    # causal rows past Sk see all keys; rows with no key give lse = -inf
    assert torch.equal(torch.isinf(lse), torch.isinf(ref_lse))
    finite = torch.isfinite(ref_lse)
    assert (lse.double()[finite] - ref_lse[finite]).abs().max().item() < 1e-3
    # the op path (fresh allocation) gives the same bits as the out= path
    out2, lse2 = fa_sm80.attention(q, k, v, causal=causal)
    assert torch.equal(out2, out) and torch.equal(lse2, lse)


def test_scale_and_strided_views():
    q, k, v = _inputs(2, 4, 2, 300, 260, 128, torch.bfloat16)
    qt = q.transpose(1, 2).contiguous().transpose(1, 2)  # [B,S,H,D] memory, viewed as BHSD
    out, lse = fa_sm80.attention(qt, k, v, scale=0.05)
    ref, ref_lse = reference_attention(q, k, v, scale=0.05)
    assert rel_error(out, ref) < tolerance(torch.bfloat16)
    assert (lse.double() - ref_lse).abs().max().item() < 1e-3


def test_window_alibi_hooks_use_score_mod_mask_and_aux():
    q, k, v = _inputs(2, 4, 2, 517, 517, 128, torch.bfloat16)
    slopes = torch.rand(4, device="cuda") * 0.1
    out, lse = fa_sm80.attention(q, k, v, hooks_header=(HOOKS / "window_alibi.cuh").read_text(),
                                 aux=[slopes])

    ref, ref_lse = reference_attention(
        q, k, v, score_mod=lambda s, qi, ki, hi: s + slopes.double().view(1, -1, 1, 1) * (ki - qi),
        mask=lambda qi, ki, hi: (qi >= ki) & (qi - ki < 100))
    assert rel_error(out, ref) < tolerance(torch.bfloat16)
    assert (lse.double() - ref_lse).abs().max().item() < 1e-3


def test_empty_blocks_inside_the_range_are_skipped():
    q, k, v = _inputs(1, 4, 4, 300, 700, 64, torch.float16)
    out, lse = fa_sm80.attention(
        q, k, v, hooks_header=(HOOKS / "alternate_blocks.cuh").read_text())
    ref, ref_lse = reference_attention(q, k, v, mask=lambda qi, ki, hi: (ki // 64) % 2 == 0)
    assert rel_error(out, ref) < tolerance(torch.float16)
    assert (lse.double() - ref_lse).abs().max().item() < 1e-3


def test_elementwise_normaliser_has_no_lse():
    q, k, v = _inputs(1, 4, 4, 333, 333, 128, torch.bfloat16)
    out, lse = fa_sm80.attention(q, k, v, hooks_header=(HOOKS / "sigmoid_causal.cuh").read_text())
    ref, _ = reference_attention(q, k, v, mask=_causal, activation=lambda s: torch.sigmoid(s - 2))
    assert lse is None
    assert rel_error(out, ref) < tolerance(torch.bfloat16)


def test_custom_op_under_torch_compile_and_opcheck():
    q, k, v = _inputs(1, 4, 4, 256, 256, 128, torch.bfloat16)
    kernel = fa_sm80.launchable(128, torch.bfloat16, device_arch(q.device), causal=True)
    key = register(kernel)
    scale = 1 / math.sqrt(128)

    def f(q, k, v):
        out, lse = torch.ops.cubridge.attention_fwd(q, k, v, [], scale, key)
        return out * 2, lse

    compiled = torch.compile(f, fullgraph=True)
    out, lse = compiled(q, k, v)
    ref, ref_lse = reference_attention(q, k, v, mask=_causal)
    assert rel_error(out / 2, ref) < tolerance(torch.bfloat16)
    torch.library.opcheck(torch.ops.cubridge.attention_fwd.default, (q, k, v, [], scale, key),
                          test_utils=("test_schema", "test_faketensor"))


def test_bad_inputs_get_clear_errors():
    q, k, v = _inputs(1, 4, 4, 64, 64, 128, torch.bfloat16)
    with pytest.raises(TypeError, match="dtype"):
        fa_sm80.attention(q.float(), k.float(), v.float())
    with pytest.raises(ValueError, match="head dim 96"):
        fa_sm80.attention(q[..., :96].contiguous(), k[..., :96].contiguous(),
                          v[..., :96].contiguous())
    with pytest.raises(ValueError, match="multiple of kv heads"):
        fa_sm80.attention(q[:, :3], k[:, :2], v[:, :2])
    with pytest.raises(ValueError, match="contiguous in its last dim"):
        fa_sm80.attention(q.transpose(2, 3), k, v)
    with pytest.raises(ValueError, match="is on cpu"):
        fa_sm80.attention(q.cpu(), k.cpu(), v.cpu())


@pytest.mark.parametrize("name", ["full", "causal"])
def test_passes_the_verifier(name):
    verify = pytest.importorskip("cubridge.verify")
    spec_mod = pytest.importorskip("cubridge.spec.loader")
    spec = spec_mod.load(REPO / "examples" / "specs" / f"{name}.py")

    def impl(q, k, v, scale=None):
        return fa_sm80.attention(q, k, v, scale=scale, causal=name == "causal")

    report = verify.verify(spec, impl, device="cuda")
    assert report.passed, report.summary()


def test_kernel_spec_passes_the_verifier():
    verify = pytest.importorskip("cubridge.verify")
    spec_mod = pytest.importorskip("cubridge.spec.loader")
    spec = spec_mod.load(REPO / "cubridge" / "kernels" / "common" / "standard_attention_spec.py")
    report = verify.verify(spec, lambda q, k, v, scale=None: fa_sm80.attention(q, k, v, scale),
                           device="cuda")
    assert report.passed, report.summary()


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d", [64, 128])
def test_agrees_with_its_cuir(causal, d):
    """Kernel (GPU) and its CuIR program (CPU executor, same config as metadata.json)
    on the same inputs: the same numerics (bf16 P, fp32 accumulation), so they
    agree far more closely than either needs to agree with float64."""
    ir = pytest.importorskip("cubridge.ir")
    cuir = pytest.importorskip("cubridge.kernels.fa_sm80.cuir")
    cfg = vars(fa_sm80.metadata.config(d))
    program = ir.attention_fn(cuir.FaSm80, causal=causal, **cfg)
    q, k, v = _inputs(1, 4, 2, 200, 150, d, torch.bfloat16)
    out, lse = fa_sm80.attention(q, k, v, causal=causal)
    ir_out, ir_lse = program(q.cpu(), k.cpu(), v.cpu())
    ref, _ = reference_attention(q, k, v, mask=_causal if causal else None)
    assert rel_error(out.cpu(), ir_out.double()) < 0.5 * tolerance(torch.bfloat16)
    assert rel_error(out, ref) < tolerance(torch.bfloat16)
    assert torch.equal(torch.isinf(lse.cpu()), torch.isinf(ir_lse))
    finite = torch.isfinite(ir_lse)
    assert (lse.cpu()[finite] - ir_lse[finite]).abs().max().item() < 1e-4


def test_entry_point_under_torch_compile_and_patched_source():
    q, k, v = _inputs(1, 4, 2, 300, 300, 128, torch.bfloat16)
    compiled = torch.compile(lambda q, k, v: fa_sm80.attention(q, k, v, causal=True)[0] * 2)
    ref, _ = reference_attention(q, k, v, mask=_causal)
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
    q, k, v = _inputs(1, 4, 4, 300, 700, 64, torch.float16)
    out, lse = fa_sm80.attention(
        q, k, v, hooks_header=(HOOKS / "alternate_blocks.cuh").read_text(), source=source)
    ref, ref_lse = reference_attention(q, k, v, mask=lambda qi, ki, hi: (ki // 64) % 2 == 0)
    assert rel_error(out, ref) < tolerance(torch.float16)
    assert (lse.double() - ref_lse).abs().max().item() < 1e-3
    q, k, v = _inputs(2, 4, 2, 517, 517, 128, torch.bfloat16)
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
    q, k, v = _inputs(shape.b, shape.hq, shape.hk, shape.sq, shape.sk, shape.d, torch.bfloat16)
    aux = spec.make_aux(shape, torch.Generator().manual_seed(5), torch.device("cuda"))
    out, _ = fa_sm80.attention(q, k, v, hooks_header=header.text,
                               aux=header.pack_aux(aux, shape), source=source)
    ref = spec.reference(q.double(), k.double(), v.double(), **aux)
    ref = ref[0] if isinstance(ref, tuple) else ref
    assert rel_error(out, ref) < tolerance(torch.bfloat16)
