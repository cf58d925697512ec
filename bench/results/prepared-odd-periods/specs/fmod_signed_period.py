"""Bidirectional band of 512 keeping keys whose signed offset has C-remainder 0 or
+-1 by 3 (torch.fmod keeps the dividend's sign: fmod(-4, 3) == -1)."""
import math

import torch
import torch.nn.functional as F

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "fmod_signed_period"
DESCRIPTION = "|q - k| < 512 and fmod(k - q, 3) in {0, 1}"
CONFIGS = [LLAMA2_7B]
SEQ_LENS = [1024, 2048, 4096]
DTYPES = ["bf16", "fp16"]


def reference(q, k, v):
    q_idx, kv_idx = positions(q, k)
    d = kv_idx - q_idx
    r = torch.sign(d) * (d.abs() % 3)  # C remainder
    allowed = ((q_idx - kv_idx).abs() < 512) & ((r == 0) | (r == 1))
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), allowed, v)


def mask_mod(b, h, q_idx, kv_idx):
    r = torch.fmod(kv_idx - q_idx, 3)
    return (torch.abs(q_idx - kv_idx) < 512) & ((r == 0) | (r == 1))
