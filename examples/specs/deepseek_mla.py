"""DeepSeek-V3's attention at prefill (MLA, decompressed): 128 heads, a QK head dim
of 192 (128 + 64 rotary dims, concatenated) and a V head dim of 128, causal. With
its mask written as a mask_mod it takes the rules path: fa_sm90 builds the 192/128
pair as it is. (examples/specs/mla.py states the same attention by its reference
alone, which takes the LLM path.)"""

from cubridge.attention import DEEPSEEK_V3
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "deepseek_mla"
DESCRIPTION = "causal, QK head dim 192, V head dim 128 (MLA prefill)"
CONFIGS = [DEEPSEEK_V3]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16", "fp16"]


def reference(q, k, v):
    q_idx, kv_idx = positions(q, k)
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), q_idx >= kv_idx, v)


def mask_mod(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx
