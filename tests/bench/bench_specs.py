"""Small specs built in code, so the benchmark's logic is tested on CPU without
depending on the example spec files (imported as `bench_specs`: tests/bench is
on sys.path under pytest's default import mode)."""

from __future__ import annotations

import inspect
import math

import torch

from cubridge.attention import HeadConfig
from cubridge.spec.model import Spec, Tolerance

TINY = HeadConfig("tiny", 4, 2, 16)  # GQA 2:1
TINY_MHA = HeadConfig("tiny_mha", 2, 2, 16)
TOLERANCES = {torch.bfloat16: Tolerance(rel=1e-2, abs=2e-2), torch.float32:
              Tolerance(rel=1e-4, abs=2e-4)}


def causal_mask(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def document_mask(b, h, q_idx, kv_idx, *, doc_ids):
    return (doc_ids[b, q_idx] == doc_ids[b, kv_idx]) & (q_idx >= kv_idx)


def make_doc_ids(shape, generator, device):
    """Ragged documents per batch element, lengths drawn in [S/8, S/2)."""
    rows = []
    for _ in range(shape.b):
        ids, doc = [], 0
        while len(ids) < shape.sq:
            n = int(torch.randint(max(1, shape.sq // 8), max(2, shape.sq // 2), (1,),
                                  generator=generator, device=generator.device))
            ids += [doc] * n
            doc += 1
        rows.append(ids[: shape.sq])
    return {"doc_ids": torch.tensor(rows, dtype=torch.int32, device=device)}


def alibi_score(score, b, h, q_idx, kv_idx, *, slopes):
    return score + slopes[h] * (kv_idx - q_idx)


def make_slopes(shape, generator, device):
    return {"slopes": torch.tensor([2.0 ** (-8 * (i + 1) / shape.hq) for i in range(shape.hq)],
                                   device=device)}


def softcap_score(score, b, h, q_idx, kv_idx):
    return 30.0 * torch.tanh(score / 30.0)


def _kw(fn, aux):
    return {n: aux[n] for n in inspect.signature(fn).parameters if n in aux}


def dense_reference(mask_mod=None, score_mod=None, normalizer="softmax"):
    """An independent plain-PyTorch reference: materialise everything, expand GQA."""

    def reference(q, k, v, **aux):
        bsz, hq, sq, d = q.shape
        group = hq // k.shape[1]
        kk = k.repeat_interleave(group, 1).float() if q.dtype != torch.float64 else \
            k.repeat_interleave(group, 1)
        vv = v.repeat_interleave(group, 1).to(kk.dtype)
        s = q.to(kk.dtype) @ kk.transpose(-1, -2) / math.sqrt(d)
        b = torch.arange(bsz).view(-1, 1, 1, 1)
        h = torch.arange(hq).view(1, -1, 1, 1)
        qi = torch.arange(sq).view(1, 1, -1, 1)
        ki = torch.arange(k.shape[2]).view(1, 1, 1, -1)
        if score_mod is not None:
            s = score_mod(s, b, h, qi, ki, **_kw(score_mod, aux))
        allowed = (mask_mod(b, h, qi, ki, **_kw(mask_mod, aux)) if mask_mod is not None
                   else torch.ones_like(s, dtype=torch.bool)).expand_as(s)
        if normalizer == "softmax":
            p = torch.softmax(s.masked_fill(~allowed, float("-inf")), dim=-1)
        elif normalizer == "sigmoid":
            p = torch.sigmoid(s) * allowed
        else:
            p = torch.relu(s) * allowed
        return (p @ vv).to(q.dtype)

    return reference


def make_spec(name, mask_mod=None, score_mod=None, normalizer="softmax", make_aux=None,
              reference=None, configs=(TINY, TINY_MHA)) -> Spec:
    return Spec(
        name=name, description=f"test spec {name}", path=None,
        reference=reference or dense_reference(mask_mod, score_mod, normalizer),
        make_aux=make_aux, configs=list(configs), seq_lens=[64], dtypes=[torch.bfloat16],
        tolerances=TOLERANCES, mask_mod=mask_mod, score_mod=score_mod, normalizer=normalizer,
        returns_lse=normalizer == "softmax")
