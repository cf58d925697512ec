"""FlexAttention's and_masks / or_masks"""
from torch.nn.attention.flex_attention import and_masks, or_masks
from cubridge.attention import HeadConfig
CONFIGS = [HeadConfig("ao", 16, 4, 256)]
DTYPES = ["bf16"]
def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx
def window(b, h, q_idx, kv_idx):
    return q_idx - kv_idx < 1500
def sink(b, h, q_idx, kv_idx):
    return kv_idx < 4
mask_mod = or_masks(and_masks(causal, window), sink)
