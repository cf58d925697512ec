"""Chunked local attention (Llama 4's local layers): the sequence is cut into
chunks of 2048 positions and a query sees the earlier keys of its own chunk."""

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "chunked_causal"
DESCRIPTION = "causal within chunks of 2048 positions (q // 2048 == k // 2048)"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
SEQ_LENS = [4096, 8192]
DTYPES = ["bf16", "fp16"]
CHUNK = 2048


def reference(q, k, v):
    q_idx, kv_idx = positions(q, k)
    allowed = (q_idx >= kv_idx) & (q_idx // CHUNK == kv_idx // CHUNK)
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), allowed, v)


def mask_mod(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx // CHUNK == kv_idx // CHUNK)
