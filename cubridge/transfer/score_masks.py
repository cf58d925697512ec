"""Masks written in score_mod. FlexAttention's own examples mask with
`torch.where(q_idx >= kv_idx, score, -float("inf"))`; a score of -inf gives its
pair no weight under every normaliser (softmax, sigmoid, relu), exactly as a
masked pair. Left in score_mod the condition is evaluated per score and no block
is skipped; lifted into the mask, blocks are classified (EMPTY skipped, FULL
unmasked) like any mask_mod's.

Lifted: the condition of a `where` that yields -inf on one side, at the top of
score_mod or as a term added to the rest (`score + where(c, 0.0, -inf)`),
provided it does not read the score. Anything else that yields -inf (a -inf
read from an aux tensor, a bias of -1e9) stays in score_mod.

Floor masks. Hugging Face masks with the dtype's lowest finite value instead
(`torch.where(allowed, score, torch.finfo(score.dtype).min)`, or an added
`torch.where(allowed, 0.0, torch.finfo(torch.float32).min)`). Such a constant C is
not -inf: a row whose every key has it weighs them alike (out = the mean of V,
lse = C + log(Sk)), where -inf gives it no weight. But at C <= FLOOR_MASK_LIMIT
(finfo.min of float32 and bfloat16) it is -inf everywhere else: it has no weight
in a row that keeps a key, and an added C absorbs the score (s + C == C). So under
softmax, for a spec with no mask_mod, its condition is lifted like -inf's
(`split_floor_mask`; the plan records C as `mask_floor`), and a pass after the
kernel gives the rows it leaves no key the spec's answer (cubridge.empty_rows).
Under sigmoid and relu a pair at C weighs nothing (sigmoid(C) and relu(C) are 0), as
at -inf: the condition is lifted beside a mask_mod too, and no row needs a pass.
Not lifted: finfo(float16).min = -65504 (s + C is not C, so a row it masks whole
is not uniform), under softmax a floor mask beside a mask_mod (its empty rows weigh
only the mask_mod's keys), masked sides that disagree (two Cs, or two added terms: C + C),
and conditions mixed with -inf ones.

A floor constant left in score_mod (one of those, or under a condition on the
score) still reaches the kernels: they take a row's maximum times log2(e) before the
exponentials, and finfo(float32).min times log2(e) overflows to -inf (then -inf -
-inf is NaN): under softmax such a constant is raised to SCORE_FLOOR, whose product
stays finite and which gives every weight the same value as finfo.min (kernel_score).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from cubridge.spec.model import Spec
from cubridge.transfer import expr
from cubridge.transfer.expr import Node


def _is_minus_inf(n: Node) -> bool:
    return n.op == "const" and isinstance(n.arg, float) and n.arg == -math.inf


def _is_zero(n: Node) -> bool:
    return n.op == "const" and not isinstance(n.arg, bool) and n.arg == 0


def _free_of_score(n: Node) -> bool:
    return expr.SCORE_VAR not in expr.free_vars(n)


def _split(score: Node, is_masked: Callable[[Node], bool], *, one_term: bool
           ) -> tuple[Node, Node | None]:
    """(kept, condition): `score` is `kept` where the condition holds and a masked
    value (is_masked) elsewhere; condition None where no such part is found.
    `one_term`: at most one added term may hold a condition."""
    if score.op == "where":
        c, a, b = score.args
        if _free_of_score(c) and is_masked(b):
            kept, inner = _split(a, is_masked, one_term=one_term)
            return kept, c if inner is None else expr.apply("and", c, inner)
        if _free_of_score(c) and is_masked(a):
            kept, inner = _split(b, is_masked, one_term=one_term)
            not_c = expr.negate(c)
            return kept, not_c if inner is None else expr.apply("and", not_c, inner)
    if score.op == "add":
        (kx, cx), (ky, cy) = (_split(a, is_masked, one_term=one_term) for a in score.args)
        conditions = [c for c in (cx, cy) if c is not None]
        if conditions and not (one_term and len(conditions) > 1):
            kept = ky if _is_zero(kx) else kx if _is_zero(ky) else expr.apply("add", kx, ky)
            return kept, conditions[0] if len(conditions) == 1 else \
                expr.apply("and", *conditions)
    return score, None


def split_score_mask(score: Node) -> tuple[Node, Node | None]:
    """(kept, condition): `score` equals where(condition, kept, -inf), the
    condition free of the score; condition None where no such part is found."""
    return _split(score, _is_minus_inf, one_term=False)


# A masked value C at or below this is -inf in every row that keeps a key: exp(C - s)
# is 0, and s + C rounds to C for any |s| below 2^75 (float32; 2^46 in the float64 a
# reference computes in). finfo(float32).min and finfo(bfloat16).min are far below;
# finfo(float16).min (-65504) is not, and s + C is not C there: a row it masks whole
# weighs its keys by their scores, not alike, which no mask plus mean of V gives.
FLOOR_MASK_LIMIT = -(2.0**100)


def _floor_values(n: Node) -> set[float]:
    return {m.arg for m in n.walk() if m.op == "const" and m.dtype == expr.DType.FLOAT
            and -math.inf < m.arg <= FLOOR_MASK_LIMIT}


def split_floor_mask(score: Node) -> tuple[Node, Node, float] | None:
    """(kept, condition, C): `score` equals where(condition, kept, C) for one floor
    constant C (<= FLOOR_MASK_LIMIT), the condition free of the score; None where
    there is no such part. Every masked pair must come out C exactly: one C, at most
    one added term with a condition (C + C overflows), and `kept` free of floor
    constants and -inf (a kept C would weigh its pair like a masked one)."""
    values = _floor_values(score)
    if len(values) != 1:
        return None
    (floor,) = values
    kept, condition = _split(score, lambda n: n.op == "const" and n.dtype == expr.DType.FLOAT
                             and n.arg == floor, one_term=True)
    if condition is None or _floor_values(kept) or any(_is_minus_inf(n) for n in kept.walk()):
        return None
    return kept, condition, floor


# Below -FLT_MAX / log2(e) (about -2.36e38) a score's product with log2(e) overflows.
SCORE_FLOOR = -(2.0**127)


def kernel_score(score: Node | None, normalizer: str) -> Node | None:
    """The score_mod the kernels compute: under softmax, float constants below
    SCORE_FLOOR (finfo.min as a mask value) raised to it; exponentials of differences
    between such scores and any other are 0 or 1 either way."""
    if score is None or normalizer != "softmax":
        return score
    low = {n: expr.const(SCORE_FLOOR) for n in score.walk()
           if n.op == "const" and n.dtype == expr.DType.FLOAT and -math.inf < n.arg < SCORE_FLOOR}
    return expr.substitute(score, low) if low else score


def is_bare_score(n: Node) -> bool:
    """Whether `n` is the score itself (a score_mod with nothing left to do)."""
    return n.op == "var" and n.arg == expr.SCORE_VAR


def masks_in_score_mod(spec: Spec) -> bool:
    """Whether the spec's score_mod holds a -inf mask: a condition split_score_mask
    lifts (what the hook plan moves into the mask). Floor masks are not counted:
    see score_mask_mod."""
    from cubridge.transfer.hooks import example_aux  # (hooks imports this module)
    from cubridge.transfer.trace import TraceError, trace_score_mod

    if spec.score_mod is None:
        return False
    try:
        traced = trace_score_mod(spec.score_mod, example_aux(spec))
    except TraceError:
        return False
    return split_score_mask(traced.node)[1] is not None


def score_mask_mod(spec: Spec, score_mod: Callable[..., torch.Tensor] | None
                   ) -> Callable[..., torch.Tensor] | None:
    """The mask a spec writes in its score_mod as a FlexAttention mask_mod over
    `score_mod` (the spec's, bound to its aux): the pairs it leaves finite, read at
    scores 0 and 1 (a kept part may be -inf at one of them). None where the spec
    masks nothing in score_mod. The bench counts these pairs, and FlexAttention
    gets its BlockMask from it, as a user would write one. Not for a floor mask
    (finfo.min): a BlockMask of its condition would give the rows it leaves no key
    out = 0, where the spec weighs every key alike, so peers run such a score_mod
    as written (our kernel fills those rows after it: cubridge.empty_rows)."""
    if score_mod is None or not masks_in_score_mod(spec):
        return None

    def not_minus_inf(b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor,
                      kv_idx: torch.Tensor) -> torch.Tensor:
        zero = torch.zeros((), dtype=torch.float32, device=q_idx.device)
        return (~torch.isneginf(score_mod(zero, b, h, q_idx, kv_idx))
                | ~torch.isneginf(score_mod(zero + 1, b, h, q_idx, kv_idx)))

    return not_minus_inf


def floor_mask_mod(spec: Spec, score_mod: Callable[..., torch.Tensor] | None
                   ) -> Callable[..., torch.Tensor] | None:
    """The condition of a floor mask (Hugging Face's finfo.min, split_floor_mask) in
    the spec's score_mod as a FlexAttention mask_mod: the pairs score_mod does not set
    to C, read at scores 0 and 1 (s + C is C itself for either). None where the
    spec's score_mod has no floor mask. The bench counts these pairs (a pair at C
    weighs nothing in a row that keeps a key, and nothing at all under sigmoid and
    relu), and gives the Flex peers its BlockMask where every row keeps a key, where
    it changes no output (runner.py)."""
    from cubridge.transfer.hooks import example_aux  # (hooks imports this module)
    from cubridge.transfer.trace import TraceError, trace_score_mod

    if score_mod is None or spec.score_mod is None:
        return None
    try:
        traced = trace_score_mod(spec.score_mod, example_aux(spec))
    except TraceError:
        return None
    if split_score_mask(traced.node)[1] is not None:
        return None  # (a -inf mask: score_mask_mod's)
    parts = split_floor_mask(traced.node)
    if parts is None:
        return None
    floor = parts[2]

    def not_floor(b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor,
                  kv_idx: torch.Tensor) -> torch.Tensor:
        zero = torch.zeros((), dtype=torch.float32, device=q_idx.device)
        return ((score_mod(zero, b, h, q_idx, kv_idx) != floor)
                | (score_mod(zero + 1, b, h, q_idx, kv_idx) != floor))

    return not_floor
