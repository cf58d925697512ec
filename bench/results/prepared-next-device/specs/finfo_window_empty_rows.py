"""A window of 16 keys behind each query, masked as Hugging Face masks (added
finfo(float32).min): with Sq > Sk some rows keep no key, and there every key weighs
alike (out = mean of V, lse = finfo.min + log(Sk))."""
import torch

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores

NAME = "finfo_window_empty_rows"
DESCRIPTION = "score + where(0 <= q - k < 16, 0, finfo.min)"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
SEQ_LENS = [1024, 4096]
DTYPES = ["bf16"]
LOW = torch.finfo(torch.float32).min


def reference(q, k, v):
    q_idx, kv_idx = positions(q, k)
    k, v = expand_kv(q, k, v)
    allowed = (q_idx - kv_idx >= 0) & (q_idx - kv_idx < 16)
    scores = scaled_scores(q, k) + torch.where(allowed, 0.0, LOW).to(q.dtype)
    return torch.softmax(scores, dim=-1) @ v, torch.logsumexp(scores, dim=-1)


def score_mod(score, b, h, q_idx, kv_idx):
    return score + torch.where((q_idx - kv_idx >= 0) & (q_idx - kv_idx < 16), 0.0, LOW)
