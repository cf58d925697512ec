"""The hook plan of a spec: everything the renderers need, decided once.

`plan_hooks(spec)` traces the spec's mods, picks how blocks are classified and
fixes the aux tensors the hooks read. The CuIR renderer (transfer.target) and
the CUDA renderer (lower.hook_header) both consume the same plan, so the
target CuIR and the CUDA header cannot disagree about what the hooks are.

Block classification:
- "none": no mask; every block FULL (the kernel masks the sequence tail);
- "interval": closed form, interval arithmetic on the mask (positions,
  constants, 0-d aux scalars, aux sizes);
- "table": the mask reads aux tensors element by element (document ids...),
  or uses ops without interval rules (bit operations: Morton orders); tiles
  are classified on the host from the traced mask evaluated on the grid
  (block_table), never from the untraced mod.

Tensors the mods capture are lifted to aux (cubridge.transfer.captures): the
plan keeps them (`captured`) and supplies them to calls that do not pass them.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

import torch

from cubridge.attention import Shape
from cubridge.spec.errors import SpecError, location_of
from cubridge.spec.model import Spec
from cubridge.spec.mods import bind_mods, elementwise_mask, elementwise_score
from cubridge.transfer import expr, interval
from cubridge.transfer.block_table import TABLE_CACHE, BlockTable
from cubridge.transfer.captures import Captures
from cubridge.transfer.score_masks import (
    FLOOR_MASK_LIMIT,
    is_bare_score,
    split_floor_mask,
    split_score_mask,
)
from cubridge.transfer.torch_render import grid_function
from cubridge.transfer.trace import AuxInfo, TracedMod, trace_mask_mod, trace_score_mod

Classification = Literal["none", "interval", "table"]

# Tile of the host-side tables when the caller names none; the pipeline passes
# its library kernel's (LibraryKernel.table_block). Lookups stay correct for
# other kernel tiles (they combine tiles).
DEFAULT_TABLE_BLOCK = (32, 64)


@dataclass(frozen=True)
class HookPlan:
    name: str
    source: str  # the spec file, for headers and messages
    score: TracedMod | None
    mask: TracedMod | None
    normalizer: Literal["softmax", "sigmoid", "relu"]
    classification: Classification
    aux: tuple[AuxInfo, ...]  # spec aux tensors the hooks read, in slot order
    aux_names: tuple[str, ...] = ()  # every aux tensor the spec makes (callers pass all)
    mask_fn: Callable[..., torch.Tensor] | None = None  # the original mod (messages only)
    table_block: tuple[int, int] = DEFAULT_TABLE_BLOCK
    table_depends_on_b: bool = False
    table_depends_on_h: bool = False
    # tensors the mods capture, lifted to aux: name -> tensor (not in to_json:
    # plan_from_json traces the spec again for them)
    captured: Mapping[str, torch.Tensor] = dataclasses.field(default_factory=dict,
                                                             compare=False)
    # each aux tensor's sizes known before any call (None: per problem): a captured
    # tensor's shape, the integers of a spec's AUX_SHAPES
    fixed_dims: Mapping[str, tuple[int | None, ...]] = dataclasses.field(
        default_factory=dict, compare=False)
    # the mask holds score_mod's -inf condition (transfer.score_masks), which
    # score no longer applies
    mask_in_score: bool = False
    # a floor mask's masked score C (transfer.score_masks: finfo.min, not -inf): the
    # rows the mask leaves no key weigh every key alike, which a pass after the
    # kernel writes (cubridge.empty_rows, HookHeader.fill_empty_rows); None: -inf,
    # such rows are out = 0
    mask_floor: float | None = None

    @property
    def elementwise(self) -> bool:
        return self.normalizer != "softmax"

    def with_captured(self, aux: Mapping[str, torch.Tensor],
                      device: torch.device | None = None) -> dict[str, torch.Tensor]:
        """`aux` plus the captured tensors it does not name (moved to `device`)."""
        out = dict(aux)
        for name, t in self.captured.items():
            if name not in out:
                out[name] = t if device is None else self._captured_on(name, t, device)
        return out

    def supplying_captured(self, fn: Callable[..., object]) -> Callable[..., object]:
        """`fn(q, k, v, scale=None, **aux)` given the captured tensors a call
        leaves out (the target CuIR reads them from its aux, as the kernel does)."""
        if not self.captured:
            return fn

        def call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None = None,
                 **aux: torch.Tensor) -> object:
            return fn(q, k, v, scale=scale, **self.with_captured(aux, q.device))

        call.__name__ = getattr(fn, "__name__", "attention")
        call.__qualname__ = getattr(fn, "__qualname__", call.__name__)  # reports name it
        return call

    def _captured_on(self, name: str, t: torch.Tensor, device: torch.device) -> torch.Tensor:
        if t.device == device:
            return t
        cache = self._device_copies
        key = (name, str(device))
        if key not in cache or cache[key][0] is not t or cache[key][1] != t._version:
            cache[key] = (t, t._version, t.to(device))
        return cache[key][2]

    @functools.cached_property
    def _device_copies(self) -> dict[tuple[str, str], tuple[torch.Tensor, int, torch.Tensor]]:
        return {}

    @functools.cached_property
    def _mask_reads(self) -> tuple[str, ...]:
        # (per plan, not per call: the walk was a fifth of a table mask's host time)
        return tuple(expr.aux_reads(self.mask.node)) if self.mask is not None else ()

    @functools.cached_property
    def _mask_grid(self) -> Callable[..., torch.Tensor]:
        # (grid_function's cache hashes the whole expression on every lookup)
        assert self.mask is not None
        return grid_function(self.mask.node)

    def mask_aux(self, aux: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The aux tensors the traced mask reads."""
        if self.mask is None:
            return {}
        reads = self._mask_reads
        full = self.with_captured(aux)
        missing = [n for n in reads if n not in full]
        if missing:
            raise KeyError(f"the mask of spec {self.name!r} reads aux {missing}, not given "
                           f"(got {sorted(aux)})")
        return {n: full[n] for n in reads}

    def to_json(self) -> dict[str, object]:
        """Everything of the plan but the mask function (the spec has it):
        `plan_from_json(data, spec)` rebuilds the plan without tracing again."""
        def mod(m: TracedMod | None) -> dict[str, object] | None:
            if m is None:
                return None
            return {"node": expr.node_to_json(m.node), "where": m.where,
                    "aux": [_aux_json(a) for a in m.aux]}

        return {"name": self.name, "source": self.source, "score_mod": mod(self.score),
                "mask_mod": mod(self.mask), "normalizer": self.normalizer,
                "classification": self.classification, "aux": [_aux_json(a) for a in self.aux],
                "aux_names": list(self.aux_names), "table_block": list(self.table_block),
                "table_depends_on_b": self.table_depends_on_b,
                "table_depends_on_h": self.table_depends_on_h,
                "captured": [_aux_json(a) for a in self.aux if a.name in self.captured],
                **({"fixed_dims": {n: list(d) for n, d in self.fixed_dims.items()}}
                   if self.fixed_dims else {}),
                **({"mask_in_score": True} if self.mask_in_score else {}),
                **({"mask_floor": self.mask_floor} if self.mask_floor is not None else {})}

    def block_table(self, shape: Shape, aux: Mapping[str, torch.Tensor],
                    device: torch.device | str | None = None) -> BlockTable:
        """The (cached) tile table for one problem and its aux inputs, from the
        traced mask evaluated on the index grid, on `device` (default: the aux
        tensors', else the CPU)."""
        if self.classification != "table" or self.mask is None:
            raise ValueError(f"spec {self.name!r} classifies blocks by {self.classification}, "
                             "not by table")
        bm, bn = self.table_block
        if device is None:
            device = next(iter(aux.values())).device if aux else torch.device("cpu")
        device = torch.device(device)
        reads = {n: self._captured_on(n, t, device) if n in self.captured and n not in aux
                 else t for n, t in self.mask_aux(aux).items()}
        return TABLE_CACHE.get(self._mask_grid, shape, bm, bn, reads,
                               depends_on_b=self.table_depends_on_b,
                               depends_on_h=self.table_depends_on_h, device=device)


