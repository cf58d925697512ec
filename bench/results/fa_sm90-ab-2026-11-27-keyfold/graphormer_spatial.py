"""Graphormer's spatial encoding (attention-gym's generate_graphormer_spatial_bias):
score + spatial_bias[h, distances[b, q, k]], distances int32 shortest-path buckets."""

import torch

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "graphormer_spatial"
DESCRIPTION = "no mask, score + spatial_bias[h, distances[b, q, k]]"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
SEQ_LENS = [2048, 4096]
DTYPES = ["bf16"]
AUX_SHAPES = {"spatial_bias": ("Hq", 7), "distances": ("B", "Sq", "Sk")}


def make_aux(shape, generator, device):
    d = torch.randint(0, 7, (shape.b, shape.sq, shape.sk), generator=generator, dtype=torch.int32)
    return {"spatial_bias": torch.randn(shape.hq, 7, generator=generator).to(device),
            "distances": d.to(device)}


def reference(q, k, v, spatial_bias, distances):
    q_idx, kv_idx = positions(q, k)
    k, v = expand_kv(q, k, v)
    bias = spatial_bias.to(q.dtype)[:, distances.long()].permute(1, 0, 2, 3)  # [B, Hq, Sq, Sk]
    scores = scaled_scores(q, k) + bias
    return softmax_attention(scores, torch.ones_like(scores, dtype=torch.bool), v)


def score_mod(score, b, h, q_idx, kv_idx, *, spatial_bias, distances):
    return score + spatial_bias[h, distances[b, q_idx, kv_idx]]
