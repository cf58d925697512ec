"""Causal attention with a learnable per-head sink logit (gpt-oss style): every
softmax denominator also holds exp(sink[h]), so a row may give weight to no
key at all. Outside the hook family: the sink is not a score of any (q, k)
pair, so no score_mod or mask can add it; it changes the normaliser."""

import torch

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores

NAME = "learnable_sink"
DESCRIPTION = "causal softmax whose denominator also holds exp(sink[h]), a learned per-head logit"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16", "fp16"]
AUX_SHAPES = {"sink": ("Hq",)}


def make_aux(shape, generator, device):
    # trained sinks sit around the scores' own range
    return {"sink": torch.empty(shape.hq).uniform_(-2.0, 4.0, generator=generator).to(device)}


def reference(q, k, v, sink):
    q_idx, kv_idx = positions(q, k)
    k, v = expand_kv(q, k, v)
    scores = scaled_scores(q, k).masked_fill(~(q_idx >= kv_idx), float("-inf"))
    sinks = sink.to(scores.dtype)[None, :, None, None].expand(*scores.shape[:-1], 1)
    lse = torch.logsumexp(torch.cat([scores, sinks], dim=-1), dim=-1)
    return torch.exp(scores - lse[..., None]) @ v, lse
