"""Multi-query attention: causal, with a single key/value head shared by all
query heads (Hk = 1), at the query-head counts of Llama2-7B and Qwen2.5-72B."""

from cubridge.attention import HeadConfig
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "mqa"
DESCRIPTION = "causal, one KV head for all query heads"
CONFIGS = [HeadConfig("llama2_7b_mqa", 32, 1, 128), HeadConfig("qwen25_72b_mqa", 64, 1, 128)]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16", "fp16"]


def reference(q, k, v):
    q_idx, kv_idx = positions(q, k)
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), q_idx >= kv_idx, v)


def mask_mod(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx
