"""Gemma 3 12B's global layers: plain causal attention over head dim 256 (16 query
heads, 8 key/value heads; its QK norm is applied before attention, outside it)."""

from cubridge.attention import GEMMA3_12B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "gemma3_global"
DESCRIPTION = "causal, D = 256"
CONFIGS = [GEMMA3_12B]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16", "fp16"]


def reference(q, k, v):
    q_idx, kv_idx = positions(q, k)
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), q_idx >= kv_idx, v)


def mask_mod(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx
