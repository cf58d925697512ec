"""Causal with keys dropped by a per-head hash (a fixed pseudo-random seventh of the
keys hidden from each head)."""

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

import torch

NAME = "hashed_key_drop"
DESCRIPTION = "causal, keys with (5k + 3h) % 7 == 0 dropped"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
DTYPES = ["bf16"]


def reference(q, k, v):
    qi, ki = positions(q, k)
    h = torch.arange(q.shape[1], device=q.device).view(1, -1, 1, 1)
    allowed = (qi >= ki) & ((5 * ki + 3 * h) % 7 != 0)
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), allowed, v)


def mask_mod(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & ((5 * kv_idx + 3 * h) % 7 != 0)
