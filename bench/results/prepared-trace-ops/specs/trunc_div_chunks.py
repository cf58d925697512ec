"""Chunked causal attention, chunk index written with torch.div(..., rounding_mode="trunc")."""
import math

import torch
import torch.nn.functional as F

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "trunc_div_chunks"
DESCRIPTION = "causal within chunks of 256, chunk = torch.div(i, 256, rounding_mode='trunc')"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16", "fp16"]
CHUNK = 256


def reference(q, k, v):
    q_idx, kv_idx = positions(q, k)
    allowed = (q_idx >= kv_idx) & (q_idx // CHUNK == kv_idx // CHUNK)
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), allowed, v)


def mask_mod(b, h, q_idx, kv_idx):
    same = torch.div(q_idx, CHUNK, rounding_mode="trunc") == torch.div(kv_idx, CHUNK, rounding_mode="trunc")
    return same & (q_idx >= kv_idx)
