from cubridge.attention import HeadConfig
CONFIGS = [HeadConfig("qk128_v64", 8, 2, 128, 64)]
DTYPES = ["bf16"]
def mask_mod(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx
