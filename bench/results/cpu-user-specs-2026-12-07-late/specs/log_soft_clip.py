"""Scores above 10 grow only logarithmically: where(s > 10, 10 + log(s - 9), s), causal."""
import torch

from cubridge.attention import LLAMA2_7B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "log_soft_clip"
CONFIGS = [LLAMA2_7B]
DTYPES = ["bf16"]


def reference(q, k, v):
    qi, ki = positions(q, k)
    k, v = expand_kv(q, k, v)
    s = scaled_scores(q, k).double()
    s = torch.where(s > 10, 10 + torch.log((s - 9).clamp_min(1)), s)
    return softmax_attention(s.to(q.dtype), qi >= ki, v)


def score_mod(score, b, h, q_idx, kv_idx):
    return torch.where(score > 10, 10 + torch.log(torch.clamp(score - 9, min=1.0)), score)


def mask_mod(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx
