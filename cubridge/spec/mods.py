"""FlexAttention-style mods: binding their aux arguments, and a plain-PyTorch
attention that computes a spec from its mods alone (used to check that the
mods agree with the reference, and by peers that need dense masks).

Mods are evaluated as FlexAttention evaluates them: per element, with
torch.vmap over b, h, q_idx and kv_idx, so a mod written for scalar indices
(`row = table[i]; row[0]`) means here what it means in FlexAttention."""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import NamedTuple

import torch

from cubridge.attention import default_scale
from cubridge.spec.captured import captured_tensors
from cubridge.spec.grids import elementwise_mask, elementwise_score
from cubridge.spec.helpers import softmax_attention
from cubridge.spec.model import Spec

MaskMod = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
ScoreMod = Callable[
    [torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor
]


class BoundMods(NamedTuple):
    """Mods with their aux bound: exactly FlexAttention's callback signatures."""

    score_mod: ScoreMod | None
    mask_mod: MaskMod | None


def aux_parameters(fn: Callable[..., object], available: Iterable[str] = ()) -> list[str]:
    """Names of a mod's keyword-only parameters (the aux it reads). One with a
    default (`functools.partial(window, left=300)` turns `left` into one) is a
    constant of the mod, read as aux only when `available` names it."""
    available = set(available)
    return [p.name for p in inspect.signature(fn).parameters.values()
            if p.kind is inspect.Parameter.KEYWORD_ONLY
            and (p.default is inspect.Parameter.empty or p.name in available)]


def mod_name(fn: Callable[..., object]) -> str:
    """A mod's name for messages (a functools.partial names its function)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    return getattr(fn, "__name__", type(fn).__name__)


def _bind(fn: Callable[..., torch.Tensor], aux: Mapping[str, torch.Tensor]) -> dict:
    names = aux_parameters(fn, aux)
    missing = [n for n in names if n not in aux]
    if missing:
        raise KeyError(f"{mod_name(fn)} reads aux {missing}, which make_aux does not provide")
    return {n: aux[n] for n in names}


def captured_device(fn: Callable[..., object] | None) -> torch.device | None:
    """The device of the tensors `fn` captures, where a mod must be called with
    its indices: FlexAttention users capture tensors on their GPU, and a spec
    file's mods capture them on the CPU (a table at module level) while the GPU
    verification calls its reference on CUDA. A captured GPU tensor wins over a
    CPU one; 0-d CPU tensors (which mix with any device) say nothing."""
    cpu = None
    for _name, tensor in captured_tensors(fn).values():
        if tensor.device.type != "cpu":
            return tensor.device
        if tensor.dim() > 0:
            cpu = tensor.device
    return cpu


def bind_mods(spec: Spec, aux: Mapping[str, torch.Tensor]) -> BoundMods:
    """Closures over `aux` that FlexAttention can call as
    score_mod(score, b, h, q_idx, kv_idx) and mask_mod(b, h, q_idx, kv_idx)."""
    score_mod = mask_mod = None
    if spec.score_mod is not None:
        fn_s, kw_s = spec.score_mod, _bind(spec.score_mod, aux)
        dev_s = captured_device(fn_s)

        def score_mod(score, b, h, q_idx, kv_idx):
            if dev_s is not None and score.device != dev_s:  # see captured_device
                out = fn_s(score.to(dev_s), b.to(dev_s), h.to(dev_s), q_idx.to(dev_s),
                           kv_idx.to(dev_s), **{n: t.to(dev_s) for n, t in kw_s.items()})
                return out.to(score.device)
            return fn_s(score, b, h, q_idx, kv_idx, **kw_s)

    if spec.mask_mod is not None:
        fn_m, kw_m = spec.mask_mod, _bind(spec.mask_mod, aux)
        dev_m = captured_device(fn_m)

        def mask_mod(b, h, q_idx, kv_idx):
            if dev_m is not None and q_idx.device != dev_m:  # see captured_device
                out = fn_m(b.to(dev_m), h.to(dev_m), q_idx.to(dev_m), kv_idx.to(dev_m),
                           **{n: t.to(dev_m) for n, t in kw_m.items()})
                return out.to(q_idx.device)
            return fn_m(b, h, q_idx, kv_idx, **kw_m)

    return BoundMods(score_mod, mask_mod)


def index_grids(
    b: int, h: int, sq: int, sk: int, device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, ...]:
    """b, h, q_idx, kv_idx as int64 tensors broadcasting to [B, H, Sq, Sk]."""
    ar = lambda n: torch.arange(n, device=device)
    return (ar(b).view(b, 1, 1, 1), ar(h).view(1, h, 1, 1),
            ar(sq).view(1, 1, sq, 1), ar(sk).view(1, 1, 1, sk))


def _indices(b: int, h: int, sq: int, sk: int, device: torch.device | str
             ) -> tuple[torch.Tensor, ...]:
    # int32, as FlexAttention passes them
    return tuple(torch.arange(n, device=device, dtype=torch.int32) for n in (b, h, sq, sk))


def dense_mask(mods: BoundMods, b: int, h: int, sq: int, sk: int,
               device: torch.device | str = "cpu") -> torch.Tensor:
    """mask_mod on every (b, h, q, k): bool [B, H, Sq, Sk] (all True without one)."""
    if mods.mask_mod is None:
        return torch.ones(b, h, sq, sk, dtype=torch.bool, device=device)
    mask = elementwise_mask(mods.mask_mod)(*_indices(b, h, sq, sk, device))
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        raise TypeError(f"mask_mod must return a bool tensor, got "
                        f"{getattr(mask, 'dtype', type(mask).__name__)}")
    return mask


@contextlib.contextmanager
def float64_default(dtype: torch.dtype = torch.float64):
    """Torch's default dtype set to float64 while float64 work runs: Python floats
    meeting integer positions (`score - 0.1 * (q_idx - kv_idx)` in a mod,
    `torch.log(q_idx + 1.0)` in a reference) become tensors of the default dtype,
    float32 otherwise, whose rounding would read as a disagreement between a
    float64 reference and float64 mods (spec.check evaluates both under it). A
    kernel computes them in float32, as FlexAttention does. No-op for another
    `dtype`."""
    if dtype != torch.float64:
        yield
        return
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


def apply_score_mod(mods: BoundMods, scores: torch.Tensor) -> torch.Tensor:
    """score_mod on a [B, H, Sq, Sk] score tensor, element by element."""
    if mods.score_mod is None:
        return scores
    bsz, h, sq, sk = scores.shape
    with float64_default(scores.dtype):
        out = elementwise_score(mods.score_mod)(scores, *_indices(bsz, h, sq, sk, scores.device))
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"score_mod must return a tensor, got {type(out).__name__}")
    return out.to(scores.dtype)


def mods_attention(
    spec: Spec, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
    aux: Mapping[str, torch.Tensor], scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Attention computed from the spec's mods and normaliser alone, in the
    dtype of q (use float64): returns (out, lse), lse None for elementwise
    normalisers. Rows with no allowed key give out 0 and lse -inf."""
    mods = bind_mods(spec, aux)
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    if scale is None:
        scale = spec.scale if spec.scale is not None else default_scale(q.shape[-1])
    scores = apply_score_mod(mods, (q @ k.transpose(-1, -2)) * scale)
    allowed = dense_mask(mods, q.shape[0], q.shape[1], q.shape[2], k.shape[2], q.device)
    if spec.normalizer == "softmax":
        # (a row whose every score is finfo.min, a floor mask's, weighs its keys alike)
        return softmax_attention(scores, allowed, v)
    act = torch.sigmoid(scores) if spec.normalizer == "sigmoid" else torch.relu(scores)
    return act.masked_fill(~allowed, 0.0) @ v, None


def mods_reference(holder: Mapping[str, Spec]) -> Callable[..., object]:
    """A reference computed from the mods of `holder["spec"]` (set once the spec
    exists): their attention in float64, returned in the inputs' dtype. The
    reference of specs made from mods alone (from_mods, spec files without one)."""

    def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **aux: torch.Tensor
                  ) -> object:
        spec = holder["spec"]
        out, lse = mods_attention(spec, q.double(), k.double(), v.double(), aux, spec.scale)
        if lse is None:
            return out.to(q.dtype)
        return out.to(q.dtype), lse if q.dtype == torch.float64 else lse.float()

    return reference
