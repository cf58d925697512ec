"""Cosine attention (Swin-V2 style): q and k rows are L2-normalised, so a
score is the cosine of the angle between them, multiplied by a learned
per-head logit scale (in place of 1/sqrt(D)); softmax over all keys. Outside
the hook family: the scores depend on whole q and k rows (their norms), which
no elementwise score_mod of one score can see."""

import torch

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, softmax_attention

NAME = "cosine"
DESCRIPTION = "softmax(logit_scale[h] * cos(q_i, k_j)) v, q and k rows L2-normalised"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
SEQ_LENS = [1024, 2048, 4096, 8192]
DTYPES = ["bf16", "fp16"]
AUX_SHAPES = {"logit_scale": ("Hq",)}
# Swin-V2 clamps the learned scale at log(100): scores stay within [-100, 100].
MAX_LOGIT_SCALE = 100.0
EPS = 1e-6  # the norm floor: a zero row normalises to zero, not NaN


def make_aux(shape, generator, device):
    # exp of a learned log-scale, as trained models store it: 5 .. 40 per head.
    log_scale = torch.empty(shape.hq).uniform_(1.6, 3.7, generator=generator)
    return {"logit_scale": log_scale.exp().clamp(max=MAX_LOGIT_SCALE).to(device)}


def _unit_rows(x):
    return x / x.norm(dim=-1, keepdim=True).clamp_min(EPS)


def reference(q, k, v, logit_scale):
    k, v = expand_kv(q, k, v)
    cosine = _unit_rows(q) @ _unit_rows(k).transpose(-1, -2)
    scores = cosine * logit_scale.to(cosine.dtype)[:, None, None]
    allowed = torch.ones(scores.shape[-2:], dtype=torch.bool, device=scores.device)
    return softmax_attention(scores, allowed, v)
