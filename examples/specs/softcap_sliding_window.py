"""Gemma 2's local layers: a causal sliding window with the scores soft-capped
at 50 (Gemma 2 uses a 4096-key window; 1024 here, so that the window bites at
the benchmark's lengths)."""

import torch

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "softcap_sliding_window"
DESCRIPTION = "causal, q - k < 1024, 50 * tanh(score / 50)"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16", "fp16"]
WINDOW = 1024
SOFTCAP = 50.0


def reference(q, k, v):
    q_idx, kv_idx = positions(q, k)
    k, v = expand_kv(q, k, v)
    scores = SOFTCAP * torch.tanh(scaled_scores(q, k) / SOFTCAP)
    allowed = (q_idx >= kv_idx) & (q_idx - kv_idx < WINDOW)
    return softmax_attention(scores, allowed, v)


def mask_mod(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx < WINDOW)


def score_mod(score, b, h, q_idx, kv_idx):
    return SOFTCAP * torch.tanh(score / SOFTCAP)
