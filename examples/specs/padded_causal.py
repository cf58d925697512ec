"""Causal attention over right-padded batches: row b holds kv_len[b] real
tokens, the rest is padding that no query may see (a query past kv_len[b]
still sees the real tokens, as a causal SDPA with a key padding mask does)."""

import torch

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "padded_causal"
DESCRIPTION = "causal and k < kv_len[b] (right padding, lengths in [S/4, S])"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16", "fp16"]
AUX_SHAPES = {"kv_len": ("B",)}


def make_aux(shape, generator, device):
    low = max(1, shape.sk // 4)
    lengths = torch.randint(low, shape.sk + 1, (shape.b,), generator=generator)
    return {"kv_len": lengths.to(torch.int32).to(device)}


def reference(q, k, v, kv_len):
    q_idx, kv_idx = positions(q, k)
    real = kv_idx[None] < kv_len.view(-1, 1, 1)  # [B, 1, Sk]
    allowed = (q_idx >= kv_idx)[None, None] & real[:, None]  # [B, 1, Sq, Sk]
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), allowed, v)


def mask_mod(b, h, q_idx, kv_idx, *, kv_len):
    return (q_idx >= kv_idx) & (kv_idx < kv_len[b])
