"""cubridge.flex_attention on the GPU: under torch.compile(fullgraph=True) it
gives the eager outputs (which tests/corpus/test_attn_gym_corpus_gpu.py
compares with torch's FlexAttention), and a second call with the same mods
neither recompiles the graph nor rebuilds or re-verifies the kernel."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend

import cubridge
from cubridge.pipeline import flex

pytestmark = [pytest.mark.gpu]

B, H, HK, S, D = 2, 4, 2, 256, 64


def _document_mask():
    doc = (torch.arange(S, device="cuda") // 96).to(torch.int32)  # captured, 3 documents

    def mask_mod(b, h, q_idx, kv_idx):
        return (doc[q_idx] == doc[kv_idx]) & (q_idx >= kv_idx)

    return mask_mod, doc


def _softcap(score, b, h, q_idx, kv_idx):
    return 30.0 * torch.tanh(score / 30.0)


def _inputs():
    g = torch.Generator(device="cuda").manual_seed(1)
    shapes = [(B, H, S, D), (B, HK, S, D), (B, HK, S, D)]
    return [torch.randn(s, device="cuda", generator=g, dtype=torch.bfloat16) for s in shapes]


@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_compiled_fullgraph_matches_eager_and_does_not_recompile(backend):
    mask_mod, _ = _document_mask()
    q, k, v = _inputs()

    def attend(q, k, v):
        return cubridge.flex_attention(q, k, v, score_mod=_softcap, mask_mod=mask_mod,
                                       enable_gqa=True, return_lse=True)

    eager_out, eager_lse = attend(q, k, v)  # builds and verifies the kernel
    stats = dict(flex.STATS)
    torch._dynamo.reset()
    counter = CompileCounterWithBackend(backend)
    compiled = torch.compile(attend, fullgraph=True, backend=counter)
    out, lse = compiled(q, k, v)
    torch.testing.assert_close(out, eager_out, rtol=0, atol=0)
    torch.testing.assert_close(lse, eager_lse, rtol=0, atol=0)
    q2, k2, v2 = (t.clone().normal_() for t in (q, k, v))  # new values, same shapes
    out2, _ = compiled(q2, k2, v2)
    assert counter.frame_count == 1, "the second call recompiled"
    assert {n: flex.STATS[n] for n in ("traces", "builds", "verifications")} == \
        {n: stats[n] for n in ("traces", "builds", "verifications")}
    want2, _ = attend(q2, k2, v2)
    torch.testing.assert_close(out2, want2, rtol=0, atol=0)


def test_eager_second_call_launches_the_cached_kernel():
    mask_mod, _ = _document_mask()
    q, k, v = _inputs()
    cubridge.flex_attention(q, k, v, mask_mod=mask_mod, enable_gqa=True)
    stats = dict(flex.STATS)
    cubridge.flex_attention(q, k, v, mask_mod=mask_mod, enable_gqa=True)
    assert flex.STATS["calls"] == stats["calls"] + 1
    assert all(flex.STATS[n] == stats[n] for n in ("traces", "builds", "verifications"))
    # a re-created closure (new captured ids) is traced again but reuses the kernel
    again, _ = _document_mask()
    cubridge.flex_attention(q, k, v, mask_mod=again, enable_gqa=True)
    assert flex.STATS["builds"] == stats["builds"]
    assert flex.STATS["traces"] == stats["traces"] + 1


def test_matches_torch_flex_attention_with_a_block_mask():
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    mask_mod, _ = _document_mask()
    q, k, v = _inputs()
    block_mask = create_block_mask(mask_mod, B, None, S, S, device="cuda")
    out = cubridge.flex_attention(q, k, v, score_mod=_softcap, block_mask=block_mask,
                                  enable_gqa=True)
    want = flex_attention(q, k, v, score_mod=_softcap, block_mask=block_mask, enable_gqa=True)
    err = float((out.float() - want.float()).norm() / want.float().norm())
    assert err < 1e-2, err


def test_a_v_head_dim_of_its_own_matches_torch_flex_attention():
    """MLA's QK head dim 192 beside V head dim 128 (fa_sm90 builds it as it is; on other
    GPUs the call says why it cannot)."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the 192/128 pair is fa_sm90's (sm90)")
    g = torch.Generator(device="cuda").manual_seed(2)
    shapes = [(B, H, S + 77, 192), (B, HK, S + 77, 192), (B, HK, S + 77, 128)]
    q, k, v = (torch.randn(s, device="cuda", generator=g, dtype=torch.bfloat16) for s in shapes)
    causal = create_block_mask(lambda b, h, q_idx, kv_idx: q_idx >= kv_idx, None, None,
                               S + 77, S + 77, device="cuda")
    out, lse = cubridge.flex_attention(q, k, v, score_mod=_softcap, block_mask=causal,
                                       enable_gqa=True, return_lse=True)
    want, want_lse = flex_attention(q, k, v, score_mod=_softcap, block_mask=causal,
                                    enable_gqa=True, return_lse=True)
    assert out.shape == (B, H, S + 77, 128)
    err = float((out.float() - want.float()).norm() / want.float().norm())
    assert err < 1e-2, err
    assert (lse - want_lse).abs().max().item() < 1e-2
