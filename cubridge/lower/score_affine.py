"""Affine folding of score_mod: a score_mod of the form A * core(B * score), with
constants A > 0 and B (tanh soft-capping: 30 * tanh(score / 30)), lets a softmax
kernel fold B into the score scale and A into its exp2 factor, two multiplies
fewer per score (docs/hooks.md); a sigmoid kernel folds A into its exponent's
FFMA (sigmoid(A core) = 1 / (1 + 2^(-A log2(e) core))).

The softmax's row maximum and LSE stay exact under the fold: A > 0 keeps the
row's largest core value the largest score, and the kernel's exp2 factor
log2(e) * A turns core values back into scores. This module finds the form and
renders the hooks that expose it, and says when the core is tanh of the score
alone (CUBRIDGE_HOOKS_CORE_TANH: a kernel may evaluate a soft cap's tanh its own
way, as a polynomial, say); the plain score_mod stays for every other kernel and
for the CuIR.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from cubridge.lower.cuda_render import render_body
from cubridge.transfer.expr import INDEX_VARS, SCORE_VAR, DType, Node, var


@dataclass(frozen=True)
class AffineScore:
    outer: float  # A
    inner: float  # B
    core: Node  # score_mod with B * score replaced by score, and A dropped


def _const(n: Node) -> float | None:
    return float(n.arg) if n.op == "const" and n.dtype != DType.BOOL else None  # type: ignore[arg-type]


def _scaled_score(n: Node) -> float | None:
    """B where `n` is score * B, B * score or score / C (B = 1 / C)."""
    if len(n.args) != 2:
        return None
    a, b = n.args
    if n.op == "mul":
        if a.op == "var" and a.arg == SCORE_VAR and _const(b) is not None:
            return _const(b)
        if b.op == "var" and b.arg == SCORE_VAR and _const(a) is not None:
            return _const(a)
    if n.op == "truediv" and a.op == "var" and a.arg == SCORE_VAR:
        c = _const(b)
        return 1.0 / c if c else None
    return None


def _replace(n: Node, old: Node, new: Node) -> Node:
    if n is old:
        return new
    if not n.args:
        return n
    return Node(n.op, n.dtype, tuple(_replace(a, old, new) for a in n.args), n.arg)


def affine_score(node: Node) -> AffineScore | None:
    """score_mod's tree as A * core(B * score), or None where that form does not
    hold or folds nothing (A = B = 1)."""
    outer, core = 1.0, node
    if node.op == "mul" and len(node.args) == 2:
        for c, rest in ((node.args[0], node.args[1]), (node.args[1], node.args[0])):
            a = _const(c)
            if a is not None and a > 0 and rest.dtype == DType.FLOAT:
                outer, core = a, rest
                break
    # B folds only where the score enters the core once, as score * B
    parents = [n for n in core.walk() if any(a.op == "var" and a.arg == SCORE_VAR
                                            for a in n.args)]
    inner = 1.0
    if len(parents) == 1 and sum(a.op == "var" and a.arg == SCORE_VAR
                                 for a in parents[0].args) == 1:
        b = _scaled_score(parents[0])
        if b is not None and b != 0.0:
            inner = b
            core = _replace(core, parents[0], var(SCORE_VAR))
    if outer == 1.0 and inner == 1.0:
        return None
    return AffineScore(outer, inner, core)


def _float_literal(x: float) -> str:
    text = repr(float(x))
    return f"{text}f" if ("." in text or "e" in text) else f"{text}.0f"


def render_affine_score(node: Node, slot_of: Mapping[str, int],
                        dtypes: Mapping[str, torch.dtype],
                        pre_bound: Mapping[Node, str] | None = None) -> str:
    """The header's affine-score hooks for score_mod `node` ("" where it has no
    such form): the define, kScoreIn (B), kScoreOut (A) and score_core; terms in
    `pre_bound` are spelled as given (distance tables)."""
    form = affine_score(node)
    if form is None:
        return ""
    body = "\n".join(["  (void)s; (void)b; (void)h; (void)q; (void)k; (void)aux;",
                      *render_body(form.core, slot_of, dtypes, fast=True, contiguous_aux=True,
                                   pre_bound=pre_bound)])
    tanh_core = (
        "// score_core(s) = tanh(s), nothing else: a kernel may evaluate it its own way\n"
        "#define CUBRIDGE_HOOKS_CORE_TANH 1\n") if is_tanh_core(form.core) else ""
    return (
        "// score_mod(s) = kScoreOut * score_core(kScoreIn * s): a softmax or sigmoid kernel\n"
        "// may fold both constants into its score scale and exp2 factor (docs/hooks.md)\n"
        "#define CUBRIDGE_HOOKS_SCORE_AFFINE 1\n"
        f"constexpr float kScoreIn = {_float_literal(form.inner)};\n"
        f"constexpr float kScoreOut = {_float_literal(form.outer)};\n"
        "CUBRIDGE_HD float score_core(float s, int b, int h, int q, int k, const AuxArgs& aux) {\n"
        f"{body}\n}}\n"
        f"{tanh_core}")


def is_tanh_core(core: Node) -> bool:
    """Whether an affine score_mod's core is tanh of the score alone (soft-capping)."""
    return core.op == "tanh" and len(core.args) == 1 and _is_score(core.args[0])


