"""Every key outside the query's own 64-block (a 'cross-block only' mask), causal."""
from cubridge.attention import LLAMA2_7B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "block_diagonal_complement"
CONFIGS = [LLAMA2_7B]
DTYPES = ["bf16"]


def reference(q, k, v):
    qi, ki = positions(q, k)
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), (qi >= ki) & (qi // 64 != ki // 64), v)


def mask_mod(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx // 64 != kv_idx // 64)
