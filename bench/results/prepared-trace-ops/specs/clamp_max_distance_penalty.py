"""Bidirectional linear distance penalty saturating at 256 (a capped ALiBi), per-head
slope, written with torch.clamp_max and torch.abs."""
import math

import torch
import torch.nn.functional as F

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "clamp_max_distance_penalty"
DESCRIPTION = "no mask, score - slope[h] * min(|q - k|, 256)"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16", "fp16"]
AUX_SHAPES = {"slope": ("Hq",)}
CAP = 256


def make_aux(shape, generator, device):
    return {"slope": (0.05 * torch.rand(shape.hq, generator=generator)).to(device)}


def reference(q, k, v, slope):
    q_idx, kv_idx = positions(q, k)
    dist = (q_idx - kv_idx).abs().clamp(max=CAP)
    k, v = expand_kv(q, k, v)
    scores = scaled_scores(q, k) - slope.to(q.dtype)[:, None, None] * dist
    return softmax_attention(scores, torch.ones_like(scores, dtype=torch.bool), v)


def score_mod(score, b, h, q_idx, kv_idx, *, slope):
    return score - slope[h] * torch.clamp_max(torch.abs(q_idx - kv_idx), CAP)
