"""Causal with a penalty that starts 64 keys back: score - 0.02 * relu(q - k - 64)."""
import torch
import torch.nn.functional as F

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "relu_offset_penalty"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
DTYPES = ["bf16"]


def reference(q, k, v):
    qi, ki = positions(q, k)
    pen = 0.02 * torch.relu(qi - ki - 64).to(q.dtype)
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k) - pen, qi >= ki, v)


def score_mod(score, b, h, q_idx, kv_idx):
    return score - 0.02 * F.relu(q_idx - kv_idx - 64)


def mask_mod(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx
