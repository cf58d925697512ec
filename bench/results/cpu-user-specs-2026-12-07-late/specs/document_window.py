"""Packed documents with a sliding window inside each: causal, same document, and at
most 512 keys back."""

import torch

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "document_window"
DESCRIPTION = "causal within packed documents, q - k < 512"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
DTYPES = ["bf16"]
SELF_ATTENTION = True
AUX_SHAPES = {"doc": ("B", "S")}
WINDOW = 512


def make_aux(shape, generator, device):
    s = shape.sk
    lens = torch.randint(s // 8, s // 2 + 1, (shape.b, 16), generator=generator)
    starts = torch.cumsum(lens, dim=1)
    doc = (torch.arange(s)[None, :, None] >= starts[:, None, :]).sum(-1)
    return {"doc": doc.to(torch.int32).to(device)}


def reference(q, k, v, doc):
    qi, ki = positions(q, k)
    dq = doc[:, None, :q.shape[2], None]
    dk = doc[:, None, None, :k.shape[2]]
    allowed = (dq == dk) & (qi >= ki) & (qi - ki < WINDOW)
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), allowed, v)


def mask_mod(b, h, q_idx, kv_idx, *, doc):
    return (doc[b, q_idx] == doc[b, kv_idx]) & (q_idx >= kv_idx) & (q_idx - kv_idx < WINDOW)
