"""Prefix LM with a prefix of 384 keys, the prefix branch written as
torch.ones_like(q_idx, dtype=torch.bool) inside torch.where."""
import math

import torch
import torch.nn.functional as F

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "ones_like_prefix"
DESCRIPTION = "where(k < 384, ones_like(q, dtype=bool), q >= k)"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16", "fp16"]
PREFIX = 384


def reference(q, k, v):
    q_idx, kv_idx = positions(q, k)
    allowed = (kv_idx < PREFIX) | (q_idx >= kv_idx)
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), allowed, v)


def mask_mod(b, h, q_idx, kv_idx):
    return torch.where(kv_idx < PREFIX, torch.ones_like(q_idx, dtype=torch.bool), q_idx >= kv_idx)
