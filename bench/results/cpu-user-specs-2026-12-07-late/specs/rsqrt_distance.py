"""Scores scaled by a distance factor computed with rsqrt: score * rsqrt(1 + |q - k| / 256),
causal."""
import torch

from cubridge.attention import LLAMA2_7B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "rsqrt_distance"
CONFIGS = [LLAMA2_7B]
DTYPES = ["bf16"]


def reference(q, k, v):
    qi, ki = positions(q, k)
    f = torch.rsqrt(1.0 + (qi - ki).abs().double() / 256)
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k) * f.to(q.dtype), qi >= ki, v)


def score_mod(score, b, h, q_idx, kv_idx):
    return score * torch.rsqrt(1.0 + torch.abs(q_idx - kv_idx) / 256)


def mask_mod(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx
