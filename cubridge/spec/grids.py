"""FlexAttention-style mods evaluated on whole index grids.

A spec's `mask_mod(b, h, q_idx, kv_idx)` and `score_mod(s, b, h, q_idx, kv_idx)`
are elementwise, so calling them on broadcastable index tensors
(b: [B,1,1,1], h: [1,H,1,1], q: [1,1,Q,1], k: [1,1,1,K]) evaluates them on a
whole block of pairs at once. The shape of the result tells which indices a
mask really depends on (a document mask comes back [B,1,Q,K]). Binding the mods
to their aux tensors is the spec part's (cubridge.spec.mods.bind_mods).

FlexAttention calls mods per element (torch.vmap), and a mod written for
scalar indices can mean something else on a grid (Flamingo's
`interval = intervals[image_idx]; interval[0]`). `eval_mask` and `eval_score`
therefore check the grid against per-element calls on the grid's corner
(first and last rows of the first batch elements and heads, every key) and
evaluate per element where the grid fails or disagrees.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

Mod = Callable[..., torch.Tensor]
INDEX_DTYPE = torch.int32  # what FlexAttention passes to mods


def index_grid(
    batches: torch.Tensor, heads: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Views of four 1-d index vectors that broadcast to [B, H, Q, K]."""
    return (batches.view(-1, 1, 1, 1), heads.view(1, -1, 1, 1),
            q_idx.view(1, 1, -1, 1), kv_idx.view(1, 1, 1, -1))


def arange(n: int, device: torch.device | str, start: int = 0) -> torch.Tensor:
    return torch.arange(start, start + n, device=device, dtype=INDEX_DTYPE)


def elementwise_mask(mask_mod: Mod) -> Callable[..., torch.Tensor]:
    """mask_mod vmapped over 1-d b, h, q_idx, kv_idx -> [B, H, Sq, Sk], as
    FlexAttention's create_block_mask calls it."""
    fn = mask_mod
    for dims in ((None, None, None, 0), (None, None, 0, None), (None, 0, None, None),
                 (0, None, None, None)):
        fn = torch.vmap(fn, in_dims=dims, out_dims=0)
    return fn


def elementwise_score(score_mod: Mod) -> Callable[..., torch.Tensor]:
    """score_mod vmapped over scores [B, H, Sq, Sk] and 1-d b, h, q_idx,
    kv_idx, as FlexAttention calls it."""
    fn = score_mod
    for dims in ((0, None, None, None, 0), (0, None, None, 0, None), (0, None, 0, None, None),
                 (0, 0, None, None, None)):
        fn = torch.vmap(fn, in_dims=dims, out_dims=0)
    return fn


CORNER_ROWS = 8  # first and last query rows of the per-element check


def _flat(b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, k: torch.Tensor
          ) -> tuple[torch.Tensor, ...]:
    return tuple(i.reshape(-1) for i in (b, h, q, k))


def _corner(b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, k: torch.Tensor
            ) -> tuple[slice, slice, torch.Tensor]:
    """(batch slice, head slice, query rows) of the per-element check."""
    n = q.shape[2]
    rows = torch.arange(n, device=q.device)
    if n > 2 * CORNER_ROWS:
        rows = torch.cat([rows[:CORNER_ROWS], rows[-CORNER_ROWS:]])
    return slice(0, min(2, b.shape[0])), slice(0, min(2, h.shape[1])), rows


def _grid_or_error(fn: Callable[[], object], device: torch.device
                   ) -> torch.Tensor | Exception:
    try:
        return torch.as_tensor(fn(), device=device)
    except (IndexError, RuntimeError, ValueError) as exc:  # written for scalar indices
        return exc


def eval_mask(mask_mod: Mod, b: torch.Tensor, h: torch.Tensor, q: torch.Tensor,
              k: torch.Tensor) -> torch.Tensor:
    """mask_mod on a grid, as a bool tensor broadcast to at least [1, 1, Q, K].
    Dims 0 and 1 stay 1 when the mask does not depend on batch or head (on the
    grid path; a mask evaluated per element comes back [B, H, Q, K])."""
    want = (1, 1, q.shape[2], k.shape[3])
    out = _grid_or_error(lambda: mask_mod(b, h, q, k), q.device)
    if isinstance(out, torch.Tensor):
        if out.dtype != torch.bool:
            raise TypeError(f"mask_mod returned {out.dtype}, expected a bool tensor")
        try:
            out = out.expand(torch.broadcast_shapes(out.shape, want))
        except RuntimeError as exc:
            out = exc
    if isinstance(out, torch.Tensor):
        bs, hs, rows = _corner(b, h, q, k)
        try:
            fb, fh, fq, fk = _flat(b[bs], h[:, hs], q[:, :, rows], k)
            each = elementwise_mask(mask_mod)(fb, fh, fq, fk)
        except Exception:  # noqa: BLE001 - not vmappable: the grid is all there is
            return out
        grid = out[bs if out.shape[0] > 1 else slice(None),
                   hs if out.shape[1] > 1 else slice(None)][:, :, rows]
        if torch.equal(grid.expand_as(each), each):
            return out
    try:
        return elementwise_mask(mask_mod)(*_flat(b, h, q, k))
    except Exception as exc:
        if isinstance(out, Exception):
            raise exc from out
        raise


