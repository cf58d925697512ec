"""DiT-XL/2's attention (a diffusion transformer over image patches): 16 heads of head
dim 72, full (bidirectional) attention. 72 is a multiple of 8 between the library's
tiles and not of 16: fa_sm90 runs it on its D = 96 build and fa_sm80 on its 128 tile,
each zero-filling the columns past 72 to whole 16-column k-steps. Sequence lengths of
latent patches: 256 at 256 x 256 pixels, 1024 at 512 x 512, 4096 at 1024 x 1024."""

import torch

from cubridge.attention import DIT_XL
from cubridge.spec.helpers import expand_kv, scaled_scores, softmax_attention

NAME = "dit_xl"
DESCRIPTION = "full attention, head dim 72"
CONFIGS = [DIT_XL]
SEQ_LENS = [1024, 4096]
DTYPES = ["bf16", "fp16"]


def reference(q, k, v):
    k, v = expand_kv(q, k, v)
    scores = scaled_scores(q, k)
    allowed = torch.ones_like(scores, dtype=torch.bool)
    return softmax_attention(scores, allowed, v)
