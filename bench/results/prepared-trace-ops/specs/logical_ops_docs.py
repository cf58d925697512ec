"""Bidirectional attention within documents plus causal across a shared system prompt,
written with torch.eq/ne/lt, .logical_and, torch.logical_or, torch.logical_xor and
__invert__."""
import math

import torch
import torch.nn.functional as F

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "logical_ops_docs"
DESCRIPTION = "same doc (bidirectional) or (k < 64 and q >= k), excluding doc-0-only xor"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16", "fp16"]
AUX_SHAPES = {"q_doc": ("B", "Sq"), "kv_doc": ("B", "Sk")}
SYS = 64


def make_aux(shape, generator, device):
    n = max(shape.sq, shape.sk)
    rows = []
    for _ in range(shape.b):
        cuts = torch.randint(1, max(2, n), (3,), generator=generator).sort().values
        ids = torch.zeros(n, dtype=torch.int32)
        for c in cuts:
            ids[int(c):] += 1
        rows.append(ids)
    ids = torch.stack(rows).to(device)
    return {"q_doc": ids[:, : shape.sq].contiguous(), "kv_doc": ids[:, : shape.sk].contiguous()}


def reference(q, k, v, q_doc, kv_doc):
    q_idx, kv_idx = positions(q, k)
    same = q_doc[:, None, :, None] == kv_doc[:, None, None, :]
    sys_key = (kv_idx < SYS) & (q_idx >= kv_idx)
    allowed = same | sys_key
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), allowed, v)


def mask_mod(b, h, q_idx, kv_idx, *, q_doc, kv_doc):
    same = torch.eq(q_doc[b, q_idx], kv_doc[b, kv_idx])
    sys_key = torch.lt(kv_idx, SYS).logical_and(torch.lt(q_idx, kv_idx).__invert__())
    # same | sys_key, spelled (same xor sys_key) or (same and sys_key)
    return torch.logical_or(torch.logical_xor(same, sys_key), same.logical_and(sys_key))
