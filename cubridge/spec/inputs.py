"""Random problem instances for a spec: q, k, v from a named distribution and
the spec's aux tensors, validated against its declared aux shapes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from cubridge.attention import Shape
from cubridge.spec.errors import (
    SpecError,
    describe_exception,
    location_in_traceback,
    location_of,
    location_of_name,
    self_attention_hint,
)
from cubridge.spec.model import Spec
from cubridge.spec.shapes import eval_dim

# normal: N(0, 1). scaled: N(0, 100), so that scores are large and softmax is
# peaked (softcaps and overflow-prone code show). near_ties: each key is one of
# four vectors plus tiny noise, so scores tie or nearly tie in groups (the
# running max sees equal candidates; bf16 rounding makes many ties exact).
DISTRIBUTIONS = ("normal", "scaled", "near_ties")
TIE_GROUPS = 4
TIE_NOISE = 1e-3


@dataclass
class Inputs:
    """One problem instance, on CPU. q, k, v are in the case dtype; aux are as
    the spec made them."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    aux: dict[str, torch.Tensor]
    shape: Shape
    dtype: torch.dtype
    distribution: str

    def tensors(self) -> dict[str, torch.Tensor]:
        return {"q": self.q, "k": self.k, "v": self.v, **self.aux}

    def clone(self) -> Inputs:
        return Inputs(self.q.clone(), self.k.clone(), self.v.clone(),
                      {n: t.clone() for n, t in self.aux.items()},
                      self.shape, self.dtype, self.distribution)

    def to(self, device: torch.device | str) -> Inputs:
        return Inputs(self.q.to(device), self.k.to(device), self.v.to(device),
                      {n: t.to(device) for n, t in self.aux.items()},
                      self.shape, self.dtype, self.distribution)

    def to_float64(self) -> Inputs:
        """The same values in float64 (floating aux too), for the reference."""
        aux = {n: t.double() if t.is_floating_point() else t for n, t in self.aux.items()}
        return Inputs(self.q.double(), self.k.double(), self.v.double(), aux,
                      self.shape, torch.float64, self.distribution)


def _randn(shape: tuple[int, ...], g: torch.Generator) -> torch.Tensor:
    return torch.randn(shape, generator=g, device=g.device, dtype=torch.float32)


def make_qkv(
    shape: Shape, dtype: torch.dtype, distribution: str, g: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k, v in cubridge.attention's layouts, drawn in float32 on the
    generator's device from `distribution` (DISTRIBUTIONS), then cast: the one
    input maker of verification, spec checks and the benchmark."""
    qs = (shape.b, shape.hq, shape.sq, shape.d)
    ks = (shape.b, shape.hk, shape.sk, shape.d)
    vs = (shape.b, shape.hk, shape.sk, shape.head_dim_v)
    if distribution == "normal":
        q, k, v = _randn(qs, g), _randn(ks, g), _randn(vs, g)
    elif distribution == "scaled":
        q, k, v = 10 * _randn(qs, g), 10 * _randn(ks, g), 10 * _randn(vs, g)
    elif distribution == "near_ties":
        q, v = _randn(qs, g), _randn(vs, g)
        centres = _randn((shape.b, shape.hk, TIE_GROUPS, shape.d), g)
        pick = torch.randint(0, TIE_GROUPS, (shape.b, shape.hk, shape.sk), generator=g,
                             device=g.device)
        k = torch.gather(centres, 2, pick[..., None].expand(-1, -1, -1, shape.d))
        k = k + TIE_NOISE * _randn(ks, g)
    else:
        raise ValueError(f"unknown distribution {distribution!r}; known: {DISTRIBUTIONS}")
    return q.to(dtype), k.to(dtype), v.to(dtype)


def make_aux(spec: Spec, shape: Shape, g: torch.Generator) -> dict[str, torch.Tensor]:
    """The spec's aux tensors for `shape` on CPU, checked: a mapping of
    identifier names to CPU tensors with the declared shapes."""
    if spec.self_attention and shape.sq != shape.sk:
        raise SpecError(f"{spec.name} is a self-attention spec (SELF_ATTENTION = True): it "
                        f"takes Sq = Sk, not shape {shape}", location_of_name(spec.path,
                                                                             "SELF_ATTENTION"))
    if spec.make_aux is None:
        return {}
    where = location_of(spec.make_aux)
    try:
        aux = spec.make_aux(shape, g, torch.device("cpu"))
    except Exception as exc:
        loc = location_in_traceback(exc, spec.path) if spec.path else where
        raise SpecError(f"make_aux raised for shape {shape}: {describe_exception(exc)}"
                        f"{self_attention_hint(spec, shape)}", loc) from exc
    if not isinstance(aux, Mapping):
        raise SpecError(f"make_aux must return a dict of tensors, got {type(aux).__name__}",
                        where)
    checked: dict[str, torch.Tensor] = {}
    for name, value in aux.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise SpecError(f"make_aux returned key {name!r}, which is not an identifier", where)
        if name in ("q", "k", "v", "scale", "out", "lse"):
            raise SpecError(f"make_aux key {name!r} clashes with an attention argument", where)
        if not isinstance(value, torch.Tensor):
            raise SpecError(f"make_aux returned {name}={type(value).__name__}; aux values must "
                            "be tensors (a scalar is a 0-d tensor)", where)
        if value.device.type != "cpu":
            raise SpecError(f"make_aux returned {name} on {value.device}, not on the requested "
                            "device cpu", where)
        checked[name] = value
    _check_declared_shapes(spec, shape, checked, where)
    return checked


def _check_declared_shapes(
    spec: Spec, shape: Shape, aux: dict[str, torch.Tensor], where: str | None
) -> None:
    if spec.aux_shapes is None:
        return
    declared, made = set(spec.aux_shapes), set(aux)
    if declared != made:
        missing, extra = sorted(declared - made), sorted(made - declared)
        raise SpecError(f"make_aux keys differ from AUX_SHAPES for shape {shape}: missing "
                        f"{missing}, undeclared {extra}", where)
    for name, dims in spec.aux_shapes.items():
        want = tuple(eval_dim(d, shape) for d in dims)
        if tuple(aux[name].shape) != want:
            raise SpecError(f"make_aux returned {name} of shape {tuple(aux[name].shape)} for "
                            f"shape {shape}; AUX_SHAPES declares {dims} = {want}", where)


def make_inputs(
    spec: Spec, shape: Shape, dtype: torch.dtype, distribution: str, g: torch.Generator
) -> Inputs:
    """A fresh instance: q, k, v drawn from `distribution`, then the aux."""
    q, k, v = make_qkv(shape, dtype, distribution, g)
    return Inputs(q, k, v, make_aux(spec, shape, g), shape, dtype, distribution)
