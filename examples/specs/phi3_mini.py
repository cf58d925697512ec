"""Phi-3-mini's attention: 32 heads of head dim 96, causal. fa_sm90 builds D = 96
as a tile of its own (64-byte-swizzled panels of 32 columns, so that its products
are 96 wide); head dims 72-88 run on that build with the columns past them zero-filled."""

from cubridge.attention import PHI3_MINI
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "phi3_mini"
DESCRIPTION = "causal, head dim 96"
CONFIGS = [PHI3_MINI]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16", "fp16"]


def reference(q, k, v):
    q_idx, kv_idx = positions(q, k)
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), q_idx >= kv_idx, v)


def mask_mod(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx
