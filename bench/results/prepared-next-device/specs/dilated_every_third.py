"""A causal window of 2048 keys, dense over the last 64 and every third key beyond
(a dilated window of rate 3, Longformer's dilation at a rate that is not a power of
two)."""

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "dilated_every_third"
DESCRIPTION = "causal, q - k < 64, or q - k < 2048 and (q - k) % 3 == 0"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16", "fp16"]
WINDOW = 2048
DENSE = 64
RATE = 3


def reference(q, k, v):
    q_idx, kv_idx = positions(q, k)
    d = q_idx - kv_idx
    allowed = (d >= 0) & ((d < DENSE) | (d < WINDOW) & (d % RATE == 0))
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), allowed, v)


def mask_mod(b, h, q_idx, kv_idx):
    d = q_idx - kv_idx
    return (d >= 0) & ((d < DENSE) | (d < WINDOW) & (d % RATE == 0))
