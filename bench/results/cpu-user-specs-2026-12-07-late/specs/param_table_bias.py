"""T5-style bias read from a captured nn.Parameter (an nn.Embedding's weight, with
requires_grad), by a clamped distance bucket, causal."""
import torch

from cubridge.attention import LLAMA2_7B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "param_table_bias"
CONFIGS = [LLAMA2_7B]
DTYPES = ["bf16"]
BUCKETS = 64
_g = torch.Generator().manual_seed(5)
TABLE = torch.nn.Embedding(BUCKETS, 32)
with torch.no_grad():
    TABLE.weight.copy_(0.3 * torch.randn(BUCKETS, 32, generator=_g))


def reference(q, k, v):
    qi, ki = positions(q, k)
    bucket = (qi - ki).clamp(0, BUCKETS - 1)
    h = torch.arange(q.shape[1], device=q.device).view(1, -1, 1, 1)
    bias = TABLE.weight.detach().to(q.device, q.dtype)[bucket, h]
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k) + bias, qi >= ki, v)


def score_mod(score, b, h, q_idx, kv_idx):
    return score + TABLE.weight[(q_idx - kv_idx).clamp(0, BUCKETS - 1), h]


def mask_mod(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx
