"""Bidirectional relative bias by signed distance buckets of 64, truncated toward zero
(torch.div(k - q, 64, rounding_mode="trunc")), clipped to +-31."""
import math

import torch
import torch.nn.functional as F

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "trunc_div_signed_bias"
DESCRIPTION = "no mask, score + bias[h, clip(trunc((k - q) / 64), -31, 31) + 31]"
CONFIGS = [LLAMA2_7B]
SEQ_LENS = [1024, 2048, 4096]
DTYPES = ["bf16", "fp16"]
AUX_SHAPES = {"rel_bias": ("Hq", 63)}


def make_aux(shape, generator, device):
    return {"rel_bias": torch.randn(shape.hq, 63, generator=generator).to(device)}


def bucket_ref(d):
    t = torch.sign(d) * (d.abs() // 64)  # truncation toward zero
    return t.clamp(-31, 31) + 31


def reference(q, k, v, rel_bias):
    q_idx, kv_idx = positions(q, k)
    bias = rel_bias.to(q.dtype)[:, bucket_ref(kv_idx - q_idx)]
    k, v = expand_kv(q, k, v)
    scores = scaled_scores(q, k) + bias
    return softmax_attention(scores, torch.ones_like(scores, dtype=torch.bool), v)


def score_mod(score, b, h, q_idx, kv_idx, *, rel_bias):
    bucket = torch.clip(torch.div(kv_idx - q_idx, 64, rounding_mode="trunc"), -31, 31) + 31
    return score + rel_bias[h, bucket]
