"""ALiBi with slopes in a Python list indexed by the head (as a user might first try)."""
import torch

from cubridge.attention import LLAMA2_7B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "python_list_slopes"
CONFIGS = [LLAMA2_7B]
DTYPES = ["bf16"]
SLOPES = [2 ** (-8 * (i + 1) / 32) for i in range(32)]


def reference(q, k, v):
    qi, ki = positions(q, k)
    s = torch.tensor(SLOPES, dtype=q.dtype, device=q.device)[:q.shape[1]].view(1, -1, 1, 1)
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k) - s * (qi - ki), qi >= ki, v)


def score_mod(score, b, h, q_idx, kv_idx):
    return score - SLOPES[h] * (q_idx - kv_idx)


def mask_mod(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx
