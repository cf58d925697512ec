"""Block-causal attention: positions form blocks of 512; a query sees every key
of its own block and of earlier blocks."""

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "causal_blockwise"
DESCRIPTION = "k // 512 <= q // 512"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16", "fp16"]
BLOCK = 512


def reference(q, k, v):
    q_idx, kv_idx = positions(q, k)
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), kv_idx // BLOCK <= q_idx // BLOCK, v)


def mask_mod(b, h, q_idx, kv_idx):
    return kv_idx // BLOCK <= q_idx // BLOCK
