"""Causal softmax off by one ("quiet attention", softmax_1): the denominator is
1 + sum(exp(s)), as if every row had one more key of logit 0 and value 0, so
a head can attend to nothing. Outside the hook family: the extra 1 changes
the normaliser, not a score."""

import torch

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores

NAME = "softmax_one"
DESCRIPTION = "causal attention with softmax_1: exp(s) / (1 + sum exp(s))"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16", "fp16"]


def reference(q, k, v):
    q_idx, kv_idx = positions(q, k)
    k, v = expand_kv(q, k, v)
    scores = scaled_scores(q, k).masked_fill(~(q_idx >= kv_idx), float("-inf"))
    zero = torch.zeros(*scores.shape[:-1], 1, dtype=scores.dtype, device=scores.device)
    lse = torch.logsumexp(torch.cat([scores, zero], dim=-1), dim=-1)
    return torch.exp(scores - lse[..., None]) @ v, lse
