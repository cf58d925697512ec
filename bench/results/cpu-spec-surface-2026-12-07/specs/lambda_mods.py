"""mods as lambdas"""
import torch
from cubridge.attention import HeadConfig
CONFIGS = [HeadConfig("l", 8, 8, 96)]
DTYPES = ["bf16", "fp16"]
mask_mod = lambda b, h, q_idx, kv_idx: q_idx >= kv_idx
score_mod = lambda score, b, h, q_idx, kv_idx: score * 1.5
