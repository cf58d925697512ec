"""Key runs of staged masks. A mask that is the conjunction of an index part with
row intervals (q >= k, a window) and a value part that reads the key only through
staged key reads (q_doc[b, q] == kv_doc[b, k], a segment test) has the same value
part on every run of keys whose staged values are equal. Where a key block's staged
values change at most once (document and segment ids are contiguous), a row's
allowed keys in it are its index intervals cut to the runs whose values the value
part allows: a kernel may set that block's bits as ranges (run_interval,
key_value_mask) instead of a mask_mod per pair (docs/hooks.md). Blocks with more
runs keep mask_mod_staged."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from cubridge.lower.cuda_render import render_body
from cubridge.lower.row_interval import (
    KEY,
    RowInterval,
    reads_per_key,
    render_intervals,
    row_intervals,
)
from cubridge.lower.staged_reads import staged_reads, staged_spellings
from cubridge.transfer.expr import DType, Node, apply, const, free_vars


@dataclass(frozen=True)
class KeyRuns:
    intervals: tuple[RowInterval, ...]  # of the index part (one, unbounded, if none)
    value: Node  # the value part: the key only through staged key reads


def _conjuncts(n: Node) -> list[Node]:
    if n.dtype == DType.BOOL and n.op in ("and", "bitand"):
        return _conjuncts(n.args[0]) + _conjuncts(n.args[1])
    return [n]


def _key_outside(n: Node, staged: frozenset[Node]) -> bool:
    """Whether `n` uses the key other than through a staged key read."""
    if n in staged:
        return False
    if n.op == "var":
        return n.arg == KEY
    return any(_key_outside(a, staged) for a in n.args)


def _all(atoms: list[Node]) -> Node:
    out = atoms[0] if atoms else const(True)
    for a in atoms[1:]:
        out = apply("and", out, a)
    return out


def key_runs(mask: Node | None) -> KeyRuns | None:
    """The index and value parts of a staged mask, or None (no value part, or an
    atom that mixes the key's index with its staged reads)."""
    if mask is None or mask.dtype != DType.BOOL:
        return None
    staged = frozenset(staged_reads(mask).key)
    if not staged:
        return None
    index: list[Node] = []
    value: list[Node] = []
    for atom in _conjuncts(mask):
        if KEY not in free_vars(atom):
            index.append(atom)  # (a row guard)
        elif not _key_outside(atom, staged):
            value.append(atom)
        elif reads_per_key(atom):
            return None
        else:
            index.append(atom)
    intervals = row_intervals(_all(index))
    if not value or intervals is None:
        return None
    return KeyRuns(intervals, _all(value))


KEY_RUNS_COMMENT = """\
// A mask that is index intervals and a part reading the key only through its staged
// values: kRunIntervals intervals per row (run_interval, inclusive; 0: no such form)
// and key_value_mask, the value part for one key value. A kernel may mask a key block
// whose staged values change at most once as ranges (docs/hooks.md).
#define CUBRIDGE_HOOKS_KEY_RUNS 1  // (kRunIntervals, run_interval, key_value_mask)"""


def render_key_runs(mask: Node | None, slots: Mapping[str, int],
                    aux_dtypes: Mapping[str, torch.dtype]) -> str:
    """kRunIntervals, run_interval and key_value_mask of a generated header (stubs
    where the mask has no such form)."""
    form = key_runs(mask)
    if form is None:
        body = ["  return true;"]
    else:
        bound = staged_spellings(staged_reads(mask))  # type: ignore[arg-type]
        body = render_body(form.value, slots, aux_dtypes, pre_bound=bound)
    return "\n".join([
        KEY_RUNS_COMMENT,
        render_intervals("kRunIntervals", "run_interval", form.intervals if form else (),
                         slots, aux_dtypes),
        "CUBRIDGE_HD bool key_value_mask(int b, int h, int q, cubridge::Staged row_vals,",
        "                                cubridge::Staged key_vals, const AuxArgs& aux) {",
        "  (void)b; (void)h; (void)q; (void)row_vals; (void)key_vals; (void)aux;",
        *body,
        "}",
        "",
    ])
