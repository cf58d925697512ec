"""Causal attention gated by a block-level segment table (one int per 64 positions,
indexed by q_idx // 64 and kv_idx // 64), with a per-head window from a 1-d aux."""
import math

import torch
import torch.nn.functional as F

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "block_table_causal"
DESCRIPTION = "causal, seg[q // 64] == seg[k // 64] and q - k < win[h]"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16", "fp16"]
AUX_SHAPES = {"blk_seg": ("(Sq + Sk) // 64 + 1",), "win": ("Hq",)}


def make_aux(shape, generator, device):
    nblk = (shape.sq + shape.sk) // 64 + 1
    starts = (torch.rand(nblk, generator=generator) < 0.15).to(torch.int32)
    seg = torch.cumsum(starts, 0).to(torch.int32)
    win = torch.randint(128, 2048, (shape.hq,), generator=generator).to(torch.int32)
    return {"blk_seg": seg.to(device), "win": win.to(device)}


def reference(q, k, v, blk_seg, win):
    q_idx, kv_idx = positions(q, k)
    same = blk_seg[q_idx // 64] == blk_seg[kv_idx // 64]  # [Sq, Sk]
    allowed = (q_idx >= kv_idx) & same & (q_idx - kv_idx < win[:, None, None])
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), allowed, v)


def mask_mod(b, h, q_idx, kv_idx, *, blk_seg, win):
    return (q_idx >= kv_idx) & (blk_seg[q_idx // 64] == blk_seg[kv_idx // 64]) & (q_idx - kv_idx < win[h])
