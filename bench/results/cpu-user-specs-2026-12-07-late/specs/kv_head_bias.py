"""GQA with a bias per KV head (h // group) read from a [Hk] aux, causal."""
import torch

from cubridge.attention import QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "kv_head_bias"
CONFIGS = [QWEN25_72B]
DTYPES = ["bf16"]
AUX_SHAPES = {"kv_bias": ("Hk",)}


def make_aux(shape, generator, device):
    return {"kv_bias": torch.randn(shape.hk, generator=generator).to(device)}


def reference(q, k, v, kv_bias):
    qi, ki = positions(q, k)
    group = q.shape[1] // k.shape[1]
    b = kv_bias.repeat_interleave(group).view(1, -1, 1, 1).to(q.dtype)
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k) + b * (ki % 2), qi >= ki, v)


def score_mod(score, b, h, q_idx, kv_idx, *, kv_bias):
    group = 8  # (Qwen2.5-72B: 64 query heads, 8 KV heads)
    return score + kv_bias[h // group] * (kv_idx % 2)


def mask_mod(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx
