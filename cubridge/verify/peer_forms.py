"""A variant in the form a user of each peer would write it (docs/benchmark.md,
Peers): a comparison is only worth making against a peer run as its users run it.

- Constants. A 0-d aux tensor of a spec (prefix_lm's prefix length,
  relative_position's table offset, log S) is one number per shape, and a user
  writes it as a Python constant. The spec keeps it a tensor so that the hook
  generator can read it; the peers' mods get the number
  (`constant_mods`). FlexAttention's FLASH backend cannot read a captured 0-d
  tensor at all ("Expected TensorSSA, but got int"). Aux with per-position or
  per-head data (document ids, segment ids, slopes, bias tables) stays a
  tensor the mods capture, as a user's would.
- FlashAttention-4's own flags (`fa4_flags`): `causal`, `window_size=(W - 1,
  0)` for a causal sliding window of W keys, `window_size=(hi, -lo)` without
  `causal` for a band lo <= q - k <= hi around the diagonal, `softcap` for a
  score_mod that is c * tanh(s / c). FA4 takes any other mask or score change
  only as CuTe-DSL `mask_mod` / `score_mod` code; FlexAttention's FLASH
  backend (the flex_flash peer) is what compiles a spec's mods into that code
  and runs them on FA4's kernels, so the fa4 peer says so instead of guessing
  at hand-written DSL.
- Q scaled. A score_mod `factor(b, h, q) * s + rest(b, h, q, k)` whose factor no
  key changes (a per-head temperature, a length-dependent scale of each query row)
  is, to a user of SDPA or FA4, Q multiplied by that factor before the call
  (`query_scaled`); the rest stays a bias or nothing. The product is taken once,
  outside the timed call, as a user folds it into Q's projection.
- Precomputed terms. A score_mod term that a peer's user precomputes once per
  shape (T5's bucketed bias, as a table over (h, q - k)) reaches the Flex peers
  precomputed where the caller says how (`PeerProblem.precomputed_score_mod`,
  set by the benchmark: cubridge.bench.distance_mods).

Every refusal is an `Unsupported` whose message says what the peer lacks.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

from cubridge.attention import Shape
from cubridge.spec.grids import Mod, arange, eval_score, index_grid, softcap_of
from cubridge.spec.model import Spec
from cubridge.spec.mods import BoundMods, aux_parameters, bind_mods


class Unsupported(ValueError):
    """This peer cannot run this variant here (the message says why)."""


Aux = Mapping[str, torch.Tensor]


def scalar_constants(aux: Aux) -> dict[str, object]:
    """The aux with every 0-d tensor replaced by its Python number (int, float
    or bool); tensors holding per-position or per-head data are kept."""
    return {name: t.item() if isinstance(t, torch.Tensor) and t.dim() == 0 else t
            for name, t in aux.items()}


def _probe(mods: BoundMods, device: torch.device) -> None:
    """Call the mods once on index 0 (valid for every aux) so a mod that needs
    a tensor method on its aux raises here, not inside a compiled peer."""
    b, h, q, k = index_grid(*(arange(1, device) for _ in range(4)))
    if mods.mask_mod is not None:
        mods.mask_mod(b, h, q, k)
    if mods.score_mod is not None:
        mods.score_mod(torch.zeros(1, 1, 1, 1, device=device), b, h, q, k)


def constant_mods(spec: Spec, aux: Aux) -> BoundMods:
    """The spec's mods as a user writes them for a peer: 0-d aux bound as Python
    constants (`scalar_constants`), the rest as captured tensors. A mod that
    does not work on a plain number (it calls a tensor method on the aux) keeps
    the tensors: that is then how its user must write it too."""
    constants = scalar_constants(aux)
    if all(constants[n] is aux[n] for n in aux):
        return bind_mods(spec, aux)
    mods = bind_mods(spec, constants)
    devices = [t.device for t in aux.values() if isinstance(t, torch.Tensor)]
    try:
        _probe(mods, devices[0] if devices else torch.device("cpu"))
    except Exception:  # noqa: BLE001 - any failure: the mod needs its tensors
        return bind_mods(spec, aux)
    return mods


def captured_tensors(fn: Callable[..., object] | None) -> list[str]:
    """Names of the tensors a bound mod captures (through its closure, one
    level of dicts deep: what `bind_mods` builds)."""
    if fn is None:
        return []
    found = []
    for name, value in inspect.getclosurevars(fn).nonlocals.items():
        if isinstance(value, torch.Tensor):
            found.append(name)
        elif isinstance(value, Mapping):
            found += [k for k, v in value.items() if isinstance(v, torch.Tensor)]
    return sorted(found)


def bound_constants(spec: Spec, aux: Aux) -> dict[str, object]:
    """The 0-d aux a peer receives as constants, for its note."""
    return {n: v for n, v in scalar_constants(aux).items()
            if not isinstance(v, torch.Tensor) and _read_by_mods(spec, n)}


def _read_by_mods(spec: Spec, name: str) -> bool:
    return any(fn is not None and name in aux_parameters(fn)
               for fn in (spec.mask_mod, spec.score_mod))


# -- Q scaled ---------------------------------------------------------------------------------

_ROWS_PER_CHUNK = 256  # a [B, H, Q, K] float64 grid may not fit at once


@dataclass(frozen=True)
class QueryScaled:
    """score_mod(s) = factor(b, h, q) * s + rest(b, h, q, k) with a factor that no key
    changes: attention on Q scaled row by row (q * factor), then `rest` as a score_mod
    (`s + rest`; None where rest is 0 everywhere)."""

    factor: torch.Tensor  # float32, broadcastable to q's [B, Hq, Sq, 1]
    rest: Mod | None
    varies: str  # which indices the factor depends on, for notes

    def scale(self, q: torch.Tensor) -> torch.Tensor:
        """q [B, Hq, Sq, D] times the factor, rounded once to q's dtype."""
        return (q.float() * self.factor).to(q.dtype)

    @property
    def note(self) -> str:
        return f"Q scaled {self.varies} (once, untimed)"


