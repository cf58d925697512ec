"""Causal attention with Scalable-Softmax (SSMax, Nakanishi 2025): each query's
scores are multiplied by s[h] * log(n), n the number of keys it attends to
(q + 1 under the causal mask), so that attention does not flatten as the
context grows. s is a learned per-head parameter."""

import torch

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "scalable_softmax_causal"
DESCRIPTION = "causal, score * s[h] * log(q + 1) (SSMax)"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16", "fp16"]
AUX_SHAPES = {"ssmax_scale": ("Hq",)}


def make_aux(shape, generator, device):
    # learned scales sit near the paper's initial 0.43
    return {"ssmax_scale": torch.empty(shape.hq).uniform_(0.3, 0.6, generator=generator)
            .to(device)}


def reference(q, k, v, ssmax_scale):
    q_idx, kv_idx = positions(q, k)
    k, v = expand_kv(q, k, v)
    factor = (ssmax_scale[:, None, None] * torch.log(q_idx + 1.0)).to(q.dtype)
    return softmax_attention(scaled_scores(q, k) * factor, q_idx >= kv_idx, v)


def mask_mod(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def score_mod(score, b, h, q_idx, kv_idx, *, ssmax_scale):
    return score * (ssmax_scale[h] * torch.log(q_idx + 1.0))
