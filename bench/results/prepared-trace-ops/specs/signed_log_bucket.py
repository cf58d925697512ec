"""Signed log-spaced relative buckets (bucketize-like, written with torch.sign, torch.log,
.long(), torch.where, torch.clamp): exact below 8, log-spaced to 1000, 16 a side."""
import math

import torch
import torch.nn.functional as F

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "signed_log_bucket"
DESCRIPTION = "causal, score + bias[h, 16 + sign(k - q) * logbucket(|k - q|)]"
CONFIGS = [LLAMA2_7B]
SEQ_LENS = [1024, 2048, 4096]
DTYPES = ["bf16", "fp16"]
AUX_SHAPES = {"bias": ("Hq", 33)}
EXACT = 8
MAXD = 1000


def make_aux(shape, generator, device):
    return {"bias": torch.randn(shape.hq, 33, generator=generator).to(device)}


def bucket(d):
    n = d.abs()
    logb = EXACT + (torch.log(n.clamp(min=1).float() / EXACT) / math.log(MAXD / EXACT) * (16 - EXACT)).long()
    mag = torch.where(n < EXACT, n, torch.clamp(logb, max=15))
    return 16 + torch.sign(d) * mag


def reference(q, k, v, bias):
    q_idx, kv_idx = positions(q, k)
    b_ = bias.to(q.dtype)[:, bucket(kv_idx - q_idx)]
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k) + b_, q_idx >= kv_idx, v)


def mask_mod(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def score_mod(score, b, h, q_idx, kv_idx, *, bias):
    return score + bias[h, bucket(kv_idx - q_idx)]
