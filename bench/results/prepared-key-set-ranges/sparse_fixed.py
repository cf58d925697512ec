"""Sparse Transformer's "fixed" attention (Child et al. 2019): causal; each query sees
the keys of its own block of 128 and the last 16 keys of every block (summary keys)."""

import torch

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "sparse_fixed"
DESCRIPTION = "causal; q // 128 == k // 128 or k % 128 >= 112"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16"]
BLOCK, SUMMARY = 128, 16


def reference(q, k, v):
    q_idx, kv_idx = positions(q, k)
    allowed = (q_idx >= kv_idx) & ((q_idx // BLOCK == kv_idx // BLOCK) |
                                   (kv_idx % BLOCK >= BLOCK - SUMMARY))
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), allowed, v)


def mask_mod(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & ((q_idx // BLOCK == kv_idx // BLOCK) |
                                (kv_idx % BLOCK >= BLOCK - SUMMARY))
