"""MLA 192/128 with a sliding window and softcap"""
import torch
from cubridge.attention import HeadConfig
CONFIGS = [HeadConfig("mla", 16, 16, 192, 128)]
DTYPES = ["bf16"]
def mask_mod(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx < 512)
def score_mod(score, b, h, q_idx, kv_idx):
    return 30.0 * torch.tanh(score / 30.0)
