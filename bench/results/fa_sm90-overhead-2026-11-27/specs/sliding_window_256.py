"""Causal sliding window: query q sees the 256 most recent keys."""

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "sliding_window_256"
DESCRIPTION = "causal and q - k < 256"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16", "fp16"]
WINDOW = 256


def reference(q, k, v):
    q_idx, kv_idx = positions(q, k)
    allowed = (q_idx >= kv_idx) & (q_idx - kv_idx < WINDOW)
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), allowed, v)


def mask_mod(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx < WINDOW)
