"""Causal window of 1024 with a bonus beta[h] / sqrt(1 + (q - k)) written as a pow:
(1 + d) ** -0.5; rsqrt form in the reference."""
import math

import torch
import torch.nn.functional as F

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "inverse_sqrt_distance"
DESCRIPTION = "0 <= q - k < 1024, score + beta[h] * (1 + q - k) ** -0.5"
CONFIGS = [LLAMA2_7B]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16", "fp16"]
AUX_SHAPES = {"beta": ("Hq",)}
WINDOW = 1024


def make_aux(shape, generator, device):
    return {"beta": torch.rand(shape.hq, generator=generator).to(device)}


def reference(q, k, v, beta):
    q_idx, kv_idx = positions(q, k)
    d = q_idx - kv_idx
    bonus = beta.to(q.dtype)[:, None, None] * torch.rsqrt(1.0 + d.clamp(min=0).to(q.dtype))
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k) + bonus, (d >= 0) & (d < WINDOW), v)


def mask_mod(b, h, q_idx, kv_idx):
    d = q_idx - kv_idx
    return (d >= 0) & (d < WINDOW)


def score_mod(score, b, h, q_idx, kv_idx, *, beta):
    return score + beta[h] * torch.pow(1.0 + (q_idx - kv_idx), -0.5)