def query_scaled(score_mod: Mod | None, shape: Shape,
                 device: torch.device | str = "cpu") -> QueryScaled | None:
    """The Q-scaled form of `score_mod` at this shape, or None when it has none: not
    linear in the score, a factor that changes with the key or is not finite, or a
    factor of 1 (an additive bias, which the peers take as it is). Checked in
    float64 on every pair, row chunk by row chunk; a mod whose value needs fewer
    indices (a per-head factor) materialises only those."""
    if score_mod is None:
        return None
    b, h, q, k = index_grid(arange(shape.b, device), arange(shape.hq, device),
                            arange(shape.sq, device), arange(shape.sk, device))

    def at(value: float, rows: torch.Tensor) -> torch.Tensor:
        s = torch.full((1, 1, 1, 1), value, dtype=torch.float64, device=device)
        return eval_score(score_mod, s, b, h, rows, k).to(torch.float64)

    factors, rest_is_zero = [], True
    for start in range(0, shape.sq, _ROWS_PER_CHUNK):
        rows = q[:, :, start:start + _ROWS_PER_CHUNK]
        base = at(0.0, rows)
        slope = at(1.0, rows) - base
        if not all(torch.allclose(at(v, rows), base + v * slope, rtol=1e-9, atol=1e-9)
                   for v in (-7.25, 13.0)):
            return None
        if not torch.allclose(slope, slope[..., :1].expand_as(slope), rtol=1e-9, atol=1e-9):
            return None
        factors.append(slope[..., :1].expand(*slope.shape[:2], rows.shape[2], 1))
        rest_is_zero = rest_is_zero and not base.any()
    factor = torch.cat(factors, dim=2)
    if not torch.isfinite(factor).all() or torch.allclose(factor, torch.ones_like(factor),
                                                           rtol=1e-9, atol=1e-9):
        return None
    # keep only the dimensions the factor varies over
    for dim in (0, 1, 2):
        if factor.shape[dim] > 1 and torch.equal(factor, factor.narrow(dim, 0, 1)
                                                 .expand_as(factor)):
            factor = factor.narrow(dim, 0, 1)
    dims = [name for name, size in zip(("batch", "head", "query row"), factor.shape[:3],
                                       strict=True) if size > 1]
    varies = "per " + " and ".join(dims) if dims else "by a constant"
    return QueryScaled(factor.float(), None if rest_is_zero else _rest_of(score_mod), varies)


