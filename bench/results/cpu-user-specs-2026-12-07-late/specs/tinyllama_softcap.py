"""TinyLlama-like heads (32 query heads, 4 KV heads, D = 64), causal with a tanh softcap
of 30 written with F.tanh."""
import torch
import torch.nn.functional as F

from cubridge.attention import HeadConfig
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "tinyllama_softcap"
CONFIGS = [HeadConfig("tinyllama", 32, 4, 64)]
DTYPES = ["bf16", "fp16"]
CAP = 30.0


def reference(q, k, v):
    qi, ki = positions(q, k)
    k, v = expand_kv(q, k, v)
    s = CAP * torch.tanh(scaled_scores(q, k) / CAP)
    return softmax_attention(s, qi >= ki, v)


def score_mod(score, b, h, q_idx, kv_idx):
    return CAP * F.tanh(score / CAP)


def mask_mod(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx
