"""Causal attention with a learned relative-position bias per head:
score + table[h, q - k + Sk - 1].

The table has one entry per distance q - k in [-(Sk - 1), Sq - 1], so
Sq + Sk - 1 columns; rel_offset (= Sk - 1) maps a distance to its column.
"""

import torch

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "relative_position"
DESCRIPTION = "causal, score + table[h, q - k + S - 1] (learned table)"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16", "fp16"]
AUX_SHAPES = {"rel_table": ("Hq", "Sq + Sk - 1"), "rel_offset": ()}


def make_aux(shape, generator, device):
    table = torch.randn(shape.hq, shape.sq + shape.sk - 1, generator=generator)
    return {"rel_table": table.to(device), "rel_offset": torch.tensor(shape.sk - 1, device=device)}


def reference(q, k, v, rel_table, rel_offset):
    q_idx, kv_idx = positions(q, k)
    k, v = expand_kv(q, k, v)
    bias = rel_table.to(q.dtype)[:, q_idx - kv_idx + rel_offset]  # [Hq, Sq, Sk]
    return softmax_attention(scaled_scores(q, k) + bias, q_idx >= kv_idx, v)


def mask_mod(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def score_mod(score, b, h, q_idx, kv_idx, *, rel_table, rel_offset):
    return score + rel_table[h, q_idx - kv_idx + rel_offset]