def _rest_of(score_mod: Mod) -> Mod:
    def rest(score, b, h, q_idx, kv_idx):  # noqa: ANN001, ANN202 - a mod's signature
        return score + score_mod(torch.zeros_like(score), b, h, q_idx, kv_idx)
    return rest


# -- FlashAttention-4's flags ------------------------------------------------------------------

FA4_FLAGS = "causal, window_size, softcap, learnable_sink"
_DSL = ("FA4 takes other {what}s only as CuTe-DSL {what} code, which FlexAttention's "
        "FLASH backend (peer flex_flash) compiles from the spec's mods")


@dataclass(frozen=True)
class FA4Flags:
    """flash_attn.cute.flash_attn_func's keyword arguments for one variant."""

    causal: bool
    window_size: tuple[int | None, int | None] = (None, None)
    softcap: float = 0.0

    def kwargs(self) -> dict[str, object]:
        return {"causal": self.causal, "window_size": self.window_size,
                "softcap": self.softcap}

    @property
    def note(self) -> str:
        parts = ["causal" if self.causal else ""]
        if self.window_size[0] is not None:
            parts.append(f"window_size=({self.window_size[0]}, {self.window_size[1]})")
        if self.softcap:
            parts.append(f"softcap={self.softcap:g}")
        return ", ".join(p for p in parts if p)


def fa4_flags(spec: Spec, shape: Shape, structure: str | None,
              band: tuple[int, int] | None, score_mod: Callable[..., torch.Tensor] | None,
              device: torch.device | str = "cpu") -> FA4Flags:
    """FA4's flags for a variant whose mask has this `structure` (from the exact
    pair count: 'full', 'causal', 'window<W>', 'band', ...; cubridge.bench.flops),
    the (lo, hi) of q - k when the mask is exactly that band, and this bound
    score_mod; raises Unsupported saying what the flags lack."""
    if spec.normalizer != "softmax":
        raise Unsupported(f"FA4 computes softmax attention; {spec.name} uses a "
                          f"{spec.normalizer} normaliser")
    if structure is None:
        raise Unsupported("FA4: the mask's structure is unknown here (the benchmark "
                          "finds it from the exact pair count)")
    window = int(structure[len("window"):]) if structure.startswith("window") else None
    causal = structure == "causal" or window is not None
    # FA4's local window: keys q - left ... q + right, so a band holding the diagonal
    local = structure == "band" and band is not None and band[0] <= 0 <= band[1]
    if structure != "full" and not causal and not local:
        raise Unsupported(f"FA4's flags ({FA4_FLAGS}) express full, causal and causal "
                          f"sliding-window masks and bands around the diagonal; "
                          f"{spec.name}'s mask is {structure}. "
                          + _DSL.format(what="mask_mod"))
    if (causal or local) and shape.sq != shape.sk:
        raise Unsupported(f"FA4 aligns its causal mask and windows to the bottom right; "
                          f"{spec.name}'s are top-left and Sq {shape.sq} != Sk {shape.sk}")
    softcap = 0.0
    if score_mod is not None:
        cap = softcap_of(score_mod, device)
        if cap is None:
            raise Unsupported(f"FA4's flags ({FA4_FLAGS}) express a softcap score_mod only; "
                              f"{spec.name}'s score_mod is not c * tanh(s / c). "
                              + _DSL.format(what="score_mod"))
        softcap = cap
    window_size: tuple[int | None, int | None] = (None, None)
    if window is not None:
        window_size = (window - 1, 0)
    elif local:
        window_size = (band[1], -band[0])
    return FA4Flags(causal, window_size, softcap)
