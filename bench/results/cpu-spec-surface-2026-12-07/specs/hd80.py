from cubridge.attention import HeadConfig
CONFIGS = [HeadConfig("hd80", 8, 2, 80, None)]
DTYPES = ["bf16"]
def mask_mod(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx
