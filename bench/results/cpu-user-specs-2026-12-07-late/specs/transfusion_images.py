"""Transfusion / Chameleon-style mixed-modal mask: text tokens attend causally, the
tokens of one image see each other bidirectionally (and everything before the image).
Image membership comes per token as aux (-1 for text)."""

import torch

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "transfusion_images"
DESCRIPTION = "causal, plus bidirectional within each image (image_id per token)"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
DTYPES = ["bf16"]
SELF_ATTENTION = True
AUX_SHAPES = {"image_id": ("B", "S")}


def make_aux(shape, generator, device):
    s = shape.sk
    ids = torch.full((shape.b, s), -1, dtype=torch.int32)
    for b in range(shape.b):
        pos, img = 0, 0
        while pos < s:
            pos += int(torch.randint(8, 200, (1,), generator=generator))  # text
            n = int(torch.randint(16, 300, (1,), generator=generator))
            ids[b, pos:pos + n] = img
            pos, img = pos + n, img + 1
    return {"image_id": ids.to(device)}


def reference(q, k, v, image_id):
    qi, ki = positions(q, k)
    iq = image_id[:, None, :q.shape[2], None].long()
    ik = image_id[:, None, None, :k.shape[2]].long()
    allowed = (qi >= ki) | ((iq == ik) & (iq >= 0))
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), allowed, v)


def mask_mod(b, h, q_idx, kv_idx, *, image_id):
    same_image = (image_id[b, q_idx] == image_id[b, kv_idx]) & (image_id[b, q_idx] >= 0)
    return (q_idx >= kv_idx) | same_image
