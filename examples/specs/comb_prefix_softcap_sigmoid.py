"""A combination: the prefix-LM mask (causal or k < S/4), a tanh soft cap of 30
on the scores, and a sigmoid normaliser: out = sum of sigmoid(30 tanh(s / 30)) v
over allowed keys (no LSE)."""

import torch

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import elementwise_attention, expand_kv, positions, scaled_scores

NAME = "comb_prefix_softcap_sigmoid"
DESCRIPTION = "prefix_lm mask, softcap 30, sigmoid normaliser"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16", "fp16"]
NORMALIZER = "sigmoid"
SOFTCAP = 30.0
AUX_SHAPES = {"prefix_len": ()}


def make_aux(shape, generator, device):
    return {"prefix_len": torch.tensor(shape.sk // 4, device=device)}


def reference(q, k, v, prefix_len):
    q_idx, kv_idx = positions(q, k)
    k, v = expand_kv(q, k, v)
    weights = torch.sigmoid(SOFTCAP * torch.tanh(scaled_scores(q, k) / SOFTCAP))
    return elementwise_attention(weights, (q_idx >= kv_idx) | (kv_idx < prefix_len), v)


def mask_mod(b, h, q_idx, kv_idx, *, prefix_len):
    return (q_idx >= kv_idx) | (kv_idx < prefix_len)


def score_mod(score, b, h, q_idx, kv_idx):
    return SOFTCAP * torch.tanh(score / SOFTCAP)
