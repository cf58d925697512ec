"""mods built from functools.partial, lambda, nested closures over constants"""
import functools
import torch
from cubridge.attention import HeadConfig
CONFIGS = [HeadConfig("p", 8, 2, 128)]
DTYPES = ["bf16"]
def _window(b, h, q_idx, kv_idx, *, left, right):
    return (kv_idx <= q_idx + right) & (q_idx - kv_idx <= left)
mask_mod = functools.partial(_window, left=300, right=0)
def make_cap(c):
    def outer():
        def cap(score, b, h, q_idx, kv_idx):
            return c * torch.tanh(score / c)
        return cap
    return outer()
score_mod = make_cap(20.0)
