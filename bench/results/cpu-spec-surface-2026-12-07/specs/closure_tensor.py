"""mods capture a tensor by closure instead of declaring aux (spec file)"""
import torch
from cubridge.attention import HeadConfig
CONFIGS = [HeadConfig("c", 8, 8, 128)]
DTYPES = ["bf16"]
slopes = torch.tensor([2.0 ** (-(i + 1)) for i in range(8)])
def score_mod(score, b, h, q_idx, kv_idx):
    return score - slopes[h] * (q_idx - kv_idx).abs()
def mask_mod(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx
