"""Causal attention with a per-query output gate (gated attention, Qiu et al.
2025): each output row is multiplied by sigmoid(gate[b, h, i]), a gate the
model computes from the query token. Outside the hook family: the gate scales
the normalised output, after the softmax, which no score hook reaches."""

import torch

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "gated_output"
DESCRIPTION = "causal softmax attention, output row i scaled by sigmoid(gate[b, h, i])"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16", "fp16"]
AUX_SHAPES = {"gate": ("B", "Hq", "Sq")}


def make_aux(shape, generator, device):
    gate = torch.randn(shape.b, shape.hq, shape.sq, generator=generator) * 2.0
    return {"gate": gate.to(device)}


def reference(q, k, v, gate):
    q_idx, kv_idx = positions(q, k)
    k, v = expand_kv(q, k, v)
    out, lse = softmax_attention(scaled_scores(q, k), q_idx >= kv_idx, v)
    return out * torch.sigmoid(gate.to(out.dtype))[..., None], lse
