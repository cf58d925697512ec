"""Phi-3-mini's attention: 32 heads of head dim 96, causal. 96 lies between the
library's tiles: fa_sm90 runs it on its D = 128 build, whose TMA loads zero-fill
the columns past 96 and whose store skips them (no edit, a third more tensor work
than a tile of 96)."""

from cubridge.attention import PHI3_MINI
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "phi3_mini"
DESCRIPTION = "causal, head dim 96 (on the D = 128 tile)"
CONFIGS = [PHI3_MINI]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16", "fp16"]


def reference(q, k, v):
    q_idx, kv_idx = positions(q, k)
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), q_idx >= kv_idx, v)


def mask_mod(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx
