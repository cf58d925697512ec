"""Which path `cubridge run` takes for a spec: the deterministic rules (the
variant's change stays inside the kernel's hook points) or the LLM stages
(it leaves them). The decision is made from facts, each stated in the reason:

- head dims the library kernel was not built for (e.g. 192/128) change tile
  shapes, not hooks: LLM path;
- FlexAttention-style mods the hook tracer cannot express: LLM path;
- no mods at all, and a reference that is not plain attention (checked on a
  tiny float64 input): the variant cannot be stated as hooks: LLM path;
- otherwise the rules.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from cubridge.attention import Shape
from cubridge.spec.model import Spec


@dataclass(frozen=True)
class PathChoice:
    path: Literal["rules", "llm"]
    reason: str

    def __str__(self) -> str:
        name = "deterministic hook rules" if self.path == "rules" else "LLM stages"
        return f"{name}: {self.reason}"


def choose_path(spec: Spec, kernel: str = "fa_sm80") -> PathChoice:
    from cubridge.kernels import load_metadata

    meta = load_metadata(kernel)
    dims = sorted({(c.d, c.head_dim_v) for c in spec.configs})
    bad = [f"{d}/{dv}" for d, dv in dims if d not in meta.head_dims or dv != d]
    if bad:
        return PathChoice("llm", f"head dims (QK/V) {', '.join(bad)} are not among {kernel}'s "
                          f"{list(meta.head_dims)} (equal QK and V): tile shapes change, not hooks")
    if spec.score_mod is not None or spec.mask_mod is not None:
        from cubridge.transfer.hooks import plan_hooks

        try:
            plan_hooks(spec)
        except Exception as exc:  # noqa: BLE001 - any tracer refusal means "not a hook"
            return PathChoice("llm", f"the hook tracer cannot express the spec's mods "
                              f"({type(exc).__name__}: {exc})")
        mods = [n for n in ("score_mod", "mask_mod") if getattr(spec, n) is not None]
        verb = "trace" if len(mods) > 1 else "traces"
        return PathChoice("rules", f"the spec's {' and '.join(mods)} {verb} into {kernel}'s hooks")
    if spec.normalizer == "softmax" and not _is_plain_attention(spec):
        return PathChoice("llm", "the spec has no FlexAttention-style mods and its reference is "
                          "not plain softmax attention: the change leaves the hooks")
    return PathChoice("rules", "plain attention: the library kernel's default hooks")


def _is_plain_attention(spec: Spec) -> bool:
    """spec.reference == softmax(q k^T * scale) v (with GQA) on a tiny float64 input."""
    from cubridge.spec.helpers import expand_kv, scaled_scores, softmax_attention

    cfg = spec.configs[0]
    group = cfg.hq // cfg.hk
    shape = Shape(1, group * min(cfg.hk, 2), min(cfg.hk, 2), 5, 7, cfg.d, cfg.dv)
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, shape.hq, 5, cfg.d, generator=gen, dtype=torch.float64)
    k = torch.randn(1, shape.hk, 7, cfg.d, generator=gen, dtype=torch.float64)
    v = torch.randn(1, shape.hk, 7, shape.head_dim_v, generator=gen, dtype=torch.float64)
    aux = dict(spec.make_aux(shape, gen, torch.device("cpu"))) if spec.make_aux else {}
    got = spec.reference(q, k, v, **aux)
    got = got[0] if isinstance(got, tuple) else got
    kx, vx = expand_kv(q, k, v)
    scale = spec.scale if spec.scale is not None else 1.0 / math.sqrt(cfg.d)
    scores = scaled_scores(q, kx, scale)
    want, _ = softmax_attention(scores, torch.ones(5, 7, dtype=torch.bool), vx)
    return bool(torch.allclose(got.to(torch.float64), want, rtol=1e-6, atol=1e-8))
