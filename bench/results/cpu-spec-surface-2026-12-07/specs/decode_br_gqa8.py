"""GQA 8:1, causal bottom-right written with shapes known only through aux; fp16 only"""
import torch
from cubridge.attention import HeadConfig
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention
CONFIGS = [HeadConfig("gqa8", 32, 4, 128)]
DTYPES = ["fp16"]
AUX_SHAPES = {"offset": ()}
def make_aux(shape, generator, device):
    return {"offset": torch.tensor(shape.sk - shape.sq, device=device)}
def reference(q, k, v, offset):
    q_idx, kv_idx = positions(q, k)
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), q_idx + offset >= kv_idx, v)
def mask_mod(b, h, q_idx, kv_idx, *, offset):
    return q_idx + offset >= kv_idx
