"""Graphormer's spatial encoding: score + spatial_bias[h, distance[b, q, k]].

Each position is a node of a graph; `distance` holds the shortest-path length
between two nodes, cut at 5 (bucket 6: farther or unreachable), and the bias is
learned per head and bucket. No mask. The distances are an int32 tensor per
batch row, as a graph library hands them; the hooks read them as int16 indices
(docs/hooks.md, "Narrowed indices"), which hold every bucket exactly.
"""

import torch

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, scaled_scores, softmax_attention

NAME = "graph_spatial_bias"
DESCRIPTION = "no mask, score + spatial_bias[h, distance[b, q, k]] (Graphormer, 7 buckets)"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
SEQ_LENS = [1024, 2048]  # (the distances are B * S^2 elements)
DTYPES = ["bf16", "fp16"]
AUX_SHAPES = {"distance": ("B", "Sq", "Sk"), "spatial_bias": ("Hq", 7)}

MAX_DISTANCE = 5
AVERAGE_DEGREE = 4


def shortest_paths(adjacency):
    """[B, N, N] hop counts up to MAX_DISTANCE, MAX_DISTANCE + 1 beyond (by frontier
    expansion: one matrix product per hop)."""
    b, n, _ = adjacency.shape
    eye = torch.eye(n, dtype=torch.bool, device=adjacency.device).expand(b, n, n)
    dist = torch.full((b, n, n), MAX_DISTANCE + 1, dtype=torch.int32, device=adjacency.device)
    dist[eye] = 0
    reached, step = eye.clone(), adjacency.float()
    for hop in range(1, MAX_DISTANCE + 1):
        grown = (reached.float() @ step) > 0
        dist[grown & ~reached] = hop
        reached |= grown
    return dist


def make_aux(shape, generator, device):
    n = max(shape.sq, shape.sk)
    edges = torch.rand(shape.b, n, n, generator=generator) < AVERAGE_DEGREE / (2 * n)
    adjacency = (edges | edges.transpose(1, 2)).to(device)
    distance = shortest_paths(adjacency)[:, :shape.sq, :shape.sk].contiguous()
    bias = torch.randn(shape.hq, MAX_DISTANCE + 2, generator=generator)
    return {"distance": distance, "spatial_bias": bias.to(device)}


def reference(q, k, v, distance, spatial_bias):
    k, v = expand_kv(q, k, v)
    bias = spatial_bias.to(q.dtype)[:, distance.long()].transpose(0, 1)  # [B, Hq, Sq, Sk]
    scores = scaled_scores(q, k) + bias
    return softmax_attention(scores, torch.ones_like(scores, dtype=torch.bool), v)


def score_mod(score, b, h, q_idx, kv_idx, *, distance, spatial_bias):
    return score + spatial_bias[h, distance[b, q_idx, kv_idx]]
