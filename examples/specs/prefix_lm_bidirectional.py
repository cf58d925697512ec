"""Non-causal prefix LM: the prefix (first S/4 positions) is encoded on its own,
bidirectionally; every later query sees the whole sequence, no causal mask.

S is the key length Sk; the prefix length comes as a 0-d aux tensor.
"""

import torch

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "prefix_lm_bidirectional"
DESCRIPTION = "k < S/4 or q >= S/4 (prefix sees only itself, the rest sees all)"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16", "fp16"]
AUX_SHAPES = {"prefix_len": ()}


def make_aux(shape, generator, device):
    return {"prefix_len": torch.tensor(shape.sk // 4, device=device)}


def reference(q, k, v, prefix_len):
    q_idx, kv_idx = positions(q, k)
    allowed = (kv_idx < prefix_len) | (q_idx >= prefix_len)
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), allowed, v)


def mask_mod(b, h, q_idx, kv_idx, *, prefix_len):
    return (kv_idx < prefix_len) | (q_idx >= prefix_len)
