"""A KERPLE-style log bias written with log1p, plus a Gaussian-shaped bonus with erf,
causal."""
import torch

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "log1p_erf_bias"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
DTYPES = ["bf16"]


def _bias(d):
    return -0.5 * torch.log1p(0.1 * d) + 0.25 * torch.erf((64.0 - d) / 32.0)


def reference(q, k, v):
    qi, ki = positions(q, k)
    d = (qi - ki).clamp_min(0).double()
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k) + _bias(d).to(q.dtype), qi >= ki, v)


def score_mod(score, b, h, q_idx, kv_idx):
    d = (q_idx - kv_idx).clamp_min(0)
    return score + _bias(d)


def mask_mod(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx
