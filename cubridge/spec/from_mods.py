"""A spec built in memory from FlexAttention mods alone.

    spec = cubridge.spec.from_mods(score_mod=softcap, mask_mod=sliding_window)

For users with no reference of their own: the reference is the attention the
mods define, computed in float64 the way FlexAttention evaluates mods (per
element, cubridge.spec.mods). Checking the mods against that reference is
vacuous, so what verification establishes is that a kernel computes what the
mods say. Tensors the mods capture stay captured: the reference reads them
where they are (put them on the device the inputs are on, as FlexAttention
needs), the hook tracer lifts them to aux tensors.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence

import torch

from cubridge.attention import HeadConfig, Shape
from cubridge.spec.errors import SpecError, location_of
from cubridge.spec.loader import DEFAULT_CONFIGS, NORMALIZERS, parse_dtype
from cubridge.spec.model import Normalizer, Spec
from cubridge.spec.mods import mods_reference
from cubridge.spec.tolerances import DEFAULT_TOLERANCES

DEFAULT_SEQ_LENS = (1024, 2048)


def _check_mod(fn: object, kind: str, positional: int) -> None:
    where = location_of(fn) if callable(fn) else None
    if not callable(fn):
        raise SpecError(f"{kind} must be a function, got {type(fn).__name__}")
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError) as exc:
        raise SpecError(f"{kind}: cannot read its signature ({exc})", where) from exc
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return  # *args: FlexAttention's own combinators (and_masks) take them
    pos = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
           and p.default is p.empty]
    if len(pos) != positional:
        names = "score, b, h, q_idx, kv_idx" if kind == "score_mod" else "b, h, q_idx, kv_idx"
        raise SpecError(f"{kind} takes {len(pos)} positional parameters; FlexAttention calls "
                        f"it as {kind}({names})", where)


def from_mods(score_mod: Callable[..., torch.Tensor] | None = None,
              mask_mod: Callable[..., torch.Tensor] | None = None, *,
              name: str = "flex_mods", description: str = "",
              configs: Sequence[HeadConfig] | None = None,
              seq_lens: Sequence[int] = DEFAULT_SEQ_LENS,
              dtypes: Sequence[torch.dtype | str] = (torch.bfloat16,),
              scale: float | None = None, normalizer: Normalizer = "softmax",
              aux: Mapping[str, torch.Tensor] | None = None,
              self_attention: bool = False) -> Spec:
    """A Spec whose reference is the attention of `score_mod` / `mask_mod`.

    `aux`: tensors for mods that take keyword-only aux parameters (spec
    style); mods that capture their tensors need none. `configs` and
    `seq_lens` say what to verify and benchmark on (a mod whose captured
    tensors fix the lengths needs the lengths it was made for). `self_attention`:
    queries and keys are the same positions, checked and run at Sq = Sk only
    (SELF_ATTENTION in a spec file)."""
    if score_mod is not None:
        _check_mod(score_mod, "score_mod", 5)
    if mask_mod is not None:
        _check_mod(mask_mod, "mask_mod", 4)
    if not name.isidentifier():
        raise SpecError(f"name {name!r} is not an identifier")
    if normalizer not in NORMALIZERS:
        raise SpecError(f"normalizer {normalizer!r}; use one of {NORMALIZERS}")
    if scale is not None and not scale > 0:
        raise SpecError(f"scale {scale!r} must be positive (None: 1/sqrt(D))")
    fixed = dict(aux or {})
    for key, t in fixed.items():
        if not isinstance(t, torch.Tensor) or not key.isidentifier():
            raise SpecError(f"aux {key!r} must be a tensor named by an identifier")
    holder: dict[str, Spec] = {}
    given_mods = [n for n, f in (("score_mod", score_mod), ("mask_mod", mask_mod)) if f]

    reference = mods_reference(holder)

    def make_aux(shape: Shape, generator: torch.Generator, device: torch.device
                 ) -> dict[str, torch.Tensor]:
        return {n: t.to(device) for n, t in fixed.items()}

    spec = Spec(
        name=name,
        description=description or "attention defined by FlexAttention mods "
        f"({', '.join(given_mods) or 'none'})",
        path=None, reference=reference, make_aux=make_aux if fixed else None,
        configs=list(configs or DEFAULT_CONFIGS), seq_lens=list(seq_lens),
        dtypes=[parse_dtype(d) for d in dtypes], tolerances=dict(DEFAULT_TOLERANCES),
        mask_mod=mask_mod, score_mod=score_mod, normalizer=normalizer,
        returns_lse=normalizer == "softmax", scale=scale,
        extra={"from_mods": True}, self_attention=bool(self_attention),
    )
    holder["spec"] = spec
    return spec
