"""head dim 64 full attention, reference only, fp16 only"""
from cubridge.attention import HeadConfig
from cubridge.spec.helpers import expand_kv, scaled_scores, softmax_attention
import torch
CONFIGS = [HeadConfig("f64", 8, 8, 64)]
DTYPES = ["fp16"]
def reference(q, k, v):
    k, v = expand_kv(q, k, v)
    allowed = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device)
    return softmax_attention(scaled_scores(q, k), allowed, v)
