"""Prefix LM: the first S/4 keys are visible to every query; the rest is causal.

S is the key length Sk; the prefix length comes as a 0-d aux tensor so that the
mask stays a FlexAttention-style function the CUDA hook generator can read.
"""

import torch

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "prefix_lm"
DESCRIPTION = "causal or k < S/4"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16", "fp16"]
AUX_SHAPES = {"prefix_len": ()}


def make_aux(shape, generator, device):
    return {"prefix_len": torch.tensor(shape.sk // 4, device=device)}


def reference(q, k, v, prefix_len):
    q_idx, kv_idx = positions(q, k)
    allowed = (q_idx >= kv_idx) | (kv_idx < prefix_len)
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), allowed, v)


def mask_mod(b, h, q_idx, kv_idx, *, prefix_len):
    return (q_idx >= kv_idx) | (kv_idx < prefix_len)
