"""A Gaussian distance bias, -(q - k)^2 / (2 * 64^2), causal."""
import torch

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "gaussian_distance_bias"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
DTYPES = ["bf16"]
SIGMA = 64.0


def reference(q, k, v):
    qi, ki = positions(q, k)
    d = (qi - ki).double()
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k) - (d * d / (2 * SIGMA ** 2)).to(q.dtype),
                             qi >= ki, v)


def score_mod(score, b, h, q_idx, kv_idx):
    d = q_idx - kv_idx
    return score - d * d / (2 * SIGMA ** 2)


def mask_mod(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx
