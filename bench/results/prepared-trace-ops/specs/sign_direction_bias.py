"""Bidirectional encoder with a learned per-head direction bias: score + dir[h] * sign(q - k)
(keys before, at or after the query), via torch.sign(...).type_as(score)."""
import math

import torch
import torch.nn.functional as F

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "sign_direction_bias"
DESCRIPTION = "no mask, score + dir_bias[h] * sign(q - k)"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16", "fp16"]
AUX_SHAPES = {"dir_bias": ("Hq",)}


def make_aux(shape, generator, device):
    return {"dir_bias": torch.randn(shape.hq, generator=generator).to(device)}


def reference(q, k, v, dir_bias):
    q_idx, kv_idx = positions(q, k)
    sgn = (q_idx > kv_idx).to(q.dtype) - (q_idx < kv_idx).to(q.dtype)
    k, v = expand_kv(q, k, v)
    scores = scaled_scores(q, k) + dir_bias.to(q.dtype)[:, None, None] * sgn
    return softmax_attention(scores, torch.ones_like(scores, dtype=torch.bool), v)


def score_mod(score, b, h, q_idx, kv_idx, *, dir_bias):
    return score + dir_bias[h] * torch.sign(q_idx - kv_idx).type_as(score)
