"""Sparse Transformer (strided) pattern with torch.fmod: causal, the last 128 keys or
every 128th key back from the query."""
import math

import torch
import torch.nn.functional as F

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "fmod_strided_causal"
DESCRIPTION = "causal and (q - k < 128 or fmod(q - k, 128) == 0)"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16", "fp16"]
STRIDE = 128


def reference(q, k, v):
    q_idx, kv_idx = positions(q, k)
    d = q_idx - kv_idx
    allowed = (d >= 0) & ((d < STRIDE) | (d % STRIDE == 0))
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), allowed, v)


def mask_mod(b, h, q_idx, kv_idx):
    d = q_idx - kv_idx
    return (d >= 0) & ((d < STRIDE) | (torch.fmod(d, STRIDE) == 0))
