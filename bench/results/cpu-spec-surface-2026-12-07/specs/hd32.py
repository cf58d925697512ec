from cubridge.attention import HeadConfig
CONFIGS = [HeadConfig("hd32", 8, 2, 32, None)]
DTYPES = ["bf16"]
def mask_mod(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx
