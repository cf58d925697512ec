"""MQA (one KV head for 32 query heads) with ALiBi slopes computed in the mod and a
causal window of 1024 keys."""

import torch

from cubridge.attention import HeadConfig
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "mqa_alibi_window"
DESCRIPTION = "MQA 32:1, score - 2^(-8(h+1)/32) (q - k), causal, q - k < 1024"
CONFIGS = [HeadConfig("mqa32", 32, 1, 128)]
DTYPES = ["bf16"]
HEADS = 32


def reference(q, k, v):
    qi, ki = positions(q, k)
    h = torch.arange(q.shape[1], device=q.device).view(1, -1, 1, 1)
    slope = torch.pow(2.0, -8.0 * (h + 1) / HEADS)
    k, v = expand_kv(q, k, v)
    scores = scaled_scores(q, k) - (slope * (qi - ki)).to(q.dtype)
    return softmax_attention(scores, (qi >= ki) & (qi - ki < 1024), v)


def score_mod(score, b, h, q_idx, kv_idx):
    slope = torch.pow(2.0, -8.0 * (h + 1) / HEADS)
    return score - slope * (q_idx - kv_idx)


def mask_mod(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx < 1024)
