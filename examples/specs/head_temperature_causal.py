"""Causal attention with a learned temperature per head: each head's scores are
multiplied by its own t[h] before the softmax, letting heads sharpen or flatten
their attention independently of the 1 / sqrt(D) scale."""

import torch

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "head_temperature_causal"
DESCRIPTION = "causal, score * t[h] (a learned temperature per head)"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16", "fp16"]
AUX_SHAPES = {"temperature": ("Hq",)}


def make_aux(shape, generator, device):
    # trained temperatures stay near 1
    return {"temperature": torch.empty(shape.hq).uniform_(0.8, 1.25, generator=generator)
            .to(device)}


def reference(q, k, v, temperature):
    q_idx, kv_idx = positions(q, k)
    k, v = expand_kv(q, k, v)
    scores = scaled_scores(q, k) * temperature.to(q.dtype)[:, None, None]
    return softmax_attention(scores, q_idx >= kv_idx, v)


def mask_mod(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def score_mod(score, b, h, q_idx, kv_idx, *, temperature):
    return score * temperature[h]