def _aux_json(a: AuxInfo) -> dict[str, object]:
    return {"name": a.name, "dtype": str(a.dtype).removeprefix("torch."), "rank": a.rank}


def _aux_info(data: Mapping[str, object]) -> AuxInfo:
    return AuxInfo(str(data["name"]), getattr(torch, str(data["dtype"])), int(data["rank"]))


def plan_from_json(data: Mapping[str, object], spec: Spec) -> HookPlan:
    """The plan `HookPlan.to_json` wrote, with the spec's mask_mod reattached
    (and, when the mods capture tensors, those tensors, from a new trace that
    must give the same expressions)."""
    def mod(raw: object) -> TracedMod | None:
        if raw is None:
            return None
        return TracedMod(expr.node_from_json(raw["node"]),  # type: ignore[index]
                         tuple(_aux_info(a) for a in raw["aux"]),  # type: ignore[index]
                         str(raw["where"]))  # type: ignore[index]

    if data["name"] != spec.name:
        raise ValueError(f"the hook plan is of spec {data['name']!r}, not {spec.name!r}")
    captured: dict[str, torch.Tensor] = {}
    if data.get("captured"):
        again = plan_hooks(spec, table_block=tuple(data["table_block"]))  # type: ignore[arg-type]
        if again.to_json() != {k: v for k, v in data.items()}:
            raise ValueError(f"spec {spec.name!r}: its mods now trace differently from the "
                             "saved hook plan; run the spec again")
        captured = dict(again.captured)
    return HookPlan(
        name=str(data["name"]), source=str(data["source"]), score=mod(data["score_mod"]),
        mask=mod(data["mask_mod"]), normalizer=data["normalizer"],  # type: ignore[arg-type]
        classification=data["classification"],  # type: ignore[arg-type]
        aux=tuple(_aux_info(a) for a in data["aux"]),  # type: ignore[union-attr]
        aux_names=tuple(data["aux_names"]),  # type: ignore[arg-type]
        mask_fn=spec.mask_mod, table_block=tuple(data["table_block"]),  # type: ignore[arg-type]
        table_depends_on_b=bool(data["table_depends_on_b"]),
        table_depends_on_h=bool(data["table_depends_on_h"]), captured=captured,
        fixed_dims={str(n): tuple(d) for n, d in data.get("fixed_dims", {}).items()},  # type: ignore[attr-defined]
        mask_in_score=bool(data.get("mask_in_score", False)),
        mask_floor=None if data.get("mask_floor") is None else float(data["mask_floor"]))


