"""Causal attention with ALiBi: score + slope[h] * (k - q), slopes the
geometric sequence 2^(-8 (h + 1) / Hq) of the ALiBi paper."""

import torch

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "alibi_causal"
DESCRIPTION = "causal, score + slope[h] * (k - q)"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16", "fp16"]
AUX_SHAPES = {"alibi_slopes": ("Hq",)}


def make_aux(shape, generator, device):
    heads = torch.arange(1, shape.hq + 1, dtype=torch.float32, device=device)
    return {"alibi_slopes": torch.exp2(-8.0 * heads / shape.hq)}


def reference(q, k, v, alibi_slopes):
    q_idx, kv_idx = positions(q, k)
    k, v = expand_kv(q, k, v)
    bias = alibi_slopes.to(q.dtype)[:, None, None] * (kv_idx - q_idx)
    return softmax_attention(scaled_scores(q, k) + bias, q_idx >= kv_idx, v)


def mask_mod(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def score_mod(score, b, h, q_idx, kv_idx, *, alibi_slopes):
    return score + alibi_slopes[h] * (kv_idx - q_idx)
