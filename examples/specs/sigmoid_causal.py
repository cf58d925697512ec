"""Causal sigmoid attention: out = sum over k <= q of sigmoid(score - log S) * v
(no softmax, no LSE). S is the key length Sk; log S comes as a 0-d aux."""

import math

import torch

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import elementwise_attention, expand_kv, positions, scaled_scores

NAME = "sigmoid_causal"
DESCRIPTION = "causal, sigmoid(score - log S) instead of softmax"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16", "fp16"]
NORMALIZER = "sigmoid"
AUX_SHAPES = {"log_seq_len": ()}


def make_aux(shape, generator, device):
    return {"log_seq_len": torch.tensor(math.log(shape.sk), dtype=torch.float32, device=device)}


def reference(q, k, v, log_seq_len):
    q_idx, kv_idx = positions(q, k)
    k, v = expand_kv(q, k, v)
    weights = torch.sigmoid(scaled_scores(q, k) - log_seq_len.to(q.dtype))
    return elementwise_attention(weights, q_idx >= kv_idx, v)


def mask_mod(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def score_mod(score, b, h, q_idx, kv_idx, *, log_seq_len):
    return score - log_seq_len