def _classification(mask: TracedMod | None) -> Classification:
    if mask is None:
        return "none"
    reads = expr.aux_reads(mask.node)
    if any(rank > 0 for rank in reads.values()) or not interval.has_rules(mask.node):
        return "table"
    return "interval"


def example_aux(spec: Spec) -> dict[str, torch.Tensor]:
    """Aux tensors of a small problem of the spec: their dtypes and ranks are
    what tracing needs (values do not matter)."""
    if spec.make_aux is None:
        return {}
    cfg = spec.configs[0]
    shape = Shape.from_config(cfg, b=1, sq=min(spec.seq_lens))
    gen = torch.Generator().manual_seed(0)
    return dict(spec.make_aux(shape, gen, torch.device("cpu")))


def plan_hooks(spec: Spec, aux: Mapping[str, torch.Tensor] | None = None, *,
               table_block: tuple[int, int] = DEFAULT_TABLE_BLOCK) -> HookPlan:
    """Trace the spec's mods and decide how its hooks are built."""
    aux = example_aux(spec) if aux is None else dict(aux)
    captures = Captures([spec.score_mod, spec.mask_mod], taken=aux)
    score = trace_score_mod(spec.score_mod, aux, captures) if spec.score_mod else None
    mask = trace_mask_mod(spec.mask_mod, aux, captures) if spec.mask_mod else None
    captured = {n: t for m in (score, mask) if m for n, t in m.captured}
    infos = {a.name: a for m in (score, mask) if m for a in m.aux}
    score, mask, mask_in_score, floor = _lift_score_mask(score, mask, spec.normalizer)
    ordered = tuple(infos[n] for n in [*aux, *captured] if n in infos)
    classification = _classification(mask)
    mask_vars = expr.free_vars(mask.node) if mask else set()
    return HookPlan(
        name=spec.name,
        source=str(spec.path) if spec.path else spec.name,
        score=score,
        mask=mask,
        normalizer=spec.normalizer,
        classification=classification,
        aux=ordered,
        aux_names=tuple(aux),
        mask_fn=spec.mask_mod,
        table_block=table_block,
        table_depends_on_b="b" in mask_vars,
        table_depends_on_h="h" in mask_vars,
        captured=captured,
        fixed_dims=_fixed_dims(spec, ordered, captured),
        mask_in_score=mask_in_score,
        mask_floor=floor,
    )


