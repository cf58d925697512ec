"""What every library kernel computes with its default hooks (each entry's
metadata.json names this spec): standard softmax attention (bidirectional;
causal=True is the variant examples/specs/causal.py), returning out and the
natural-log LSE, for head dims 64 and 128, with GQA."""

import torch

from cubridge.attention import LLAMA2_7B, QWEN25_72B, HeadConfig
from cubridge.spec.helpers import expand_kv, scaled_scores, softmax_attention

NAME = "standard_attention"
DESCRIPTION = "standard softmax attention (the library kernels' default hooks)"
CONFIGS = [LLAMA2_7B, QWEN25_72B, HeadConfig("gqa4_d64", 16, 4, 64)]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16", "fp16"]


def reference(q, k, v):
    k, v = expand_kv(q, k, v)
    scores = scaled_scores(q, k)
    allowed = torch.ones(scores.shape[-2:], dtype=torch.bool, device=scores.device)
    return softmax_attention(scores, allowed, v)
