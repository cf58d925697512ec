"""Causal ReLU attention: out = sum over k <= q of relu(score) * v, with no
softmax and no normalisation (so no LSE)."""

import torch

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import elementwise_attention, expand_kv, positions, scaled_scores

NAME = "relu_causal"
DESCRIPTION = "causal, relu(score) instead of softmax, no normalisation"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16"]  # unnormalised sums of large scores can exceed the fp16 range
NORMALIZER = "relu"


def reference(q, k, v):
    q_idx, kv_idx = positions(q, k)
    k, v = expand_kv(q, k, v)
    return elementwise_attention(torch.relu(scaled_scores(q, k)), q_idx >= kv_idx, v)


def mask_mod(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx
