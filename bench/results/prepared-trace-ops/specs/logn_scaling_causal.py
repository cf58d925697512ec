"""Log-n attention scaling (Chiang & Cholak; Qwen's logn): causal, scores times
max(1, log(q + 1) / log(512)), written with clamp_min, .to(torch.float32), math.log."""
import math

import torch
import torch.nn.functional as F

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "logn_scaling_causal"
DESCRIPTION = "causal, score * clamp_min(log(q + 1) / log(512), 1)"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16", "fp16"]
TRAIN_LEN = 512


def reference(q, k, v):
    q_idx, kv_idx = positions(q, k)
    factor = torch.clamp(torch.log(q_idx.to(torch.float32) + 1) / math.log(TRAIN_LEN), min=1.0).to(q.dtype)
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k) * factor, q_idx >= kv_idx, v)


def mask_mod(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def score_mod(score, b, h, q_idx, kv_idx):
    factor = (torch.log(q_idx.to(torch.float32) + 1) / math.log(TRAIN_LEN)).clamp_min(1.0)
    return score * factor
