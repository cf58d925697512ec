"""Allowed (q, k) pairs of a spec whose reference does more than its mods say
(no mask_mod, yet a causal or otherwise masked reference), read from the reference.

A reference is linear in v: out = W v, W [B, Hq, Sq, Sk] the weight each query
gives each key. Run it with v holding one-hot columns (v[..., offset + c, c] = 1)
and out[..., c] is column offset + c of W: a pair is allowed when its weight is
nonzero. The probe checks the linearity it relies on (the reference's output for
a random v must equal W v) and draws q and k uniform in [0.5, 1.5], so every score
is positive and of small range: a relu or sigmoid keeps it nonzero and no softmax
weight underflows in float64.

W is first read on two small problems: the benchmark's heads and head dims, at
most two batch elements, Sq = Sk past twice every integer constant in the spec's
code (`cubridge spec check`'s long case and that plus 37). If at both lengths the
allowed pairs are exactly one band lo <= q - k <= hi in every (batch, head), and
each edge is at both lengths either the sequence's own edge or the same constant,
then that band is the structure at every length (the lengths being past twice
the spec's constants: a window of 5000 looks causal at 4200), and it is counted
exactly at the benchmark shape: causal is lo = 0 with an open top, exactly what `mask_mod =
causal` counts. Otherwise W is read at the benchmark shape itself when that fits
DIRECT_MAX_ELEMENTS, and counted there; when it does not, the probe says so and
the caller counts every pair, saying why.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from cubridge.attention import Shape
from cubridge.bench.case import make_aux_on
from cubridge.bench.flops import MaskStats, band_pairs
from cubridge.spec.lengths import covered_constant, long_length
from cubridge.spec.model import Spec
from cubridge.verify.peers import first_tensor

# Reference calls per probe: the one-hot chunk is widened to Sk / MAX_CALLS keys.
MAX_CALLS = 8
# Largest B * Hq * Sq * Sk read at the benchmark shape (float64: 16 GiB per matrix).
DIRECT_MAX_ELEMENTS = 1 << 31
LINEARITY_TOL = 1e-9
SECOND_LENGTH_OFFSET = 37  # the second probe length: not a tile multiple either


class ProbeError(Exception):
    """The reference cannot be probed (not linear in v, raised, too large)."""


@dataclass(frozen=True)
class Probe:
    stats: MaskStats
    counting: str  # how the pairs were obtained, for every report


def _probe_inputs(spec: Spec, shape: Shape, device: torch.device, seed: int
                  ) -> tuple[torch.Tensor, torch.Tensor, Mapping[str, torch.Tensor]]:
    gen = torch.Generator(device=device).manual_seed(seed)

    def positive(heads: int, seq: int) -> torch.Tensor:
        return torch.rand(shape.b, heads, seq, shape.d, generator=gen, device=device,
                          dtype=torch.float64) + 0.5

    aux = make_aux_on(spec, shape, seed, device)
    aux = {n: t.to(torch.float64) if t.is_floating_point() else t for n, t in aux.items()}
    return positive(shape.hq, shape.sq), positive(shape.hk, shape.sk), aux


def _call(spec: Spec, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
          aux: Mapping[str, torch.Tensor]) -> torch.Tensor:
    try:
        out = first_tensor(spec.reference(q, k, v, **aux)).to(torch.float64)
    except Exception as exc:  # noqa: BLE001 - reported as a probe failure, with its cause
        raise ProbeError(f"the reference raised with probe inputs {tuple(v.shape)} v: "
                         f"{type(exc).__name__}: {exc}") from exc
    want = (q.shape[0], q.shape[1], q.shape[2], v.shape[-1])
    if tuple(out.shape) != want:
        raise ProbeError(f"the reference returned out of shape {tuple(out.shape)}, not {want}")
    return out


def allowed_pairs_of_reference(spec: Spec, shape: Shape, device: torch.device | str,
                               seed: int = 0, faithful_dv: bool = False,
                               check_linear: bool = True) -> torch.Tensor:
    """Bool [B, Hq, Sq, Sk]: the pairs whose weight in the reference is nonzero.

    The one-hot chunks are Sk / MAX_CALLS keys wide (v's head dim changes) unless
    `faithful_dv`, which keeps v's head dim at the shape's Dv (more calls)."""
    device = torch.device(device)
    q, k, aux = _probe_inputs(spec, shape, device, seed)
    dv = shape.head_dim_v
    width = dv if faithful_dv else max(dv, math.ceil(shape.sk / MAX_CALLS))
    allowed = torch.empty(shape.b, shape.hq, shape.sq, shape.sk, dtype=torch.bool, device=device)
    gen = torch.Generator(device=device).manual_seed(seed + 1)
    v_rand = torch.randn(shape.b, shape.hk, shape.sk, dv, generator=gen, device=device,
                         dtype=torch.float64)
    v_rand_q = v_rand.repeat_interleave(shape.group, dim=1)  # per query head
    expect = torch.zeros(shape.b, shape.hq, shape.sq, dv, dtype=torch.float64, device=device)
    cols = torch.arange(width, device=device)
    for start in range(0, shape.sk, width):
        n = min(width, shape.sk - start)
        onehot = torch.zeros(shape.b, shape.hk, shape.sk, width, dtype=torch.float64,
                             device=device)
        onehot[:, :, start + cols[:n], cols[:n]] = 1.0
        weights = _call(spec, q, k, onehot, aux)[..., :n]
        allowed[..., start:start + n] = weights != 0
        if check_linear:
            expect += weights @ v_rand_q[:, :, start:start + n]
        del onehot, weights
    if check_linear:
        got = _call(spec, q, k, v_rand, aux)
        rel = float((got - expect).norm() / got.norm().clamp_min(1e-300))
        if not rel <= LINEARITY_TOL:
            raise ProbeError(f"the reference is not linear in v (out(v) differs from W v by "
                             f"{rel:.1e}), so its weights cannot be read")
    return allowed


def stats_of_allowed(allowed: torch.Tensor, shape: Shape) -> MaskStats:
    """Pairs, batch/head dependence and band structure of an allowed-pair tensor."""
    pairs = int(allowed.sum())
    anywhere = allowed.any(dim=1).any(dim=0)
    band = None
    if anywhere.any():
        diff = (torch.arange(shape.sq, device=allowed.device)[:, None]
                - torch.arange(shape.sk, device=allowed.device)[None, :])[anywhere]
        lo, hi = int(diff.min()), int(diff.max())
        if pairs == shape.b * shape.hq * band_pairs(shape.sq, shape.sk, lo, hi):
            band = (lo, hi)
    by_batch = bool((allowed != allowed[:1]).any())
    by_head = bool((allowed != allowed[:, :1]).any())
    return MaskStats(shape, pairs, by_batch, by_head, band)


def _open_edges(band: tuple[int, int], n: int) -> tuple[int | None, int | None]:
    """The band's edges at Sq = Sk = n, None where an edge is the sequence's own."""
    lo, hi = band
    return (None if lo <= -(n - 1) else lo), (None if hi >= n - 1 else hi)


def probe_lengths(spec: Spec) -> tuple[int, int]:
    first = long_length(spec)
    return first, first + SECOND_LENGTH_OFFSET


def probe_allowed_pairs(spec: Spec, shape: Shape, device: torch.device | str, seed: int = 0,
                        lengths: tuple[int, int] | None = None) -> Probe:
    """Allowed pairs of `spec` at `shape`, read from its reference (module doc).
    Raises ProbeError when they cannot be read."""
    lengths = lengths or probe_lengths(spec)
    b = min(shape.b, 2)
    faithful = False
    edges, bands = [], []
    for n in lengths:
        small = Shape(b, shape.hq, shape.hk, n, n, shape.d, shape.dv)
        try:
            allowed = allowed_pairs_of_reference(spec, small, device, seed, faithful)
        except ProbeError:
            if faithful:
                raise
            # A reference tied to v's head dim: read it with the real Dv (more calls).
            faithful = True
            allowed = allowed_pairs_of_reference(spec, small, device, seed, faithful)
        st = stats_of_allowed(allowed, small)
        del allowed
        bands.append(st.band)
        edges.append(None if st.band is None else _open_edges(st.band, n))
    where = f"B{b} Sq=Sk={lengths[0]} and {lengths[1]}"
    # Past twice every constant of the spec's code, or the band may yet change.
    largest, _ = covered_constant(spec)
    covered = min(lengths) > 2 * largest
    if covered and edges[0] is not None and edges[0] == edges[1] and shape.sq == shape.sk:
        lo_edge, hi_edge = edges[0]
        lo = -(shape.sk - 1) if lo_edge is None else lo_edge
        hi = shape.sq - 1 if hi_edge is None else hi_edge
        pairs = shape.b * shape.hq * band_pairs(shape.sq, shape.sk, lo, hi)
        stats = MaskStats(shape, pairs, False, False, (lo, hi) if pairs else None)
        return Probe(stats, f"read from the reference's weights at {where}: the band "
                     f"{_band_text(lo_edge, hi_edge)} in every head, counted exactly at "
                     "the benchmark shape")
    elements = shape.b * shape.hq * shape.sq * shape.sk
    if elements > DIRECT_MAX_ELEMENTS:
        why = (f"no band of fixed edges ({bands[0]} / {bands[1]})" if covered else
               f"not past twice the spec's constant {largest}, so their band says nothing of "
               "longer sequences")
        raise ProbeError(f"at {where} the reference's weights are {why}, and reading them at "
                         f"{shape} ({elements:.1e} pairs) exceeds the probe's limit")
    allowed = allowed_pairs_of_reference(spec, shape, device, seed, faithful,
                                         check_linear=False)
    stats = stats_of_allowed(allowed, shape)
    return Probe(stats, f"read from the reference's weights at the benchmark shape {shape} "
                 f"(linearity in v checked at {where})")


def _band_text(lo: int | None, hi: int | None) -> str:
    if lo is None and hi is None:
        return "of every pair (full)"
    if lo == 0 and hi is None:
        return "q >= k (causal)"
    low = "" if lo is None else f"{lo} <= "
    high = "" if hi is None else f" <= {hi}"
    return f"{low}q - k{high}"
