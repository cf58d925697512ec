"""Bidirectional local attention (Longformer's sliding window without its global
tokens): query q sees the keys with |q - k| < 512, on both sides."""

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "local_band"
DESCRIPTION = "|q - k| < 512, no causal mask"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16", "fp16"]
HALF_WIDTH = 512


def reference(q, k, v):
    q_idx, kv_idx = positions(q, k)
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), (q_idx - kv_idx).abs() < HALF_WIDTH, v)


def mask_mod(b, h, q_idx, kv_idx):
    return (q_idx - kv_idx).abs() < HALF_WIDTH
