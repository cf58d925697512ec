"""Shared question: a question of S/4 tokens followed by answers of S/8 tokens
each (S = max(Sq, Sk)). Attention is causal; every answer sees the question
and itself, never another answer.

Positions carry a segment id (0 for the question, 1, 2, ... for the answers)
as aux tensors, for queries and keys separately so that Sq != Sk works.
"""

import torch

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "share_question"
DESCRIPTION = "causal; question of S/4 tokens shared by answers of S/8 tokens"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16", "fp16"]
AUX_SHAPES = {"q_segment": ("Sq",), "kv_segment": ("Sk",)}


def segment_ids(length):
    question = max(1, length // 4)
    answer = max(1, length // 8)
    pos = torch.arange(length)
    return torch.where(pos < question, 0, 1 + (pos - question) // answer)


def make_aux(shape, generator, device):
    ids = segment_ids(max(shape.sq, shape.sk)).to(device)
    return {"q_segment": ids[: shape.sq].clone(), "kv_segment": ids[: shape.sk].clone()}


def reference(q, k, v, q_segment, kv_segment):
    q_idx, kv_idx = positions(q, k)
    visible = (kv_segment[None, :] == 0) | (q_segment[:, None] == kv_segment[None, :])
    allowed = (q_idx >= kv_idx) & visible
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), allowed, v)


def mask_mod(b, h, q_idx, kv_idx, *, q_segment, kv_segment):
    visible = (kv_segment[kv_idx] == 0) | (q_segment[q_idx] == kv_segment[kv_idx])
    return (q_idx >= kv_idx) & visible
