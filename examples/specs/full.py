"""Standard (bidirectional) attention: every query sees every key."""

import torch

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, scaled_scores, softmax_attention

NAME = "full"
DESCRIPTION = "full attention, no mask"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16", "fp16"]


def reference(q, k, v):
    k, v = expand_kv(q, k, v)
    scores = scaled_scores(q, k)
    allowed = torch.ones_like(scores, dtype=torch.bool)
    return softmax_attention(scores, allowed, v)
