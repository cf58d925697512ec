"""Bidirectional local attention |q - k| <= 256 (abs() builtin, min() of Python
constants), score + where(same 64-block, 0.5, -0.5) built from torch.tensor constants
and torch.finfo in a where."""
import math

import torch
import torch.nn.functional as F

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "local_where_consts"
DESCRIPTION = "|q - k| <= 256, score + where(q // 64 == k // 64, 0.5, -0.5)"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16", "fp16"]
HALF = 256


def reference(q, k, v):
    q_idx, kv_idx = positions(q, k)
    allowed = (q_idx - kv_idx).abs() <= HALF
    bonus = torch.where(q_idx // 64 == kv_idx // 64, 0.5, -0.5).to(q.dtype)
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k) + bonus, allowed, v)


def mask_mod(b, h, q_idx, kv_idx):
    return abs(q_idx - kv_idx) <= min(HALF, 1000)


def score_mod(score, b, h, q_idx, kv_idx):
    up = torch.tensor(0.5)
    return score + torch.where(q_idx // 64 == kv_idx // 64, up, -up)
