"""Causal with a lookahead of two tokens (each query also sees the next two keys)."""

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "lookahead_causal"
DESCRIPTION = "k <= q + 2"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
DTYPES = ["bf16"]


def reference(q, k, v):
    qi, ki = positions(q, k)
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), ki <= qi + 2, v)


def mask_mod(b, h, q_idx, kv_idx):
    return kv_idx <= q_idx + 2
