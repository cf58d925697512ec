"""Gemma 2 9B's global layers: causal attention over head dim 256 (16 query heads,
8 key/value heads) with the scores soft-capped at 50."""

import torch

from cubridge.attention import GEMMA2_9B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "gemma2_global"
DESCRIPTION = "causal, 50 * tanh(score / 50), D = 256"
CONFIGS = [GEMMA2_9B]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16", "fp16"]
SOFTCAP = 50.0


def reference(q, k, v):
    q_idx, kv_idx = positions(q, k)
    k, v = expand_kv(q, k, v)
    scores = SOFTCAP * torch.tanh(scaled_scores(q, k) / SOFTCAP)
    return softmax_attention(scores, q_idx >= kv_idx, v)


def mask_mod(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def score_mod(score, b, h, q_idx, kv_idx):
    return SOFTCAP * torch.tanh(score / SOFTCAP)
