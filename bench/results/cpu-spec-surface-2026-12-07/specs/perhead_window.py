"""per-head windows from a captured tensor, SCALE set, DTYPES as torch dtypes"""
import torch
from cubridge.attention import HeadConfig
CONFIGS = [HeadConfig("ph", 8, 2, 128)]
DTYPES = [torch.float16, torch.bfloat16]
SCALE = 0.05
windows = torch.tensor([64, 128, 256, 512, 64, 128, 256, 2000], dtype=torch.int32)
def mask_mod(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx < windows[h])
