"""Flamingo's vision cross-attention mask (attention-gym's code) with its tensors
as aux: each key is an image token; a query (text token) attends to the images
whose [start, end) interval holds it. The mask reads one interval row per key
and then its elements, as FlexAttention's per-element calls allow."""

import torch

from cubridge.attention import LLAMA2_7B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "flamingo_aux"
CONFIGS = [LLAMA2_7B]
SEQ_LENS = [1024, 2048]
NUM_IMAGES = 3
AUX_SHAPES = {"intervals": (NUM_IMAGES, 2), "image_boundaries": ("Sk",)}


def make_aux(shape, generator, device):
    per_image = -(-shape.sk // NUM_IMAGES)
    image_boundaries = torch.arange(shape.sk) // per_image
    starts = torch.randint(0, shape.sq, (NUM_IMAGES,), generator=generator)
    lengths = torch.randint(1, shape.sq + 1, (NUM_IMAGES,), generator=generator)
    intervals = torch.stack([starts, (starts + lengths).clamp(max=shape.sq)], dim=1)
    return {"intervals": intervals.to(torch.int32).to(device),
            "image_boundaries": image_boundaries.to(device)}


def reference(q, k, v, intervals, image_boundaries):
    q_idx, _ = positions(q, k)                       # [Sq, 1]
    interval = intervals[image_boundaries]           # [Sk, 2]
    allowed = (q_idx >= interval[:, 0]) & (q_idx < interval[:, 1])
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), allowed, v)


def mask_mod(b, h, q_idx, kv_idx, *, intervals, image_boundaries):
    image_idx = image_boundaries[kv_idx]
    interval = intervals[image_idx]
    return (q_idx >= interval[0]) & (q_idx < interval[1])
