"""Causal sigmoid attention with the bias b = -log(Sk) that Ramapuram et al.
(2024) recommend: weights sigmoid(score - log Sk), no normalisation. The bias
is one number per shape, a 0-d aux tensor (the peers get it as a constant)."""

import math

import torch

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import elementwise_attention, expand_kv, positions, scaled_scores

NAME = "sigmoid_log_bias"
DESCRIPTION = "causal, sigmoid(score - log Sk) instead of softmax, no normalisation"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16", "fp16"]
NORMALIZER = "sigmoid"
AUX_SHAPES = {"bias": ()}


def make_aux(shape, generator, device):
    return {"bias": torch.tensor(-math.log(shape.sk), dtype=torch.float32, device=device)}


def reference(q, k, v, bias):
    q_idx, kv_idx = positions(q, k)
    k, v = expand_kv(q, k, v)
    weights = torch.sigmoid(scaled_scores(q, k) + bias)
    return elementwise_attention(weights, q_idx >= kv_idx, v)


def mask_mod(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def score_mod(score, b, h, q_idx, kv_idx, *, bias):
    return score + bias
