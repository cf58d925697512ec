"""Graphormer's edge encoding: score + the mean over a pair's shortest path of a
weight learned per (head, hop, edge type).

Each position is a node of a graph. For every pair, `path_length` holds how many
hops of its shortest path are encoded (at most two, 0 for unreachable pairs and the
diagonal) and `path_types` the type of the edge at each of those hops (0 past the
path's end); the bias is edge_bias[h, hop, type] averaged over the encoded hops.
No mask. Here lengths and types are drawn at random with those invariants; a graph
library computes them from the graph (e.g. attention-gym's
`shortest_path_edge_types`), and the hooks see the same tensors.

Read per score, the term is three int32 reads and two gathers. The hooks read it as
one int16 code per pair and a table per (head, code), which the launcher builds
(docs/hooks.md, "Pair codes").
"""

import torch

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, scaled_scores, softmax_attention

NAME = "graph_edge_bias"
DESCRIPTION = ("no mask, score + mean over the shortest path's first two hops of "
               "edge_bias[h, hop, type] (Graphormer's edge encoding, 4 edge types)")
CONFIGS = [LLAMA2_7B, QWEN25_72B]
SEQ_LENS = [1024, 2048]  # (the paths are 3 B S^2 int32)
DTYPES = ["bf16", "fp16"]
AUX_SHAPES = {"path_length": ("B", "Sq", "Sk"), "path_types": ("B", "Sq", "Sk", 2),
              "edge_bias": ("Hq", 2, 4)}

HOPS = 2
EDGE_TYPES = 4


def make_aux(shape, generator, device):
    size = (shape.b, shape.sq, shape.sk)
    length = torch.randint(0, HOPS + 1, size, generator=generator, dtype=torch.int32)
    types = torch.randint(0, EDGE_TYPES, (*size, HOPS), generator=generator, dtype=torch.int32)
    types[length.unsqueeze(-1) <= torch.arange(HOPS)] = 0  # no edge past the path's end
    bias = torch.randn(shape.hq, HOPS, EDGE_TYPES, generator=generator)
    return {"path_length": length.to(device), "path_types": types.to(device),
            "edge_bias": bias.to(device)}


def reference(q, k, v, path_length, path_types, edge_bias):
    k, v = expand_kv(q, k, v)
    length = path_length.long().unsqueeze(1)  # [B, 1, Sq, Sk]
    total = 0.0
    for hop in range(HOPS):
        weight = edge_bias.to(q.dtype)[:, hop][:, path_types[..., hop].long()]  # [Hq, B, Sq, Sk]
        total = total + torch.where(length > hop, weight.transpose(0, 1), 0.0)
    scores = scaled_scores(q, k) + total / length.clamp(min=1)
    return softmax_attention(scores, torch.ones_like(scores, dtype=torch.bool), v)


def score_mod(score, b, h, q_idx, kv_idx, *, path_length, path_types, edge_bias):
    length = path_length[b, q_idx, kv_idx]
    first = torch.where(length > 0, edge_bias[h, 0, path_types[b, q_idx, kv_idx, 0]], 0.0)
    second = torch.where(length > 1, edge_bias[h, 1, path_types[b, q_idx, kv_idx, 1]], 0.0)
    return score + (first + second) / torch.clamp(length, min=1)
