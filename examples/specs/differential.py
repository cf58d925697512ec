"""Differential attention (DIFF Transformer, Ye et al. 2024): the QK head dim
is split in two halves, each gives its own causal softmax map (scale
1/sqrt(D/2)), and the output is (A1 - lambda[h] * A2) V with V's full head
dim. Outside the hook family: two softmaxes over column halves of Q and K
(Tile.cols in CuIR), two running maxes and sums, 1.5x the matrix work. No
LSE: the output is not one softmax's."""

import math

import torch

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, softmax_attention

NAME = "differential"
DESCRIPTION = "causal (softmax(q1 k1^T) - lambda[h] softmax(q2 k2^T)) v over the halves of D"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16", "fp16"]
AUX_SHAPES = {"lam": ("Hq",)}


def make_aux(shape, generator, device):
    # lambda as the paper initialises it at depth: about 0.2 .. 0.8
    return {"lam": torch.empty(shape.hq).uniform_(0.2, 0.8, generator=generator).to(device)}


def reference(q, k, v, lam):
    q_idx, kv_idx = positions(q, k)
    k, v = expand_kv(q, k, v)
    half = q.shape[-1] // 2
    scale = 1.0 / math.sqrt(half)
    allowed = q_idx >= kv_idx
    a1, _ = softmax_attention((q[..., :half] @ k[..., :half].transpose(-1, -2)) * scale,
                              allowed, v)
    a2, _ = softmax_attention((q[..., half:] @ k[..., half:].transpose(-1, -2)) * scale,
                              allowed, v)
    return a1 - lam.to(a1.dtype)[:, None, None] * a2
