"""A batch mixing causal and bidirectional rows: is_causal[b] chooses the mask."""
import torch

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "per_batch_causal_flag"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
DTYPES = ["bf16"]
AUX_SHAPES = {"is_causal": ("B",)}


def make_aux(shape, generator, device):
    return {"is_causal": (torch.rand(shape.b, generator=generator) < 0.5).to(device)}


def reference(q, k, v, is_causal):
    qi, ki = positions(q, k)
    allowed = (qi >= ki) | ~is_causal.view(-1, 1, 1, 1)
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), allowed, v)


def mask_mod(b, h, q_idx, kv_idx, *, is_causal):
    return torch.where(is_causal[b], q_idx >= kv_idx, True)
