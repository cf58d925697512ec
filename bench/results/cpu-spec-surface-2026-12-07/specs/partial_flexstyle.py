"""FlexAttention-style partial: positional param bound by keyword"""
import functools
from cubridge.attention import HeadConfig
CONFIGS = [HeadConfig("p", 8, 8, 128)]
def sliding(b, h, q_idx, kv_idx, window):
    return (q_idx >= kv_idx) & (q_idx - kv_idx < window)
mask_mod = functools.partial(sliding, window=200)
