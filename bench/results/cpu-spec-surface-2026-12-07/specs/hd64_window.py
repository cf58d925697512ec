"""head dim 64 sliding window, mods only (no reference)"""
from cubridge.attention import HeadConfig
CONFIGS = [HeadConfig("hd64", 16, 16, 64)]
DTYPES = ["bf16"]
W = 256
def mask_mod(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx < W)
