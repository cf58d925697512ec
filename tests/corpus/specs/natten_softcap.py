"""NATTEN (a 64 x 64 canvas, 13 x 13 kernel) with tanh softcapping: attention-gym's
generators, unchanged, and no reference: the mods' own attention is the reference."""

from attn_gym.masks import generate_natten
from attn_gym.mods import generate_tanh_softcap

from cubridge.attention import LLAMA2_7B

CONFIGS = [LLAMA2_7B]
SEQ_LENS = [4096]
mask_mod = generate_natten(64, 64, 13, 13)
score_mod = generate_tanh_softcap(20)
