"""Bidirectional ALiBi inside a band: an encoder whose query q sees keys with
|q - k| < 2048, scored score - slope[h] * |q - k| (slopes 2^(-8 (h + 1) / Hq))."""

import torch

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "alibi_band"
DESCRIPTION = "|q - k| < 2048, score - slope[h] * |q - k|"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16", "fp16"]
AUX_SHAPES = {"alibi_slopes": ("Hq",)}
BAND = 2048


def make_aux(shape, generator, device):
    heads = torch.arange(1, shape.hq + 1, dtype=torch.float32, device=device)
    return {"alibi_slopes": torch.exp2(-8.0 * heads / shape.hq)}


def reference(q, k, v, alibi_slopes):
    q_idx, kv_idx = positions(q, k)
    k, v = expand_kv(q, k, v)
    distance = (q_idx - kv_idx).abs()
    scores = scaled_scores(q, k) - alibi_slopes.to(q.dtype)[:, None, None] * distance
    return softmax_attention(scores, distance < BAND, v)


def mask_mod(b, h, q_idx, kv_idx):
    return (q_idx - kv_idx).abs() < BAND


def score_mod(score, b, h, q_idx, kv_idx, *, alibi_slopes):
    return score - alibi_slopes[h] * (q_idx - kv_idx).abs()
