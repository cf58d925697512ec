"""Causal with a per-head temperature; the mask written as HF models do, with
torch.finfo(score.dtype).min instead of -inf (every row keeps key 0, so the two agree)."""
import math

import torch
import torch.nn.functional as F

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "finfo_min_causal"
DESCRIPTION = "where(q >= k, score * temp[h], finfo.min)"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16", "fp16"]
AUX_SHAPES = {"temp": ("Hq",)}


def make_aux(shape, generator, device):
    return {"temp": (0.5 + torch.rand(shape.hq, generator=generator)).to(device)}


def reference(q, k, v, temp):
    q_idx, kv_idx = positions(q, k)
    k, v = expand_kv(q, k, v)
    scores = scaled_scores(q, k) * temp.to(q.dtype)[:, None, None]
    return softmax_attention(scores, q_idx >= kv_idx, v)


def score_mod(score, b, h, q_idx, kv_idx, *, temp):
    return torch.where(q_idx >= kv_idx, score * temp[h], torch.finfo(score.dtype).min)
