"""`cubridge spec check`: run a loaded spec through everything a stage will ask
of it, on small shapes and on a long one chosen from the spec's own constants
(cubridge.spec.lengths), and say what it found. `cubridge run` runs it first."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from cubridge.attention import Shape
from cubridge.spec.errors import (
    SpecError,
    describe_exception,
    location_in_traceback,
    location_of,
    self_attention_hint,
)
from cubridge.spec.inputs import DISTRIBUTIONS, Inputs, make_aux, make_inputs
from cubridge.spec.lengths import MAX_LONG, covered_constant, long_check_shapes
from cubridge.spec.model import Spec
from cubridge.spec.mods import float64_default, mods_attention
from cubridge.spec.reference import call_reference
from cubridge.spec.shapes import check_shapes, fit_shapes, smoke_shape, verification_shapes

# float64 reference and float64 mods evaluator compute the same sums in a
# different order; anything above this is a disagreement, not rounding.
MODS_AGREEMENT = 1e-8


@dataclass
class CheckSummary:
    spec: Spec
    shapes: list[Shape] = field(default_factory=list)
    reference_calls: int = 0
    mods_max_error: float | None = None  # None: the spec has no mods
    empty_rows: int = 0
    long_shapes: list[Shape] = field(default_factory=list)  # mods vs reference, long
    largest_constant: int = 0

    def lines(self) -> list[str]:
        s = self.spec
        aux = ", ".join(f"{n}{list(d)}" for n, d in (s.aux_shapes or {}).items()) or (
            "made by make_aux (shapes not declared)" if s.make_aux else "none")
        mods = ", ".join(n for n, fn in (("mask_mod", s.mask_mod), ("score_mod", s.score_mod))
                         if fn is not None) or "none"
        if self.mods_max_error is not None:
            agree = f"agree with reference (max rel error {self.mods_max_error:.1e})"
        elif s.mods_describe_reference:
            agree = "(the reference is plain attention)"
        else:
            agree = "(the reference is more than mods can say: peers and hooks cannot run it)"
        return [
            f"spec        {s.name}  ({s.path})",
            f"            {s.description}",
            f"normalizer  {s.normalizer}; reference returns "
            f"{'(out, lse)' if s.returns_lse else 'out'}",
            f"configs     {', '.join(f'{c.name} {c.hq}/{c.hk}/{c.d}' for c in s.configs)}",
            f"seq lens    {', '.join(map(str, s.seq_lens))}",
            f"dtypes      {', '.join(str(d).removeprefix('torch.') for d in s.dtypes)}",
            f"aux         {aux}",
            f"mods        {mods}  {agree}",
            f"checked     {self.reference_calls} reference calls on {len(self.shapes)} shapes; "
            f"{self.empty_rows} rows with no allowed key seen",
            *self._long_lines(),
            "ok",
        ]

    def brief(self) -> str:
        """One line: what was compared, up to which lengths."""
        s = self.spec
        mods = " and ".join(n for n, fn in (("mask_mod", s.mask_mod), ("score_mod", s.score_mod))
                            if fn is not None)
        what = f"{mods} agree with the reference" if mods else "reference checked"
        if self.long_shapes:
            shape = self.long_shapes[0]
            what += (f" up to Sq x Sk = {shape.sq} x {shape.sk} (largest integer constant "
                     f"{self.largest_constant})")
        return f"{what}, dtypes {', '.join(str(d).removeprefix('torch.') for d in s.dtypes)}"

    def _long_lines(self) -> list[str]:
        if not self.long_shapes:
            return []
        s = self.long_shapes[0]
        covered = s.sk > 2 * self.largest_constant
        what = "mods vs reference" if self.mods_max_error is not None else "reference"
        return [f"long case   {what} at Sq x Sk = {s.sq} x {s.sk} (largest integer constant "
                f"in the spec's code: {self.largest_constant}"
                + ("" if covered else f"; twice it is past the longest case checked, {MAX_LONG}")
                + ")"]


def check_digest() -> str:
    """A hash of the code that decides what the spec check checks (cubridge/spec),
    so that a cached check is redone when that code changes."""
    import hashlib
    from pathlib import Path

    h = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        h.update(path.name.encode() + path.read_bytes())
    return h.hexdigest()[:16]


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    denom = float(b.norm())
    return float((a - b).norm()) / (denom if denom > 0 else 1.0)


def _mods_location(spec: Spec, exc: BaseException | None = None) -> str | None:
    """Where to blame the mods: the raising line in the spec file, else the mod
    that can change what disagrees (score_mod before mask_mod)."""
    if exc is not None and spec.path is not None:
        found = location_in_traceback(exc, spec.path)
        if found and found != str(spec.path):
            return found
    return location_of(spec.score_mod or spec.mask_mod)


def _mods_raised(spec: Spec, shape: Shape, exc: Exception) -> SpecError:
    hint = ""
    if any(m in str(exc) for m in ("ambiguous", "Boolean value of Tensor",
                                    "data-dependent control flow")):
        hint = ("; mods are called on index tensors (per element under torch.vmap, as "
                "FlexAttention calls them): use tensor ops and torch.where, not a Python "
                "`if` on a tensor")
    elif any(m in str(exc) for m in (".item()", "can be converted to an index",
                                      "only integer tensors")):
        hint = ("; mods are called on index tensors (per element under torch.vmap, as "
                "FlexAttention calls them), so a Python list or number cannot be indexed or "
                "converted with one (`SLOPES[h]`, `int(q_idx)`): keep the values in a "
                "torch.tensor, or an aux tensor, and index that")
    hint += self_attention_hint(spec, shape)
    return SpecError(f"mods raised on shape {shape}: {describe_exception(exc)}{hint}",
                     _mods_location(spec, exc))


def probe_mods(spec: Spec, seed: int = 0) -> None:
    """Call the spec's mods once, as every path will, on a tiny shape (float64):
    a SpecError with the raising line (and the torch.where hint for a Python
    `if` on a tensor) when they raise. The route asks this before tracing, so
    a mod no path can run is never sent to the LLM path."""
    if spec.mask_mod is None and spec.score_mod is None:
        return
    shape = smoke_shape(spec.configs)
    inputs = make_inputs(spec, shape, torch.float64, "normal",
                         torch.Generator().manual_seed(seed)).to_float64()
    try:
        mods_attention(spec, inputs.q, inputs.k, inputs.v, inputs.aux)
    except Exception as exc:
        raise _mods_raised(spec, shape, exc) from exc


def _which_mods(spec: Spec) -> str:
    """With both mods, either may be the one that is wrong: name both lines."""
    if spec.mask_mod is None or spec.score_mod is None:
        return ""
    return (f"; score_mod at {location_of(spec.score_mod)}, mask_mod at "
            f"{location_of(spec.mask_mod)}")


def check_mods(spec: Spec, shapes: list[Shape], seed: int = 0,
               distributions: tuple[str, ...] = DISTRIBUTIONS, note: str = "") -> float:
    """Max relative disagreement between mods and reference over `shapes` and
    `distributions`, float64; raises SpecError past MODS_AGREEMENT (its
    message ends with `note`)."""
    worst = 0.0
    where = _mods_location(spec)
    for i, shape in enumerate(shapes):
        for dist in distributions:
            g = torch.Generator().manual_seed(seed + i)
            inputs = make_inputs(spec, shape, torch.float64, dist, g).to_float64()
            with float64_default():  # (as the mods are evaluated: mods.float64_default)
                ref_out, ref_lse = call_reference(spec, inputs, expect_lse=spec.returns_lse)
            try:
                out, lse = mods_attention(spec, inputs.q, inputs.k, inputs.v, inputs.aux)
            except Exception as exc:
                raise _mods_raised(spec, shape, exc) from exc
            err = _relative(out, ref_out)
            if ref_lse is not None and lse is not None:
                if not torch.equal(torch.isinf(lse), torch.isinf(ref_lse)):
                    differ = torch.isinf(lse) != torch.isinf(ref_lse)
                    first = int(differ.flatten().nonzero()[0]) % shape.sq
                    raise SpecError(f"mods and reference disagree on which rows have no allowed "
                                    f"key ({int(differ.sum())} rows, the first q={first}) on "
                                    f"shape {shape}", location_of(spec.mask_mod) or where)
                fin = torch.isfinite(ref_lse)
                if fin.any():
                    err = max(err, float((lse[fin] - ref_lse[fin]).abs().max()))
            if err > MODS_AGREEMENT:
                row = (out - ref_out).abs().amax(-1).flatten().argmax().item()
                b, h, q = torch.unravel_index(torch.tensor(row), ref_out.shape[:3])
                raise SpecError(
                    f"mods disagree with the reference on shape {shape}, {dist} inputs: "
                    f"relative error {err:.2e} (worst row b={int(b)} h={int(h)} q={int(q)})"
                    f"{_which_mods(spec)}{note}", where)
            worst = max(worst, err)
    return worst


# What torch says when a computation mixes devices.
_DEVICE_MIX = ("is not on the expected device", "Expected all tensors to be on the same device")


def check_reference_device(spec: Spec, inputs: Inputs) -> None:
    """The reference computes on the device of its inputs: called once on "meta"
    tensors (no data, no arithmetic), a tensor it makes on the CPU
    (`torch.arange(q.shape[1])`) meets them and torch says so, which on this
    CPU-only check would otherwise show only in the GPU verification. Other
    failures on meta (`.item()`, data-dependent shapes) say nothing here."""
    meta = torch.device("meta")
    try:
        spec.reference(inputs.q.to(meta), inputs.k.to(meta), inputs.v.to(meta),
                       **{n: t.to(meta) for n, t in inputs.aux.items()})
    except Exception as exc:  # noqa: BLE001 - only a device mix is the spec's error
        if any(m in str(exc) for m in _DEVICE_MIX):
            loc = location_in_traceback(exc, spec.path) if spec.path else location_of(
                spec.reference)
            raise SpecError("the reference makes a tensor on the CPU and combines it with its "
                            "inputs, so it fails on a GPU (" + describe_exception(exc) + "); "
                            "create it on the inputs' device (device=q.device)", loc) from exc


def check_spec(spec: Spec, seed: int = 0) -> CheckSummary:
    """Everything short of verifying a kernel: the reference on small shapes
    and the verifier's largest ones (float64) and on a small shape in each
    spec dtype; aux made deterministically with the declared shapes; mods
    against the reference on the small shapes (every input distribution) and
    on the long case (lengths past twice the spec's largest constant, normal
    inputs; cubridge.spec.lengths). docs/specs.md gives its CPU cost."""
    summary = CheckSummary(spec)
    # The small check shapes, and the verifier's shapes that stress a reference
    # most: queries far past the keys (empty rows) and the long shape.
    sweep = fit_shapes(spec, verification_shapes(spec.configs))
    shapes = fit_shapes(spec, check_shapes(spec.configs)) + [s for s in sweep if s.sq > 1000]
    summary.shapes = shapes
    for i, shape in enumerate(shapes):
        inputs = make_inputs(spec, shape, torch.float64, "normal",
                             torch.Generator().manual_seed(seed + i))
        _, lse = call_reference(spec, inputs, expect_lse=spec.returns_lse)
        summary.reference_calls += 1
        if lse is not None:
            summary.empty_rows += int(torch.isinf(lse).sum())
        again = make_aux(spec, shape, torch.Generator().manual_seed(seed + i))
        for name, t in make_aux(spec, shape, torch.Generator().manual_seed(seed + i)).items():
            if not torch.equal(t, again[name]):
                raise SpecError(f"make_aux is not deterministic: {name} differs between two "
                                "calls with the same generator state; draw randomness only "
                                "from the generator", location_of(spec.make_aux))
    small = fit_shapes(spec, check_shapes(spec.configs))
    check_reference_device(spec, make_inputs(spec, small[0], torch.float64, "normal",
                                             torch.Generator().manual_seed(seed)))
    for dtype in spec.dtypes:
        for dist in DISTRIBUTIONS:
            inputs = make_inputs(spec, small[min(1, len(small) - 1)], dtype, dist,
                                 torch.Generator().manual_seed(seed))
            call_reference(spec, inputs, expect_lse=spec.returns_lse)
            summary.reference_calls += 1
    summary.long_shapes = fit_shapes(spec, long_check_shapes(spec.configs, spec))
    summary.largest_constant = covered_constant(spec)[0]
    if spec.mask_mod is not None or spec.score_mod is not None:
        summary.mods_max_error = check_mods(spec, small, seed)
        # normal inputs suffice at length: what only shows there is positional
        note = (f" (the long case: longer than twice the largest integer constant in the "
                f"spec's code, {summary.largest_constant})")
        summary.mods_max_error = max(summary.mods_max_error, check_mods(
            spec, summary.long_shapes, seed, distributions=("normal",), note=note))
        summary.reference_calls += len(small) * len(DISTRIBUTIONS) + len(summary.long_shapes)
    else:
        for shape in summary.long_shapes:
            inputs = make_inputs(spec, shape, torch.float64, "normal",
                                 torch.Generator().manual_seed(seed))
            call_reference(spec, inputs, expect_lse=spec.returns_lse)
            summary.reference_calls += 1
    summary.shapes = shapes + summary.long_shapes
    return summary
