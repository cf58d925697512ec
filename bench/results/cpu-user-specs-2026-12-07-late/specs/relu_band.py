"""ReLU attention (relu(score) as the weights, no softmax, no normalisation) on a
bidirectional band of 256 keys either side."""

import torch

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec.helpers import elementwise_attention, expand_kv, positions, scaled_scores

NAME = "relu_band"
DESCRIPTION = "relu normaliser, |q - k| <= 256"
CONFIGS = [LLAMA2_7B, QWEN25_72B]
DTYPES = ["bf16"]
NORMALIZER = "relu"


def reference(q, k, v):
    qi, ki = positions(q, k)
    k, v = expand_kv(q, k, v)
    return elementwise_attention(torch.relu(scaled_scores(q, k)), (qi - ki).abs() <= 256, v)


def mask_mod(b, h, q_idx, kv_idx):
    return (q_idx - kv_idx).abs() <= 256