# -- a factor of the score that no key changes ----------------------------------------------
#
# Under softmax, score_mod(s) = R(b, h, q) * s is each row's scores times one number:
# a kernel folds |R| into the row's exp2 factor and negates the rows where R < 0, so
# the scores stay raw (a per-head temperature; SSMax's s[h] * log(q + 1)).


def _factors(n: Node) -> list[Node]:
    """The multiplicands of a tree of products (n itself where it is no product)."""
    if n.op == "mul" and len(n.args) == 2:
        return _factors(n.args[0]) + _factors(n.args[1])
    return [n]


def _uses_key(n: Node) -> bool:
    return any(x.op == "var" and x.arg == INDEX_VARS[3] for x in n.walk())


def row_factor(node: Node | None) -> Node | None:
    """R where score_mod's tree is a product of the score (once) and factors that
    read neither the score nor the key, one of them not a constant (constants
    alone are the affine fold's); None otherwise."""
    if node is None:
        return None
    factors = _factors(node)
    scores = [f for f in factors if _is_score(f)]
    rest = [f for f in factors if not _is_score(f)]
    if len(scores) != 1 or not rest or any(_uses_score(f) or _uses_key(f) for f in rest):
        return None
    if all(_const(f) is not None for f in rest):
        return None
    out = rest[0]
    for f in rest[1:]:
        out = Node("mul", DType.FLOAT, (out, f))
    return out


def render_row_factor(node: Node | None, slot_of: Mapping[str, int],
                      dtypes: Mapping[str, torch.dtype],
                      pre_bound: Mapping[Node, str] | None = None) -> str:
    """The header's row-factor hooks for score_mod `node` ("" where it has no such
    form): the define and score_row_factor(b, h, q)."""
    factor = row_factor(node)
    if factor is None:
        return ""
    body = "\n".join(["  (void)b; (void)h; (void)q; (void)aux;",
                      *render_body(factor, slot_of, dtypes, fast=True, contiguous_aux=True,
                                   pre_bound=pre_bound)])
    return (
        "// score_mod(s) = score_row_factor(b, h, q) * s, a factor no key changes: a softmax\n"
        "// kernel may fold it into each row's exp2 factor (docs/hooks.md)\n"
        "#define CUBRIDGE_HOOKS_SCORE_ROW_FACTOR 1\n"
        "CUBRIDGE_HD float score_row_factor(int b, int h, int q, const AuxArgs& aux) {\n"
        f"{body}\n}}\n")


# -- sigmoid of a linear score ------------------------------------------------------------
#
# Under the sigmoid normaliser, sigmoid(B * s + C) = 1 / (1 + 2^(s * K1 + K0)) with
# K1 = -scale * B * log2(e) per launch and K0 = -C * log2(e): the scale, score_mod
# and the exponent's log2(e) in one FFMA (sigmoid_causal: C = -log S).


@dataclass(frozen=True)
class LinearScore:
    inner: float  # B
    offset: Node | None  # C (free of the score), None for 0


def _is_score(n: Node) -> bool:
    return n.op == "var" and n.arg == SCORE_VAR


def _uses_score(n: Node) -> bool:
    return any(_is_score(x) for x in n.walk())


def _scaled(n: Node) -> float | None:
    """B where `n` is the score or score * B (B * score, score / C)."""
    if _is_score(n):
        return 1.0
    return _scaled_score(n)


def linear_score(node: Node | None) -> LinearScore | None:
    """score_mod's tree as B * score + C with C free of the score (no score_mod:
    B = 1, C = 0), or None."""
    if node is None:
        return LinearScore(1.0, None)
    b = _scaled(node)
    if b is not None:
        return LinearScore(b, None)
    if node.op in ("add", "sub") and len(node.args) == 2:
        x, y = node.args
        bx, by = _scaled(x), _scaled(y)
        if bx is not None and not _uses_score(y):
            if node.op == "add":
                return LinearScore(bx, y)
            return LinearScore(bx, Node("neg", y.dtype, (y,)))
        if node.op == "add" and by is not None and not _uses_score(x):
            return LinearScore(by, x)
    return None


def render_sigmoid_exponent(node: Node | None, slot_of: Mapping[str, int],
                            dtypes: Mapping[str, torch.dtype],
                            pre_bound: Mapping[Node, str] | None = None) -> str:
    """The header's sigmoid-exponent hooks for score_mod `node` ("" where the
    score is not linear): the define, kScoreIn (B) and score_offset (C); terms in
    `pre_bound` are spelled as given (distance tables)."""
    form = linear_score(node)
    if form is None:
        return ""
    if form.offset is None:
        body = "  (void)b; (void)h; (void)q; (void)k; (void)aux;\n  return 0.0f;"
    else:
        body = "\n".join(["  (void)b; (void)h; (void)q; (void)k; (void)aux;",
                          *render_body(form.offset, slot_of, dtypes, fast=True,
                                       contiguous_aux=True, pre_bound=pre_bound)])
    return (
        "// sigmoid(score_mod(s)) = activation_of_exponent(-log2(e) (kScoreIn s +\n"
        "// score_offset)): a kernel may fold the scale, kScoreIn and -log2(e) into one\n"
        "// FFMA (docs/hooks.md)\n"
        "#define CUBRIDGE_HOOKS_SIGMOID_EXPONENT 1\n"
        f"constexpr float kScoreIn = {_float_literal(form.inner)};\n"
        "CUBRIDGE_HD float score_offset(int b, int h, int q, int k, const AuxArgs& aux) {\n"
        f"{body}\n}}\n")
