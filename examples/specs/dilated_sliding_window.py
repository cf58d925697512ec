"""Dilated causal sliding window: query q sees keys q, q - 2, q - 4, ... within
the last 1024 positions (every second key of a 1024-wide window)."""

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "dilated_sliding_window"
DESCRIPTION = "causal, q - k < 1024 and (q - k) % 2 == 0"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16", "fp16"]
WINDOW = 1024
DILATION = 2


def reference(q, k, v):
    q_idx, kv_idx = positions(q, k)
    distance = q_idx - kv_idx
    allowed = (distance >= 0) & (distance < WINDOW) & (distance % DILATION == 0)
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), allowed, v)


def mask_mod(b, h, q_idx, kv_idx):
    distance = q_idx - kv_idx
    return (distance >= 0) & (distance < WINDOW) & (distance % DILATION == 0)