def _lift_score_mask(score: TracedMod | None, mask: TracedMod | None, normalizer: str
                     ) -> tuple[TracedMod | None, TracedMod | None, bool, float | None]:
    """score_mod's -inf condition moved into the mask, else its floor mask's
    (transfer.score_masks; under softmax only without a mask_mod): (score, mask,
    whether one moved, the floor mask's C where rows it leaves no key need the pass
    after the kernel). A score_mod left with nothing to do goes."""
    if score is None:
        return score, mask, False, None
    kept, condition = split_score_mask(score.node)
    floor = None
    # Under softmax, beside a mask_mod the rows a floor mask leaves no key weigh the
    # mask_mod's keys alike, not all Sk: no pass after the kernel gives that. Under an
    # elementwise normaliser (sigmoid, relu) a pair at C weighs nothing, as at -inf:
    # the mask is exact, with or without a mask_mod, and no row needs a pass.
    if condition is None and (normalizer != "softmax" or mask is None):
        split = split_floor_mask(score.node)
        if split is not None:
            kept, condition, c = split
            floor = c if normalizer == "softmax" else None  # (elementwise: no pass)
    if condition is None:
        return score, mask, False, None
    node = condition if mask is None else expr.apply("and", mask.node, condition)
    names = set(expr.aux_reads(node))
    reads = {a.name: a for m in (mask, score) if m for a in m.aux if a.name in names}
    taken = {n: t for m in (mask, score) if m for n, t in m.captured if n in names}
    lifted = TracedMod(node, tuple(reads.values()), mask.where if mask else score.where,
                       tuple(taken.items()))
    if is_bare_score(kept):
        return None, lifted, True, floor
    names = set(expr.aux_reads(kept))
    return (TracedMod(kept, tuple(a for a in score.aux if a.name in names), score.where,
                      tuple((n, t) for n, t in score.captured if n in names)), lifted, True,
            floor)


def _fixed_dims(spec: Spec, read: tuple[AuxInfo, ...],
                captured: Mapping[str, torch.Tensor]) -> dict[str, tuple[int | None, ...]]:
    """The sizes of the read aux tensors that no problem changes."""
    declared = spec.aux_shapes or {}
    out: dict[str, tuple[int | None, ...]] = {}
    for a in read:
        if a.name in captured:
            out[a.name] = tuple(captured[a.name].shape)
        elif a.name in declared and any(isinstance(d, int) for d in declared[a.name]):
            out[a.name] = tuple(d if isinstance(d, int) else None for d in declared[a.name])
    return out


