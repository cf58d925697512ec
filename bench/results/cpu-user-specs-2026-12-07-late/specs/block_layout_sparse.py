"""Block-sparse attention from a per-head layout of 128 x 128 blocks (as MInference or
a Flex BlockMask user builds one): a random half of the causal blocks plus the
diagonal, causal inside them."""

import torch

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "block_layout_sparse"
DESCRIPTION = "causal within the 128 x 128 blocks a per-head layout keeps"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
DTYPES = ["bf16"]
BLOCK = 128
AUX_SHAPES = {"layout": ("Hq", "Sq // 128 + 1", "Sk // 128 + 1")}


def make_aux(shape, generator, device):
    nq, nk = shape.sq // BLOCK + 1, shape.sk // BLOCK + 1
    keep = torch.rand(shape.hq, nq, nk, generator=generator) < 0.5
    keep |= torch.eye(nq, nk, dtype=torch.bool)[None]
    return {"layout": keep.to(device)}


def reference(q, k, v, layout):
    qi, ki = positions(q, k)
    qb = torch.arange(q.shape[2], device=q.device) // BLOCK
    kb = torch.arange(k.shape[2], device=q.device) // BLOCK
    lay = layout[:, qb][:, :, kb][None]  # [1, H, Sq, Sk]
    allowed = (qi >= ki) & lay
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), allowed, v)


def mask_mod(b, h, q_idx, kv_idx, *, layout):
    return (q_idx >= kv_idx) & layout[h, q_idx // BLOCK, kv_idx // BLOCK]
