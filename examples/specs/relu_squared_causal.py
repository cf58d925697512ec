"""Causal attention with squared-ReLU weights: out = sum over k <= q of
relu(score)^2 * v, no normalisation (the score_mod relu(s) * s, then the relu
normaliser, which leaves it as it is)."""

import torch

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import elementwise_attention, expand_kv, positions, scaled_scores

NAME = "relu_squared_causal"
DESCRIPTION = "causal, relu(score)^2 instead of softmax, no normalisation"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16"]  # unnormalised sums of squared scores can exceed the fp16 range
NORMALIZER = "relu"


def reference(q, k, v):
    q_idx, kv_idx = positions(q, k)
    k, v = expand_kv(q, k, v)
    return elementwise_attention(torch.relu(scaled_scores(q, k)) ** 2, q_idx >= kv_idx, v)


def mask_mod(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def score_mod(score, b, h, q_idx, kv_idx):
    return torch.relu(score) * score
