"""Prefix-LM over padded batches: each row has its own prefix length (bidirectional)
and its own sequence length (keys past it are padding)."""

import torch

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "prefix_padding_per_batch"
DESCRIPTION = "(k < prefix[b] or q >= k) and k < length[b]"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
DTYPES = ["bf16"]
AUX_SHAPES = {"prefix": ("B",), "length": ("B",)}


def make_aux(shape, generator, device):
    length = torch.randint(shape.sk // 2, shape.sk + 1, (shape.b,), generator=generator)
    prefix = (torch.rand(shape.b, generator=generator) * length).long()
    return {"prefix": prefix.to(device), "length": length.to(device)}


def reference(q, k, v, prefix, length):
    qi, ki = positions(q, k)
    p = prefix[:, None, None, None]
    n = length[:, None, None, None]
    allowed = ((ki < p) | (qi >= ki)) & (ki < n)
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), allowed, v)


def mask_mod(b, h, q_idx, kv_idx, *, prefix, length):
    return ((kv_idx < prefix[b]) | (q_idx >= kv_idx)) & (kv_idx < length[b])
