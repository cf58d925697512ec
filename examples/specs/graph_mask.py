"""Attention over a graph given as a dense boolean adjacency, the mask tensor a model
builds from its data: [B, Sq, Sk], shared by the heads (SDPA takes it as attn_mask
[B, 1, Sq, Sk]; indexed without the head's constant 0, Flex FLASH runs it too).
Here each query is linked to itself and to a random half of the keys at most 1024
positions before it (a local causal graph: whole key blocks outside the band are
empty, every block inside it mixed)."""

import torch

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import expand_kv, scaled_scores, softmax_attention

NAME = "graph_mask"
DESCRIPTION = "adjacency[b, q, k]: a dense bool mask (a causal band of 1024, half the links)"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
SEQ_LENS = [1024, 2048, 4096]
DTYPES = ["bf16", "fp16"]
AUX_SHAPES = {"adjacency": ("B", "Sq", "Sk")}
BAND = 1024


def make_aux(shape, generator, device):
    q = torch.arange(shape.sq)[:, None]
    k = torch.arange(shape.sk)[None, :]
    band = (q - k >= 0) & (q - k < BAND)
    links = torch.rand(shape.b, shape.sq, shape.sk, generator=generator) < 0.5
    return {"adjacency": ((links & band) | (q == k)).to(device)}


def reference(q, k, v, adjacency):
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), adjacency[:, None], v)


def mask_mod(b, h, q_idx, kv_idx, *, adjacency):
    return adjacency[b, q_idx, kv_idx]