def eval_score(score_mod: Mod, s: torch.Tensor, b: torch.Tensor, h: torch.Tensor,
               q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """score_mod on scores s (broadcastable to [B, H, Q, K]) and an index grid,
    with the same per-element check as eval_mask."""
    full = (b.shape[0], h.shape[1], q.shape[2], k.shape[3])
    out = _grid_or_error(lambda: score_mod(s, b, h, q, k), q.device)
    if isinstance(out, torch.Tensor):
        bs, hs, rows = _corner(b, h, q, k)
        try:
            fb, fh, fq, fk = _flat(b[bs], h[:, hs], q[:, :, rows], k)
            corner = s.expand(full)[bs, hs][:, :, rows]
            each = elementwise_score(score_mod)(corner, fb, fh, fq, fk)
            grid = out.expand(torch.broadcast_shapes(out.shape, full))[bs, hs][:, :, rows]
        except Exception:  # noqa: BLE001 - not vmappable: the grid is all there is
            return out
        if torch.allclose(grid.double(), each.double(), rtol=1e-5, atol=1e-5, equal_nan=True):
            return out
    try:
        return elementwise_score(score_mod)(s.expand(full), *_flat(b, h, q, k))
    except Exception as exc:
        if isinstance(out, Exception):
            raise exc from out
        raise


def is_additive(score_mod: Mod, b: torch.Tensor, h: torch.Tensor, q: torch.Tensor,
                 k: torch.Tensor) -> bool:
    """score_mod(s) - s independent of s, checked exactly in float64 on this grid."""
    # [1,1,1,1] rather than 0-d scores: a 0-d float64 tensor would not promote
    # float32 aux (slopes, tables) to float64, and rounding would hide additivity.
    def at(value: float) -> torch.Tensor:
        s = torch.full((1, 1, 1, 1), value, dtype=torch.float64, device=q.device)
        return torch.as_tensor(score_mod(s, b, h, q, k), device=q.device).to(torch.float64) - s

    bias = at(0.0)
    return all(torch.allclose(at(v), bias, rtol=1e-9, atol=1e-9) for v in (-7.25, 0.5, 13.0))


def eval_score_bias(score_mod: Mod, b: torch.Tensor, h: torch.Tensor, q: torch.Tensor,
                    k: torch.Tensor, dtype: torch.dtype = torch.float32,
                    rows_per_chunk: int = 256, mask: torch.Tensor | None = None,
                    shift_rows: bool = False) -> torch.Tensor | None:
    """The additive bias of score_mod on the grid, at least [1, 1, Q, K], or None
    if score_mod is not `s + bias(b, h, q, k)` (checked on the first and last
    query rows). Built in row chunks: a float64 grid at S = 8192 would not fit.
    `mask` (bool, broadcastable to [B, H, Q, K]): its False pairs are -inf.
    `shift_rows`: each row moved so that its largest finite entry is 0, in float32
    before the cast to `dtype`; softmax ignores a per-row shift, and in bf16 a bias
    that grows with the distance (ALiBi over 2,048 keys reaches ~1,700, a step of 8)
    keeps the keys that carry the weight exact only near 0."""
    edges = torch.cat([q[:, :, :rows_per_chunk], q[:, :, -rows_per_chunk:]], dim=2)
    if not is_additive(score_mod, b, h, edges, k):
        return None
    zero = torch.zeros((1, 1, 1, 1), dtype=torch.float32, device=q.device)
    first = torch.as_tensor(score_mod(zero, b, h, q[:, :, :1], k))
    shape = torch.broadcast_shapes(first.shape[:2] + (q.shape[2], k.shape[3]),
                                   (1, 1, q.shape[2], k.shape[3]),
                                   *([mask.shape] if mask is not None else []))
    bias = torch.empty(shape, dtype=dtype, device=q.device)
    for start in range(0, q.shape[2], rows_per_chunk):
        rows = q[:, :, start:start + rows_per_chunk]
        chunk = eval_score(score_mod, zero, b, h, rows, k).float()
        if mask is not None:
            chunk = chunk.masked_fill(~mask[:, :, start:start + rows.shape[2]], float("-inf"))
        if shift_rows:
            row_max = chunk.amax(-1, keepdim=True)
            chunk = chunk - torch.where(torch.isinf(row_max), 0.0, row_max)
        bias[:, :, start:start + rows.shape[2]] = chunk
    return bias


def softcap_of(score_mod: Mod, device: torch.device | str) -> float | None:
    """c if score_mod is `c * tanh(s / c)` for every index probed, else None."""
    probes = torch.tensor([-40.0, -3.0, -0.25, 0.0, 0.7, 5.0, 60.0], dtype=torch.float64,
                          device=device).view(1, 1, 1, 1, -1)
    b, h, q, k = index_grid(arange(2, device), arange(3, device), arange(5, device),
                            arange(5, device))
    big = torch.full((), 1e6, dtype=torch.float64, device=device)
    zero = torch.zeros((), dtype=INDEX_DTYPE, device=device)
    cap = float(torch.as_tensor(score_mod(big, zero, zero, zero, zero)))
    if not 0.0 < cap < 1e5:
        return None
    got = torch.as_tensor(score_mod(probes, b[..., None], h[..., None], q[..., None],
                                    k[..., None])).to(torch.float64)
    want = cap * torch.tanh(probes / cap)
    return cap if torch.allclose(got, want.expand_as(got), rtol=1e-6, atol=1e-6) else None
