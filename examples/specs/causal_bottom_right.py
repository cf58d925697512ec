"""Causal attention aligned at the bottom right, as in chunked prefill and
decoding: the Sq queries are the last Sq positions of the Sk keys, so query q
sees keys k <= q + (Sk - Sq). The offset is one number per shape, passed as a
0-d aux tensor (the peers get it as a Python constant)."""

import torch

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "causal_bottom_right"
DESCRIPTION = "causal aligned at the bottom right: q + (Sk - Sq) >= k"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16", "fp16"]
AUX_SHAPES = {"offset": ()}


def make_aux(shape, generator, device):
    return {"offset": torch.tensor(shape.sk - shape.sq, dtype=torch.int32, device=device)}


def reference(q, k, v, offset):
    q_idx, kv_idx = positions(q, k)
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), q_idx + offset >= kv_idx, v)


def mask_mod(b, h, q_idx, kv_idx, *, offset):
    return q_idx + offset >= kv_idx
