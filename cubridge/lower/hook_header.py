"""Generate `cubridge_hooks.cuh` (docs/hooks.md) from a hook plan.

`generate_header(plan)` returns a `HookHeader`: the header text plus the aux
manifest, which says which AuxArgs slot holds which tensor (name, dtype,
rank) so the launcher can pack them; `pack_aux` does the packing, building
the block tables for data-dependent masks; `fill_empty_rows`, after the kernel,
gives the rows a floor mask leaves no key the spec's answer.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch

from cubridge.attention import Shape
from cubridge.empty_rows import fill_empty_rows
from cubridge.kernels.library import header_constant
from cubridge.lower.cuda_render import (
    AUX_C_TYPES,
    int_interval_scalars,
    render_body,
    render_int_interval,
    render_interval,
)
from cubridge.lower.key_groups import render_key_group
from cubridge.lower.key_runs import render_key_runs
from cubridge.lower.mask_cases import render_mask_cases
from cubridge.lower.mask_tables import TABLE_DTYPE, MaskTable, mask_table
from cubridge.lower.narrowed_indices import (
    NARROW_DTYPE,
    NarrowedIndex,
    narrowed,
    narrowed_indices,
)
from cubridge.lower.pair_codes import CODE_DTYPE, PairCode, coded_score, pair_code
from cubridge.lower.pair_reads import (
    aligned_pair_rows,
    pair_slots,
    render_mask_pair_hooks,
    render_pair_hooks,
)
from cubridge.lower.row_interval import every_row_keeps_a_key, render_row_interval
from cubridge.lower.score_affine import (
    linear_score,
    render_affine_score,
    render_row_factor,
    render_sigmoid_exponent,
)
from cubridge.lower.staged_reads import render_staged_hooks
from cubridge.transfer.block_table import KINDS_AUX, RANGES_AUX
from cubridge.transfer.distance_tables import DistanceTable, distance_tables
from cubridge.transfer.expr import DType, Node
from cubridge.transfer.hooks import HookPlan
from cubridge.transfer.score_masks import kernel_score

MAX_AUX = 8  # cubridge::kMaxAux
MAX_AUX_RANK = 4  # cubridge::kMaxAuxRank
HELPERS = Path(__file__).with_name("hook_helpers.cuh")
# Pasted after HELPERS only where the hooks call its functions (sin / cos of the
# score), so that the headers of specs without them stay as they were.
TRIG_HELPERS = Path(__file__).with_name("hook_trig.cuh")
_TRIG_CALLS = ("detail::fast_sin(", "detail::fast_cos(")


@dataclass(frozen=True)
class AuxSlot:
    slot: int
    name: str
    dtype: torch.dtype
    rank: int
    source: Literal["spec", "captured", "block_kinds", "kv_ranges", "distance_table",
                    "pair_codes", "pair_code_table", "mask_table"]


@dataclass(frozen=True)
class HookHeader:
    text: str
    slots: tuple[AuxSlot, ...]
    plan: HookPlan
    pair_slots: tuple[int, ...] = ()  # the mods' pair reads (pair_reads.py)
    distance_tables: tuple[DistanceTable, ...] = ()  # score_mod's tabulated terms
    narrowed: tuple[NarrowedIndex, ...] = ()  # aux packed as int16 (narrowed_indices.py)
    pair_code: PairCode | None = None  # score_mod's term coded per pair (pair_codes.py)
    mask_table: MaskTable | None = None  # mask_mod read from a [Sq, Sk] table (mask_tables.py)

    def manifest(self) -> dict[str, object]:
        """JSON-able description of the aux slots and the table tiling."""
        narrowed_names = {n.name for n in self.narrowed}
        return {
            "spec": self.plan.name,
            "normalizer": self.plan.normalizer,
            "classification": self.plan.classification,
            "table_block": list(self.plan.table_block),
            "aux": [{"slot": s.slot, "name": s.name, "dtype": str(s.dtype).removeprefix("torch."),
                     "rank": s.rank, "source": s.source,
                     **({"narrowed": True} if s.name in narrowed_names else {})}
                    for s in self.slots],
        }

    def mask_form(self, kernel_source: str | None = None) -> str:
        """How a kernel sets a masked block's bits from this header: the fastest form
        the header offers that the kernel's source takes (its `CUBRIDGE_HOOKS_*`
        tests; None: every form), fastest first: row intervals, key runs, key sets, key
        groups, then mask_mod per pair (a mask table's read being mask_mod's)."""
        if not self.plan.mask:
            return "no mask_mod"

        def constant(name: str) -> int:
            define = {"kRowIntervals": "ROW_INTERVALS", "kRunIntervals": "KEY_RUNS",
                      "kMaskCases": "MASK_CASES", "kKeySetCases": "CASE_KEY_SETS",
                      "kKeyGroup": "KEY_GROUP"}[name]
            if kernel_source is not None and f"CUBRIDGE_HOOKS_{define}" not in kernel_source:
                return 0 if name != "kMaskCases" else 1
            return header_constant(self.text, name)

        cases, key_set_cases = constant("kMaskCases"), constant("kKeySetCases")
        if constant("kRowIntervals"):
            return f"row intervals ({constant('kRowIntervals')} a row)"
        if constant("kRunIntervals"):
            return "key runs"
        if key_set_cases:
            where = f"in {key_set_cases} of {cases} mask cases" if cases > 1 else "a row"
            return f"key sets ({where})" + (", mask_mod per pair in the others"
                                             if key_set_cases < cases else "")
        if constant("kKeyGroup"):
            return f"key groups of {constant('kKeyGroup')} (mask_mod once a group)"
        if self.mask_table is not None:
            return "mask table"
        return "mask_mod per pair" + (f" ({cases} mask cases)" if cases > 1 else "")

    def fills_empty_rows(self, shape: Shape | None) -> bool:
        """Whether calls of `shape` (None: of some shape) need the pass after the
        kernel that gives the rows a floor mask leaves no key the spec's answer
        (cubridge.empty_rows): a floor mask, unless it is proved that every query row
        keeps a key (row_interval.every_row_keeps_a_key; then the pass costs nothing)."""
        if self.plan.mask_floor is None:
            return False
        key = None if shape is None else (shape.b, shape.hq, shape.sq, shape.sk)
        if key not in self._rows_with_keys:
            assert self.plan.mask is not None
            self._rows_with_keys[key] = every_row_keeps_a_key(self.plan.mask.node, shape)
        return not self._rows_with_keys[key]

    def fill_empty_rows(self, out: torch.Tensor, lse: torch.Tensor, v: torch.Tensor
                        ) -> tuple[torch.Tensor, torch.Tensor]:
        """The kernel's (out, lse) with these hooks as the spec computes them: with a
        floor mask, the rows the kernel left no key weigh every key alike (skipped
        where fills_empty_rows proves there are none). Callers of the kernel run it
        after each call, as they run pack_aux before."""
        if self.plan.mask_floor is None:
            return out, lse
        if torch.compiler.is_compiling():
            # (sizes may be symbolic there: the proof for every shape, taken once while
            # Dynamo traces, a constant of the graph)
            needed = _fills_empty_rows_somewhere(self)
        else:
            needed = self.fills_empty_rows(Shape(out.shape[0], out.shape[1], v.shape[1],
                                                 out.shape[2], v.shape[2], out.shape[3]))
        return fill_empty_rows(out, lse, v, self.plan.mask_floor) if needed else (out, lse)

    @functools.cached_property
    def _rows_with_keys(self) -> dict[tuple[int, int, int, int] | None, bool]:
        return {}

    def pack_aux(self, aux: Mapping[str, torch.Tensor], shape: Shape,
                 device: torch.device | str | None = None) -> list[torch.Tensor]:
        """The tensors of the AuxArgs slots, in slot order, for one problem on
        `device` (default: the aux tensors'); tensors the mods captured come
        from the plan unless `aux` names them."""
        tables = self.plan.block_table(shape, aux, device).as_aux() \
            if self.plan.classification == "table" else {}
        if device is None and aux:
            device = next(iter(aux.values())).device
        aux = self.plan.with_captured(aux, torch.device(device) if device is not None else None)
        # (the tables this header reads in place of the mods' terms, built per problem)
        where = torch.device(device) if device is not None else torch.device("cpu")
        tables = {**tables, **{t.name: t.build(shape, aux, where)
                               for t in self.distance_tables}}
        if self.pair_code is not None:
            codes, values = self.pair_code.build(aux, shape.hq, where)
            tables = {**tables, self.pair_code.codes: codes, self.pair_code.table: values}
        if self.mask_table is not None:
            tables = {**tables, self.mask_table.name: self.mask_table.build(
                aux, shape.sq, shape.sk, where)}
        narrow = {n.name: n for n in self.narrowed}
        out = []
        for s in self.slots:
            t = aux.get(s.name) if s.source in ("spec", "captured") else tables[s.name]
            if t is None:
                raise KeyError(f"hooks of spec {self.plan.name!r} read aux {s.name!r}, "
                               f"not given (got {sorted(aux)})")
            if s.name in narrow:
                narrow[s.name].check_indexed(aux)
                t = narrowed(s.name, t)  # (int16 indices: staged as a 16-bit pair read)
            if t.dtype != s.dtype or t.dim() != s.rank:
                raise ValueError(f"aux {s.name!r}: hooks were generated for {s.dtype} rank "
                                 f"{s.rank}, got {t.dtype} rank {t.dim()}")
            if t.dim() > 0 and t.shape[-1] > 1 and t.stride(-1) != 1:
                t = t.contiguous()  # the generated reads assume a contiguous last dim
            if s.slot in self.pair_slots:
                t = aligned_pair_rows(t)  # (staged 16 bytes at a time)
            out.append(t)
        return out


@torch._dynamo.assume_constant_result
def _fills_empty_rows_somewhere(header: HookHeader) -> bool:
    return header.fills_empty_rows(None)


def _table_reads(tables: tuple[DistanceTable, ...], slots: Mapping[str, int]) -> dict[Node, str]:
    """Each tabulated term spelled as its table's read at the hook's (h, q, k):
    column q - k + Sk - 1 holds distance q - k (render_body's pre_bound)."""
    reads = {}
    for t in tables:
        c_type = "float" if t.term.dtype == DType.FLOAT else "int32_t"
        reads[t.term] = (f"cubridge::aux_load_c<{c_type}, 2>(aux, {slots[t.name]}, "
                         f"{'h' if t.by_head else '0'}, q - k + aux.seqlen_k - 1)")
    return reads


def _slots(plan: HookPlan, tables: tuple[DistanceTable, ...],
           narrow: tuple[NarrowedIndex, ...] = (), code: PairCode | None = None,
           table: MaskTable | None = None) -> tuple[AuxSlot, ...]:
    to_int16 = {n.name for n in narrow}
    slots = [AuxSlot(i, a.name, NARROW_DTYPE if a.name in to_int16 else a.dtype, a.rank,
                     "captured" if a.name in plan.captured else "spec")
             for i, a in enumerate(plan.aux)]
    if code is not None:
        slots += [AuxSlot(len(slots), code.codes, CODE_DTYPE, len(code.rows) + 1, "pair_codes"),
                  AuxSlot(len(slots) + 1, code.table, code.table_dtype, 2, "pair_code_table")]
    if table is not None:
        slots.append(AuxSlot(len(slots), table.name, TABLE_DTYPE, 2, "mask_table"))
    slots += [AuxSlot(len(slots) + i, t.name, t.dtype, 2, "distance_table")
              for i, t in enumerate(tables)]
    if plan.classification == "table":
        n = len(slots)
        slots.append(AuxSlot(n, KINDS_AUX, torch.uint8, 4, "block_kinds"))
        slots.append(AuxSlot(n + 1, RANGES_AUX, torch.int32, 4, "kv_ranges"))
    if len(slots) > MAX_AUX:
        raise ValueError(f"spec {plan.name!r}: hooks need {len(slots)} aux tensors, "
                         f"the kernel takes at most {MAX_AUX}")
    for s in slots:
        if s.rank > MAX_AUX_RANK:
            raise ValueError(f"spec {plan.name!r}: aux {s.name!r} has rank {s.rank}, "
                             f"the kernel takes at most {MAX_AUX_RANK}")
    return tuple(slots)


_SIG = {
    "score_mod": "float score_mod(float s, int b, int h, int q, int k, const AuxArgs& aux)",
    "mask_mod": "bool mask_mod(int b, int h, int q, int k, const AuxArgs& aux)",
    "activation": "float activation(float s)",
    "block_kind": "BlockKind block_kind(int b, int h, int q_start, int q_end, int k_start, "
                  "int k_end, const AuxArgs& aux)",
    "kv_block_range": "KvRange kv_block_range(int b, int h, int q_start, int q_end, "
                      "int block_n, int num_kv_blocks, const AuxArgs& aux)",
}


def _function(name: str, body: str) -> str:
    return f"CUBRIDGE_HD {_SIG[name]} {{\n{body}\n}}\n"


def _unused(*names: str) -> str:
    return "  " + " ".join(f"(void){n};" for n in names)


# The sigmoid normaliser's activation. In fp16 builds of kernels that divide O
# back (CUBRIDGE_KERNEL_ACTIVATION_SCALE), it is 2^15 sigmoid: a row of very
# negative scores has weights of 1e-8..1e-5, below fp16's smallest normal number
# (6.1e-5), and rounding P there failed verification now and then
# (bench/results/fa_sm90-ab-2026-11-24-sigmoid/: 33 of 2000 seeds, 0 scaled).
_SCALED_SIGMOID = """\
#define CUBRIDGE_HOOKS_ACTIVATION_OF_EXPONENT 1  // activation_of_exponent and kExponentBias
#if defined(CUBRIDGE_DTYPE_FP16) && defined(CUBRIDGE_KERNEL_ACTIVATION_SCALE)
#define CUBRIDGE_HOOKS_ACTIVATION_SCALE 32768.0f  // the kernel divides O by it
CUBRIDGE_HD float activation(float s) {
  return detail::fast_sigmoid_2p15(s);
}
constexpr float kExponentBias = -15.0f;  // activation_of_exponent's t is biased by it
CUBRIDGE_HD float activation_of_exponent(float t) {  // activation((kExponentBias - t) / log2(e))
  return detail::fast_sigmoid_2p15_of_exponent(t);
}
#else
CUBRIDGE_HD float activation(float s) {
  return detail::fast_sigmoid(s);
}
constexpr float kExponentBias = 0.0f;
CUBRIDGE_HD float activation_of_exponent(float t) {  // activation(-t / log2(e))
  return detail::fast_sigmoid_of_exponent(t);
}
#endif
"""


# The in-bounds part of a tile; the kernel may pass tile ends past the sequence.
_CLAMP = """\
  // in-bounds part of the tile (seqlen 0: the launcher left it unset, no clamp)
  const int q_last = (aux.seqlen_q > 0 && q_end > aux.seqlen_q ? aux.seqlen_q : q_end) - 1;
  const int k_last = (aux.seqlen_k > 0 && k_end > aux.seqlen_k ? aux.seqlen_k : k_end) - 1;
  if (q_last < q_start || k_last < k_start) return BlockKind::Empty;"""


def _block_kind_body(plan: HookPlan, slots: dict[str, int],
                     dtypes: dict[str, torch.dtype]) -> str:
    if plan.classification == "none":
        return (_unused("b", "h", "q_start", "q_end", "k_start", "k_end", "aux")
                + "\n  return BlockKind::Full;")
    if plan.classification == "interval":
        assert plan.mask is not None
        ivi = render_int_interval(plan.mask.node)
        iv = render_interval(plan.mask.node, slots, dtypes)
        # (the spans the bounds read: a key-only mask has no query span, and an unused
        # local is a warning that host builds with -Werror refuse)
        double_form = "\n".join(
            [f"  const detail::Iv iv_{x} = detail::iv_span({x}_start, {x}_last);"
             for x in "qk" if re.search(rf"\biv_{x}\b", iv)]
            + [f"  return detail::iv_kind({iv});"])
        if ivi is None:
            return f"{_unused('b', 'h')}\n{_CLAMP}\n{double_form}"
        int_form = "\n  ".join(
            [f"const detail::IvI ivi_{x} = detail::ivi_span({x}_start, {x}_last);"
             for x in "qk" if re.search(rf"\bivi_{x}\b", ivi)]
            + [f"return detail::ivi_kind({ivi});"])
        scalars = int_interval_scalars(plan.mask.node)
        if not scalars:
            return (f"{_unused('b', 'h')}\n{_CLAMP}\n"
                    "  // integer intervals: exact below 2^24 positions; past that, unknown\n"
                    "  if (!detail::ivi_in_range(q_last, k_last)) return BlockKind::Partial;\n"
                    f"  {int_form}")
        # 0-d integer aux scalars: read once; integer rules while they are in
        # range, else the (exact, slower) double rules
        loads = "".join(f"  const int64_t ivi_aux_{n} = static_cast<int64_t>(cubridge::aux_load<"
                        f"{AUX_C_TYPES[dtypes[n]]}>(aux, {slots[n]}, 0));\n" for n in scalars)
        checks = " && ".join(["detail::ivi_in_range(q_last, k_last)"]
                             + [f"detail::ivi_scalar_in_range(ivi_aux_{n})" for n in scalars])
        return (f"{_unused('b', 'h')}\n{_CLAMP}\n{loads}"
                "  // integer intervals: exact below 2^24 positions and scalars\n"
                f"  if ({checks}) {{\n"
                f"    {int_form.replace(chr(10) + '  ', chr(10) + '    ')}\n"
                "  }\n"
                f"{double_form}")
    bi = "b" if plan.table_depends_on_b else "0"
    hi = "h" if plan.table_depends_on_h else "0"
    return f"""{_unused('b', 'h')}
{_CLAMP}
  // combine the table tiles that cover this tile (any kernel tiling works)
  bool any_live = false, all_full = true;
  for (int i = q_start / kTableBlockM; i <= q_last / kTableBlockM; ++i) {{
    for (int j = k_start / kTableBlockN; j <= k_last / kTableBlockN; ++j) {{
      const int t = cubridge::aux_load<uint8_t>(aux, {slots[KINDS_AUX]}, {bi}, {hi}, i, j);
      any_live = any_live || t != static_cast<int>(BlockKind::Empty);
      all_full = all_full && t == static_cast<int>(BlockKind::Full);
    }}
  }}
  return !any_live ? BlockKind::Empty : all_full ? BlockKind::Full : BlockKind::Partial;"""


# Said of interval classification's kv_block_range (the searches below): a kernel
# may run the same searches its own way, e.g. a warp testing 32 split points per
# round, since EMPTY is monotone under inclusion.
_KV_RANGE_BY_SEARCH = """\
// kv_block_range below is the search for the largest EMPTY leading key range and
// the largest EMPTY trailing one, by block_kind on multi-block ranges.
#define CUBRIDGE_HOOKS_KV_RANGE_BY_SEARCH 1
"""


# Said of table classification: a block's kind is a load or two, so a kernel may
# classify whole windows of blocks without finding the key range first.
_BLOCK_TABLE = """\
// block_kind and kv_block_range below read precomputed tables (one load per table
// tile): a kernel may classify blocks without calling kv_block_range first.
#define CUBRIDGE_HOOKS_BLOCK_TABLE 1
"""


def _kv_range_body(plan: HookPlan, slots: dict[str, int]) -> str:
    if plan.classification == "none":
        return (_unused("b", "h", "q_start", "q_end", "block_n", "aux")
                + "\n  return KvRange{0, num_kv_blocks};")
    if plan.classification == "interval":
        return """\
  // Leading key blocks [0, lo) and trailing [hi, n) that are EMPTY as a whole.
  // A tile inside an EMPTY tile is EMPTY (interval arithmetic is monotone under
  // inclusion), so both are binary searches: O(log n) classifications.
  int lo = 0, top = num_kv_blocks;  // largest lo with [0, lo) EMPTY
  while (lo < top) {
    const int mid = (lo + top + 1) / 2;
    if (block_kind(b, h, q_start, q_end, 0, mid * block_n, aux) == BlockKind::Empty) {
      lo = mid;
    } else {
      top = mid - 1;
    }
  }
  int hi = num_kv_blocks, bottom = lo;  // smallest hi with [hi, n) EMPTY
  while (bottom < hi) {
    const int mid = (bottom + hi) / 2;
    if (block_kind(b, h, q_start, q_end, mid * block_n, num_kv_blocks * block_n, aux) ==
        BlockKind::Empty) {
      hi = mid;
    } else {
      bottom = mid + 1;
    }
  }
  return KvRange{lo, hi};"""
    bi = "b" if plan.table_depends_on_b else "0"
    hi = "h" if plan.table_depends_on_h else "0"
    return f"""{_unused('b', 'h')}
  const int q_last = (aux.seqlen_q > 0 && q_end > aux.seqlen_q ? aux.seqlen_q : q_end) - 1;
  // union of the table's per-row ranges, in keys, then in the kernel's key blocks
  int k_lo = 0, k_hi = 0;
  bool any = false;
  for (int i = q_start / kTableBlockM; i <= q_last / kTableBlockM; ++i) {{
    const int r_lo = cubridge::aux_load<int32_t>(aux, {slots[RANGES_AUX]}, {bi}, {hi}, i, 0);
    const int r_hi = cubridge::aux_load<int32_t>(aux, {slots[RANGES_AUX]}, {bi}, {hi}, i, 1);
    if (r_lo >= r_hi) continue;
    k_lo = any && k_lo < r_lo * kTableBlockN ? k_lo : r_lo * kTableBlockN;
    k_hi = any && k_hi > r_hi * kTableBlockN ? k_hi : r_hi * kTableBlockN;
    any = true;
  }}
  if (!any) return KvRange{{0, 0}};
  const int last = (k_hi + block_n - 1) / block_n;
  return KvRange{{k_lo / block_n, last < num_kv_blocks ? last : num_kv_blocks}};"""


def generate_header(plan: HookPlan, pair_codes: bool = True,
                    mask_tables: bool = True, table_selects: bool = False) -> HookHeader:
    """The complete cubridge_hooks.cuh of a plan, with its aux manifest.
    `pair_codes=False` / `mask_tables=False` keep what those would read from a
    table per score / pair (the forms they replace: A/B builds, the spill
    fallbacks' test); `table_selects=True` tabulates selections of the distance
    on the score's path too (the form before 2026-12-07, for A/B builds)."""
    # (only into free slots: a spec that fills them keeps its terms per score)
    free = MAX_AUX - len(_slots(plan, ()))
    score = kernel_score(plan.score.node if plan.score else None, plan.normalizer)
    code = pair_code(score) if pair_codes and free >= 2 else None
    if code is not None:
        score, free = coded_score(score, code), free - 2  # type: ignore[arg-type]
    mask = plan.mask.node if plan.mask else None
    table = mask_table(mask, {a.name: a.dtype for a in plan.aux}) \
        if mask_tables and free >= 1 else None
    if table is not None:
        mask, free = table.read(), free - 1
    tables = distance_tables(score, selects=table_selects)[:free]
    narrow = narrowed_indices(score, mask, {a.name: a.dtype for a in plan.aux}, plan.fixed_dims)
    slots = _slots(plan, tables, narrow, code, table)
    slot_of = {s.name: s.slot for s in slots}
    dtypes = {s.name: s.dtype for s in slots}
    tabulated = _table_reads(tables, slot_of)
    lines = [f"//   slot {s.slot}: {s.name} ({str(s.dtype).removeprefix('torch.')}, rank {s.rank})"
             for s in slots] or ["//   (none)"]
    helpers = HELPERS.read_text()
    parts = [
        f"// cubridge_hooks.cuh for spec {plan.name!r} ({plan.source}).",
        "// Generated by cubridge.lower.hook_header from the spec's mods; do not edit.",
        f"// Block classification: {plan.classification}. Aux slots:",
        *lines,
        "#pragma once",
        "#include <math.h>",
        "#include <stdint.h>",
        '#include "hook_types.cuh"',
        "",
        "namespace cubridge_hooks {",
        "using cubridge::AuxArgs;",
        "using cubridge::BlockKind;",
        "using cubridge::KvRange;",
        "using cubridge::Normalizer;",
        "",
        helpers,
        f"constexpr bool kHasScoreMod = {'true' if plan.score else 'false'};",
        f"constexpr bool kHasMaskMod = {'true' if plan.mask else 'false'};",
        "constexpr Normalizer kNormalizer = "
        f"{'Normalizer::Elementwise' if plan.elementwise else 'Normalizer::Softmax'};",
        "",
    ]
    if plan.classification == "table":
        parts += [f"constexpr int kTableBlockM = {plan.table_block[0]};  // tiles of the tables",
                  f"constexpr int kTableBlockN = {plan.table_block[1]};", ""]
    if score is not None:
        body = "\n".join([_unused("s", "b", "h", "q", "k", "aux"),
                          *render_body(score, slot_of, dtypes, fast=True,
                                      contiguous_aux=True, pre_bound=tabulated)])
    else:
        body = _unused("b", "h", "q", "k", "aux") + "\n  return s;"
    parts.append(_function("score_mod", body))
    parts += render_pair_hooks(score, slot_of, dtypes, tabulated)
    # (a sigmoid's linear score_mod has the exponent form below instead)
    if score is not None and (plan.normalizer == "softmax" or (
            plan.normalizer == "sigmoid" and linear_score(score) is None)):
        affine = render_affine_score(score, slot_of, dtypes, tabulated)
        if affine:
            parts.append(affine)
        elif plan.normalizer == "softmax":
            parts.append(render_row_factor(score, slot_of, dtypes, tabulated))
    if mask is not None:
        body = "\n".join([_unused("b", "h", "q", "k", "aux"),
                          *render_body(mask, slot_of, dtypes)])
    else:
        body = _unused("b", "h", "q", "k", "aux") + "\n  return true;"
    parts.append(_function("mask_mod", body))
    parts += render_mask_pair_hooks(mask, slot_of, dtypes)
    parts += render_staged_hooks(mask, slot_of, dtypes)
    parts += render_mask_cases(mask, slot_of, dtypes)
    parts.append(render_row_interval(mask, slot_of, dtypes))
    parts.append(render_key_runs(mask, slot_of, dtypes))
    parts.append(render_key_group(mask))
    activation = {"softmax": "s;  // unused: softmax normaliser",
                  "sigmoid": "detail::fast_sigmoid(s);", "relu": "s > 0.0f ? s : 0.0f;"}
    if plan.normalizer == "sigmoid":
        parts.append(_SCALED_SIGMOID)
        exponent = render_sigmoid_exponent(score, slot_of, dtypes, tabulated)
        if exponent:
            parts.append(exponent)
    else:
        parts.append(_function("activation", f"  return {activation[plan.normalizer]}"))
    parts.append(_function("block_kind", _block_kind_body(plan, slot_of, dtypes)))
    if plan.classification == "interval":
        parts.append(_KV_RANGE_BY_SEARCH)
    if plan.classification == "table":
        parts.append(_BLOCK_TABLE)
    parts.append(_function("kv_block_range", _kv_range_body(plan, slot_of)))
    parts.append("}  // namespace cubridge_hooks\n")
    if any(call in part for part in parts for call in _TRIG_CALLS):
        parts.insert(parts.index(helpers) + 1, TRIG_HELPERS.read_text())
    return HookHeader("\n".join(parts), slots, plan,
                      pair_slots(score, mask, slot_of, dtypes), tables, narrow, code, table)
