"""Causal, a learned positive per-head decay in log distance (FoX/KERPLE-style):
score - softplus(w[h]) * log1p(q - k); the mask as masked_fill(-inf) in score_mod."""
import math

import torch
import torch.nn.functional as F

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "softplus_log_decay"
DESCRIPTION = "causal via masked_fill, score - softplus(w[h]) * log1p(q - k)"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16", "fp16"]
AUX_SHAPES = {"w": ("Hq",)}


def make_aux(shape, generator, device):
    return {"w": torch.randn(shape.hq, generator=generator).to(device)}


def reference(q, k, v, w):
    q_idx, kv_idx = positions(q, k)
    k, v = expand_kv(q, k, v)
    rate = torch.log(1 + torch.exp(w.to(q.dtype)))[:, None, None]
    dist = (q_idx - kv_idx).clamp(min=0).to(q.dtype)
    scores = scaled_scores(q, k) - rate * torch.log(1 + dist)
    return softmax_attention(scores, q_idx >= kv_idx, v)


def score_mod(score, b, h, q_idx, kv_idx, *, w):
    decay = F.softplus(w[h]) * torch.log1p(q_idx - kv_idx)
    return (score - decay).masked_fill(kv_idx > q_idx, float("-inf"))
