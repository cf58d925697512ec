"""attention-gym's mods on the GPU: every taken corpus mod through
cubridge.flex_attention (the pipeline's GPU verification against the mods' own
float64 attention happens inside its first call) and compared with torch's
FlexAttention on the same inputs, on the kernel selected for the GPU and on
fa_sm80 (`kernel="fa_sm80"`: the A100 entry, which an H100 runs too). The
kernels are compiled ahead, in parallel (nvcc is most of the time here), from
the same plans the calls build."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from attn_gym_corpus import TAKEN, B, H

import cubridge
from cubridge.attention import Shape
from cubridge.build.driver import device_arch
from cubridge.lower.hook_header import generate_header
from cubridge.pipeline import flex
from cubridge.pipeline.variant import rules_variant

pytest.importorskip("attn_gym", reason="attention-gym (pip install attn-gym)")
pytestmark = [pytest.mark.gpu]

D, HK = 64, 2
DTYPE = torch.bfloat16


def _ids(cases):
    return [c.name.split("(")[0].strip() for c in cases]


def _shape(c) -> Shape:
    return Shape(B, H, HK, c.sq, c.sk, D)


def _prebuild(kernel: str | None) -> str:
    arch = device_arch(torch.device("cuda"))
    variants = []
    for c in TAKEN:
        score_mod, mask_mod = c.make("cuda")
        spec, lib, plan = flex.plan_call(score_mod, mask_mod, _shape(c), DTYPE, arch, kernel)
        variants.append(rules_variant(spec, lib, generate_header(plan)))
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda v: v.compile(arch), variants))
    return arch


@pytest.fixture(scope="module")
def prebuilt():
    return _prebuild(None)


@pytest.fixture(scope="module")
def prebuilt_fa_sm80():
    return _prebuild("fa_sm80")


def _inputs(c):
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(B, H, c.sq, D, device="cuda", generator=g, dtype=DTYPE)
    k = torch.randn(B, HK, c.sk, D, device="cuda", generator=g, dtype=DTYPE)
    v = torch.randn(B, HK, c.sk, D, device="cuda", generator=g, dtype=DTYPE)
    return q, k, v


def _torch_flex(c, score_mod, mask_mod, q, k, v):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    block_mask = None if mask_mod is None else create_block_mask(
        mask_mod, B, H, c.sq, c.sk, device="cuda")
    return flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask, enable_gqa=True)


@pytest.mark.parametrize("c", TAKEN, ids=_ids(TAKEN))
def test_verified_and_equal_to_torch_flex_attention(prebuilt, c):
    _check_against_torch_flex(c, None)


@pytest.mark.parametrize("c", TAKEN, ids=_ids(TAKEN))
def test_fa_sm80_verified_and_equal_to_torch_flex_attention(prebuilt_fa_sm80, c):
    _check_against_torch_flex(c, "fa_sm80")


def _check_against_torch_flex(c, kernel: str | None) -> None:
    score_mod, mask_mod = c.make("cuda")
    q, k, v = _inputs(c)
    builds = flex.STATS["builds"]
    out = cubridge.flex_attention(q, k, v, score_mod=score_mod, mask_mod=mask_mod,
                                  enable_gqa=True, kernel=kernel)
    key = flex._prepare(score_mod, mask_mod, tuple(q.shape), tuple(k.shape), tuple(v.shape),
                        q.dtype, str(q.device), kernel)
    call = flex._CALLS[key]
    assert call.kernel.verified_on, "the first call verifies the kernel on the GPU"
    assert kernel is None or call.kernel.variant.kernel.name == kernel
    assert flex.STATS["builds"] <= builds + 1
    want = _torch_flex(c, score_mod, mask_mod, q, k, v)
    assert out.shape == want.shape and out.dtype == want.dtype
    err = float((out.float() - want.float()).norm() / want.float().norm().clamp_min(1e-6))
    assert err < 1e-2, f"{c.name}: relative error {err:.2e} against torch's flex_attention"
    assert float((out.float() - want.float()).abs().max()) < 5e-2
