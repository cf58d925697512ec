"""MLA-style attention (DeepSeek-V2/V3 prefill shape): the query/key head dim
is 192 (128 "nope" + 64 rotary dims, already concatenated) and the value head
dim is 128, causal softmax with the usual 1/sqrt(192) scale. Outside the hook
family: the QK and PV head dims differ, which changes tile shapes and shared
memory, not a hook."""

from cubridge.attention import HeadConfig
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "mla"
DESCRIPTION = "causal softmax attention, QK head dim 192, V head dim 128 (MLA prefill)"
# Decompressed MLA heads are MHA (every query head has its own K/V head); the
# second config checks the GQA mapping too.
CONFIGS = [HeadConfig("mla_16h", 16, 16, 192, 128), HeadConfig("mla_gqa4", 16, 4, 192, 128)]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16", "fp16"]


def reference(q, k, v):
    q_idx, kv_idx = positions(q, k)
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), q_idx >= kv_idx, v)
