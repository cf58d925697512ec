"""T5's bidirectional relative-position bias: score + bias[h, bucket(k - q)].

Distances map to 32 buckets, 16 per direction: exact below 8, then
logarithmic up to 128 and clamped past it (T5's `_relative_position_bucket`).
The bias is learned per head and bucket. No mask.
"""

import math

import torch

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "t5_relative_bias"
DESCRIPTION = "no mask, score + bias[h, bucket(k - q)] (T5: 32 log-spaced buckets to 128)"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16", "fp16"]
AUX_SHAPES = {"t5_bias": ("Hq", 32)}

NUM_BUCKETS = 32
MAX_DISTANCE = 128


def make_aux(shape, generator, device):
    return {"t5_bias": torch.randn(shape.hq, NUM_BUCKETS, generator=generator).to(device)}


def bucket(distance):
    """T5's bidirectional bucket of `distance` = k - q (int tensor in, int64 out)."""
    half = NUM_BUCKETS // 2
    exact = half // 2
    side = (distance > 0).long() * half
    n = distance.abs()
    far = exact + (torch.log(n.clamp(min=1).float() / exact)
                   / math.log(MAX_DISTANCE / exact) * (half - exact)).long()
    return side + torch.where(n < exact, n, far.clamp(max=half - 1))


def reference(q, k, v, t5_bias):
    q_idx, kv_idx = positions(q, k)
    k, v = expand_kv(q, k, v)
    bias = t5_bias.to(q.dtype)[:, bucket(kv_idx - q_idx)]  # [Hq, Sq, Sk]
    scores = scaled_scores(q, k) + bias
    return softmax_attention(scores, torch.ones_like(scores, dtype=torch.bool), v)


def score_mod(score, b, h, q_idx, kv_idx, *, t5_bias):
    return score + t5_bias[h, bucket(kv_idx - q_idx)]
