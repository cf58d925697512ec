"""Scores damped by distance, multiplicatively: score * exp(-|q - k| / 2048), no mask."""

import math

import torch

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "multiplicative_decay"
DESCRIPTION = "score * exp(-|q - k| / 2048)"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
DTYPES = ["bf16"]
TAU = 2048.0


def reference(q, k, v):
    qi, ki = positions(q, k)
    damp = torch.exp(-(qi - ki).abs().double() / TAU)
    k, v = expand_kv(q, k, v)
    scores = scaled_scores(q, k) * damp.to(q.dtype)
    return softmax_attention(scores, torch.ones_like(scores, dtype=torch.bool), v)


def score_mod(score, b, h, q_idx, kv_idx):
    return score * torch.exp(-torch.abs(q_idx - kv_idx) / TAU)
