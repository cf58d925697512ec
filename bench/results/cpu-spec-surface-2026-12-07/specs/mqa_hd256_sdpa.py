"""MQA head dim 256, reference via SDPA (out only), causal mask_mod"""
import torch.nn.functional as F
from cubridge.attention import HeadConfig
CONFIGS = [HeadConfig("mqa256", 16, 1, 256)]
DTYPES = ["fp16"]
def reference(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
def mask_mod(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx
