"""Gemma 2 9B's local layers: a causal sliding window of 4096 keys over head dim
256 (16 query heads, 8 key/value heads) with the scores soft-capped at 50."""

import torch

from cubridge.attention import GEMMA2_9B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "gemma2_local"
DESCRIPTION = "causal, q - k < 4096, 50 * tanh(score / 50), D = 256"
CONFIGS = [GEMMA2_9B]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16", "fp16"]
WINDOW = 4096
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
