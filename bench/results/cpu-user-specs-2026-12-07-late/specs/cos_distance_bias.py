"""A periodic distance bias, 0.5 * cos(2 pi (q - k) / 128), bidirectional band of 1024."""
import math

import torch

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "cos_distance_bias"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
DTYPES = ["bf16"]


def reference(q, k, v):
    qi, ki = positions(q, k)
    bias = 0.5 * torch.cos(2 * math.pi * (qi - ki).double() / 128)
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k) + bias.to(q.dtype), (qi - ki).abs() < 1024, v)


def score_mod(score, b, h, q_idx, kv_idx):
    return score + 0.5 * torch.cos(2 * math.pi * (q_idx - kv_idx) / 128)


def mask_mod(b, h, q_idx, kv_idx):
    return (q_idx - kv_idx).abs() < 1024
