from cubridge.attention import HeadConfig
CONFIGS = [HeadConfig("f", 8, 8, 128)]
DTYPES = ["fp32"]
def mask_mod(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx
