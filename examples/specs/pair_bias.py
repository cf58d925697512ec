"""Attention with an additive pair bias in half precision: score + head_scale[h] *
bias[b, h, q, k], the bias a [B, Hq, Sq, Sk] bf16 tensor (a pair representation or a
per-layer relative bias as a model keeps it) and the per-head scale fp16. Hooks read
both widened to float32, as FlexAttention's type promotion does."""

import torch

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, scaled_scores, softmax_attention

NAME = "pair_bias"
DESCRIPTION = "no mask, score + head_scale[h] * bias[b, h, q, k] (bf16 bias, fp16 scale)"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
SEQ_LENS = [1024, 2048]  # (the bias is B * Hq * S^2 elements)
DTYPES = ["bf16", "fp16"]
AUX_SHAPES = {"bias": ("B", "Hq", "Sq", "Sk"), "head_scale": ("Hq",)}


def make_aux(shape, generator, device):
    bias = torch.randn(shape.b, shape.hq, shape.sq, shape.sk, generator=generator)
    scale = 0.5 + torch.rand(shape.hq, generator=generator)
    return {"bias": bias.to(device, torch.bfloat16),
            "head_scale": scale.to(device, torch.float16)}


def reference(q, k, v, bias, head_scale):
    k, v = expand_kv(q, k, v)
    term = head_scale.float()[:, None, None] * bias.float()  # float32, as the mods compute it
    scores = scaled_scores(q, k) + term.to(q.dtype)
    return softmax_attention(scores, torch.ones_like(scores, dtype=torch.bool), v)


def score_mod(score, b, h, q_idx, kv_idx, *, bias, head_scale):
    return score + head_scale[h] * bias[b, h, q_idx, kv_idx]