def check_trace(spec: Spec, plan: HookPlan, shape: Shape,
                aux: Mapping[str, torch.Tensor] | None = None) -> None:
    """The traced expressions compute what the mods compute, element by element
    (FlexAttention's semantics), on every (b, h, q, k) of `shape`; SpecError at
    the mod's line where they differ (a mod whose Python does something else
    when called on real tensors than when traced). Every stage after the trace
    uses the expressions, so this is what ties them to the mods."""
    aux = example_aux(spec) if aux is None else dict(aux)
    # The mods get floating aux in float64, as the verifier's reference does: the
    # traced hooks compute in float32, and a bf16 / fp16 aux met by an index
    # (`bias[h] * (q_idx - kv_idx)`) would otherwise be rounded in its own dtype
    # per element and blamed on the trace.
    mods = bind_mods(spec, {n: t.double() if t.is_floating_point() else t
                            for n, t in aux.items()})
    # on the CPU, captured tensors included (FlexAttention users capture on the GPU)
    full = {n: t.cpu() for n, t in plan.with_captured(aux, torch.device("cpu")).items()}
    idx = [torch.arange(n, dtype=torch.int32) for n in (shape.b, shape.hq, shape.sq, shape.sk)]
    grid = [i.view([-1 if d == j else 1 for d in range(4)]) for j, i in enumerate(idx)]
    scores = 4 * torch.randn(shape.b, shape.hq, shape.sq, shape.sk,
                             generator=torch.Generator().manual_seed(0))
    checks = []
    if plan.mask_in_score:
        # score_mod's -inf condition (or a floor mask's) is in the plan's mask: compare
        # the mods' scores with the plan's where its mask allows, the masked score
        # (-inf, or the floor's C) elsewhere
        want = elementwise_score(mods.score_mod)(scores, *idx).double()
        if mods.mask_mod is not None:
            want = want.masked_fill(~elementwise_mask(mods.mask_mod)(*idx), -math.inf)
        assert plan.mask is not None
        got = scores if plan.score is None else grid_function(plan.score.node)(
            *grid, score_=scores, **full)
        allowed = grid_function(plan.mask.node)(*grid, **full)
        masked = -math.inf if plan.mask_floor is None else plan.mask_floor
        got = got.double().masked_fill(~allowed, masked).expand_as(want)
        if plan.normalizer != "softmax":  # (a floor mask's C weighs nothing there, as -inf)
            want = want.masked_fill(want <= FLOOR_MASK_LIMIT, -math.inf)
        checks.append(("score_mod", spec.score_mod, want, got))
    if plan.mask is not None and mods.mask_mod is not None and not plan.mask_in_score:
        want = elementwise_mask(mods.mask_mod)(*idx)
        got = grid_function(plan.mask.node)(*grid, **full).expand_as(want)
        checks.append(("mask_mod", spec.mask_mod, want, got))
    if plan.score is not None and mods.score_mod is not None and not plan.mask_in_score:
        want = elementwise_score(mods.score_mod)(scores, *idx).double()
        got = grid_function(plan.score.node)(*grid, score_=scores, **full).expand_as(want).double()
        checks.append(("score_mod", spec.score_mod, want, got))
    for kind, fn, want, got in checks:
        if want.dtype == torch.bool:
            bad = want != got
        else:
            bad = ~torch.isclose(got, want, rtol=1e-4, atol=1e-4, equal_nan=True)
        if bad.any():
            b, h, q, k = (int(i) for i in bad.nonzero()[0])
            raise SpecError(
                f"the traced {kind} differs from the {kind} itself at (b={b}, h={h}, q={q}, "
                f"k={k}): {got[b, h, q, k].item()} traced, {want[b, h, q, k].item()} called "
                f"per element on shape {shape}; it computes something else when called on "
                "tensors than when traced", location_of(fn))
