"""BigBird (ITC): 64-token blocks; a query block sees its neighbour blocks
(|qb - kb| <= 1), the first block is global (sees and is seen by all), and each
head has random key blocks from an aux bool table [Hq, nqb, nkb] (~3 per row)."""

import torch

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "bigbird"
DESCRIPTION = "block window 3 + global first block + random blocks per head"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
SEQ_LENS = [1024, 4096]
DTYPES = ["bf16", "fp16"]
BLOCK = 64
AUX_SHAPES = {"rand_blocks": ("Hq", "(Sq + 63) // 64", "(Sk + 63) // 64")}


def make_aux(shape, generator, device):
    nqb = (shape.sq + BLOCK - 1) // BLOCK
    nkb = (shape.sk + BLOCK - 1) // BLOCK
    p = min(1.0, 3.0 / nkb)
    table = torch.rand(shape.hq, nqb, nkb, generator=generator) < p
    return {"rand_blocks": table.to(device)}


def allowed_blocks(qb, kb, h, rand_blocks):
    return ((qb - kb).abs() <= 1) | (qb == 0) | (kb == 0) | rand_blocks[h, qb, kb]


def reference(q, k, v, rand_blocks):
    q_idx, kv_idx = positions(q, k)
    qb, kb = q_idx // BLOCK, kv_idx // BLOCK          # [Sq,1], [1,Sk]
    hq = q.shape[1]
    h = torch.arange(hq)[:, None, None]
    allowed = allowed_blocks(qb[None], kb[None], h, rand_blocks)  # [Hq, Sq, Sk]
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), allowed[None], v)


def mask_mod(b, h, q_idx, kv_idx, *, rand_blocks):
    qb = q_idx // BLOCK
    kb = kv_idx // BLOCK
    return ((qb - kb).abs() <= 1) | (qb == 0) | (kb == 0) | rand_blocks[h, qb, kb]
