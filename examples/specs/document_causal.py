"""Causal attention within packed documents: each batch row packs documents of
ragged lengths drawn in [S/8, S/2) (S = max(Sq, Sk)); a query sees earlier keys
of its own document only.

Document ids come per position as aux tensors, for queries and keys
separately so that Sq != Sk works; a query whose document starts at or after
Sk has no allowed key.
"""

import torch

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "document_causal"
DESCRIPTION = "causal within packed documents of ragged lengths in [S/8, S/2)"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16", "fp16"]
AUX_SHAPES = {"q_doc": ("B", "Sq"), "kv_doc": ("B", "Sk")}


def document_ids(length, batch, generator):
    """[batch, length] ids 0, 0, ..., 1, 1, ... with ragged document lengths."""
    low = max(1, length // 8)
    high = max(low + 1, length // 2)
    rows = []
    for _ in range(batch):
        sizes = []
        while sum(sizes) < length:
            sizes.append(int(torch.randint(low, high, (1,), generator=generator)))
        ids = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
        rows.append(ids[:length])
    return torch.stack(rows)


def make_aux(shape, generator, device):
    ids = document_ids(max(shape.sq, shape.sk), shape.b, generator).to(device)
    return {"q_doc": ids[:, : shape.sq].contiguous(), "kv_doc": ids[:, : shape.sk].contiguous()}


def reference(q, k, v, q_doc, kv_doc):
    q_idx, kv_idx = positions(q, k)
    same_doc = q_doc[:, None, :, None] == kv_doc[:, None, None, :]  # [B, 1, Sq, Sk]
    allowed = (q_idx >= kv_idx) & same_doc
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), allowed, v)


def mask_mod(b, h, q_idx, kv_idx, *, q_doc, kv_doc):
    return (q_idx >= kv_idx) & (q_doc[b, q_idx] == kv_doc[b, kv_idx])
