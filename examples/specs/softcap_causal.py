"""Causal attention with a tanh soft cap on the scores: 30 * tanh(score / 30)."""

import torch

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "softcap_causal"
DESCRIPTION = "causal, 30 * tanh(score / 30)"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16", "fp16"]
SOFTCAP = 30.0


def reference(q, k, v):
    q_idx, kv_idx = positions(q, k)
    k, v = expand_kv(q, k, v)
    scores = SOFTCAP * torch.tanh(scaled_scores(q, k) / SOFTCAP)
    return softmax_attention(scores, q_idx >= kv_idx, v)


def mask_mod(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def score_mod(score, b, h, q_idx, kv_idx):
    return SOFTCAP * torch.tanh(score / SOFTCAP)
