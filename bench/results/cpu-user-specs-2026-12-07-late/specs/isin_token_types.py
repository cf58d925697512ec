"""Keys whose token type is one of a set, via torch.isin (as a user might write it)."""
import torch

from cubridge.attention import LLAMA2_7B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "isin_token_types"
CONFIGS = [LLAMA2_7B]
DTYPES = ["bf16"]
SELF_ATTENTION = True
AUX_SHAPES = {"types": ("B", "S")}
VISIBLE = torch.tensor([0, 2])


def make_aux(shape, generator, device):
    return {"types": torch.randint(0, 4, (shape.b, shape.sk), generator=generator,
                                   dtype=torch.int32).to(device)}


def reference(q, k, v, types):
    qi, ki = positions(q, k)
    vis = torch.isin(types, VISIBLE.to(types.device))[:, None, None, :]
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), (qi >= ki) & (vis | (qi == ki)), v)


def mask_mod(b, h, q_idx, kv_idx, *, types):
    return (q_idx >= kv_idx) & (torch.isin(types[b, kv_idx], VISIBLE) | (q_idx == kv_idx))
