import torch
from cubridge.attention import HeadConfig
CONFIGS = [HeadConfig("s", 8, 8, 64)]
DTYPES = ["fp16"]
NORMALIZER = "sigmoid"
AUX_SHAPES = {"log_n": ()}
def make_aux(shape, generator, device):
    return {"log_n": torch.tensor(float(shape.sk), device=device).log()}
def score_mod(score, b, h, q_idx, kv_idx, *, log_n):
    return score - log_n
def mask_mod(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx
