"""aux of int8/uint8/int16/bool/fp16/bf16, with a batch dim"""
import torch
from cubridge.attention import HeadConfig
CONFIGS = [HeadConfig("mqa", 8, 1, 128)]
DTYPES = ["bf16", "fp16"]
AUX_SHAPES = {"seg": ("B", "Sk"), "tag": ("Sk",), "grp": ("B", "Sq"), "keep": ("B", "Sk"),
              "hb": ("Hq",), "bb": ("B", "Hq")}
def make_aux(shape, generator, device):
    seg = torch.randint(0, 4, (shape.b, shape.sk), generator=generator).to(torch.int8)
    tag = torch.randint(0, 3, (shape.sk,), generator=generator).to(torch.uint8)
    grp = torch.randint(0, 4, (shape.b, shape.sq), generator=generator).to(torch.int16)
    keep = torch.rand(shape.b, shape.sk, generator=generator) < 0.8
    hb = torch.rand(shape.hq, generator=generator).to(torch.float16)
    bb = torch.rand(shape.b, shape.hq, generator=generator).to(torch.bfloat16)
    return {k: t.to(device) for k, t in dict(seg=seg, tag=tag, grp=grp, keep=keep, hb=hb, bb=bb).items()}
def mask_mod(b, h, q_idx, kv_idx, *, seg, tag, grp, keep):
    return ((seg[b, kv_idx].to(torch.int16) == grp[b, q_idx]) | (tag[kv_idx] == 0)) & keep[b, kv_idx] | (q_idx == kv_idx)
def score_mod(score, b, h, q_idx, kv_idx, *, hb, bb):
    return score + hb[h] * 0.5 - bb[b, h] * (q_idx - kv_idx).abs() * 0.01
