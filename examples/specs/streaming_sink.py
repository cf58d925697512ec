"""StreamingLLM-style attention: causal, a query sees the 4 first keys (the
attention sinks) and the 512 most recent ones."""

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "streaming_sink"
DESCRIPTION = "causal and (k < 4 or q - k < 512)"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
SEQ_LENS = [2048, 4096, 8192]
DTYPES = ["bf16", "fp16"]
SINKS = 4
WINDOW = 512


def reference(q, k, v):
    q_idx, kv_idx = positions(q, k)
    allowed = (q_idx >= kv_idx) & ((kv_idx < SINKS) | (q_idx - kv_idx < WINDOW))
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), allowed, v)


def mask_mod(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & ((kv_idx < SINKS) | (q_idx - kv_idx < WINDOW))
