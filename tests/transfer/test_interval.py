"""Interval block classification: every rule over-approximates, and the
classification is conservative (and exact where the mask allows) against
brute force on the grid, for every docs/benchmark.md mask and the example specs."""

from __future__ import annotations

import glob
import inspect
import math
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from hook_variants import VARIANTS

from cubridge.attention import Shape
from cubridge.ir import BlockKind
from cubridge.spec import load
from cubridge.transfer import expr, interval
from cubridge.transfer.expr import DType
from cubridge.transfer.trace import trace_mask_mod

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "specs"
MASKED = {n: s for n, s in VARIANTS.items() if s.mask_mod is not None}
for _p in sorted(glob.glob(str(EXAMPLES / "*.py"))):
    _s = load(_p)
    if _s.mask_mod is not None:
        MASKED[f"examples/{_s.name}"] = _s

# masks interval arithmetic classifies exactly on the kernel's 128 x 64 tiles (an
# 'or' of two conditions, as in global_sliding_window, loses exactness on tiles
# that straddle both, e.g. 128 keys across the 64-key sink)
EXACT = {"causal", "sliding_window_1024", "global_sliding_window", "prefix_lm",
         "causal_blockwise", "alibi_causal", "softcap_causal", "relative_position",
         "relu_causal", "sigmoid_causal", "comb_prefix_softcap_sigmoid"}
EXACT |= {f"examples/{n}" for n in EXACT} | {"examples/mqa", "examples/prefix_lm_bidirectional"}

SHAPE = Shape(b=2, hq=2, hk=2, sq=1100, sk=1170, d=64)


# ---------------------------------------------------------------------------
# each helper contains op(x) for every x in its input intervals

def _random_interval(rng: random.Random, is_int: bool) -> tuple[float, float]:
    a, b = sorted(rng.uniform(-50, 50) for _ in range(2))
    if is_int:
        a, b = math.floor(a), math.floor(b)
    if rng.random() < 0.2:
        b = a  # points
    return (float(a), float(b))


def _sample(rng: random.Random, iv: tuple[float, float], is_int: bool) -> float:
    if is_int:
        return float(rng.randint(int(iv[0]), int(iv[1])))
    return rng.choice([iv[0], iv[1], rng.uniform(*iv)])


BINARY = ["add", "sub", "mul", "truediv", "floordiv", "mod", "min", "max", "lt", "le", "gt",
          "ge", "eq", "ne"]


@pytest.mark.parametrize("op", BINARY)
@pytest.mark.parametrize("dtype", [DType.INT, DType.FLOAT])
def test_binary_rules_contain_every_pointwise_value(op, dtype):
    rng = random.Random(hash((op, dtype.value)) & 0xFFFF)
    node = expr.apply(op, expr.var("q"), expr.var("k"))
    if dtype == DType.FLOAT:
        node = expr.apply(op, expr.cast(expr.var("q"), DType.FLOAT),
                          expr.cast(expr.var("k"), DType.FLOAT))
    fn = eval(f"lambda q, k: {interval.render(node, interval.python_lang(str))}",
              {"iv": interval, "math": math})
    is_int = dtype == DType.INT
    for _ in range(400):
        a, b = _random_interval(rng, is_int), _random_interval(rng, is_int)
        lo, hi = fn(a, b)
        for _ in range(8):
            x, y = _sample(rng, a, is_int), _sample(rng, b, is_int)
            if op in ("truediv", "floordiv", "mod") and y == 0:
                continue
            v = float(expr.evaluate_const(node.op, node.dtype, [x, y]))
            assert lo <= v <= hi, (op, a, b, x, y, v, (lo, hi))


@pytest.mark.parametrize("op", ["neg", "abs", "tanh", "exp", "exp2", "log", "sigmoid", "sqrt",
                                "floor", "ceil"])
def test_unary_rules_contain_every_pointwise_value(op):
    rng = random.Random(7)
    node = simplify_free(expr.apply(op, expr.cast(expr.var("q"), DType.FLOAT)))
    fn = eval(f"lambda q: {interval.render(node, interval.python_lang(str))}",
              {"iv": interval, "math": math})
    for _ in range(400):
        a = _random_interval(rng, False)
        if op in ("log", "sqrt"):
            a = (abs(a[0]) + 1e-3, abs(a[0]) + abs(a[1]) + 1e-3)
        lo, hi = fn(a)
        for _ in range(8):
            x = _sample(rng, a, False)
            v = float(expr.evaluate_const(op, DType.FLOAT, [x]))
            assert lo <= v <= hi, (op, a, x, v)


def simplify_free(node):
    return node


def test_logic_is_three_valued():
    t, f, u = interval.point(1), interval.point(0), interval.UNKNOWN_BOOL
    assert interval.and_(f, u) == f and interval.and_(t, t) == t and interval.and_(t, u) == u
    assert interval.or_(t, u) == t and interval.or_(f, f) == f and interval.or_(f, u) == u
    assert interval.not_(u) == u and interval.not_(t) == f
    assert interval.where(u, interval.point(2), interval.point(5)) == (2.0, 5.0)
    assert interval.kind(f) is BlockKind.EMPTY and interval.kind(t) is BlockKind.FULL


def test_aux_reads_are_unknown_but_scalars_are_exact():
    node = trace_mask_mod(VARIANTS["prefix_lm"].mask_mod, {"prefix_len": torch.tensor(100)}).node
    fn = interval.compile_mask(node)
    full = interval.classify_block(fn, 0, 0, (0, 64), (0, 64), {"prefix_len": torch.tensor(100)})
    assert full is BlockKind.FULL  # k < 100 everywhere in the tile
    aux = {"doc_id": torch.zeros(1, 8, dtype=torch.int64)}
    node = trace_mask_mod(VARIANTS["document_causal"].mask_mod, aux).node
    assert interval.classify_block(node, 0, 0, (64, 128), (0, 64), aux) is BlockKind.PARTIAL
    assert interval.classify_block(node, 0, 0, (0, 64), (64, 128), aux) is BlockKind.EMPTY


# ---------------------------------------------------------------------------
# classification against brute force


def _aux(spec):
    if spec.make_aux is None:
        return {}
    return dict(spec.make_aux(SHAPE, torch.Generator().manual_seed(11), torch.device("cpu")))


def _dense_mask(spec, aux) -> np.ndarray:
    names = [p.name for p in inspect.signature(spec.mask_mod).parameters.values()
             if p.kind == p.KEYWORD_ONLY]
    b = torch.arange(SHAPE.b).view(-1, 1, 1, 1)
    h = torch.arange(SHAPE.hq).view(1, -1, 1, 1)
    q = torch.arange(SHAPE.sq).view(1, 1, -1, 1)
    k = torch.arange(SHAPE.sk).view(1, 1, 1, -1)
    m = spec.mask_mod(b, h, q, k, **{n: aux[n] for n in names})
    return m.expand(SHAPE.b, SHAPE.hq, SHAPE.sq, SHAPE.sk).numpy()


def _truth(tile: np.ndarray) -> BlockKind:
    if tile.all():
        return BlockKind.FULL
    return BlockKind.PARTIAL if tile.any() else BlockKind.EMPTY


@pytest.mark.slow
@pytest.mark.parametrize("name", list(MASKED))
def test_classification_is_conservative_and_exact_against_brute_force(name):
    spec = MASKED[name]
    aux = _aux(spec)
    mask = _dense_mask(spec, aux)
    fn = interval.compile_mask(trace_mask_mod(spec.mask_mod, aux).node)
    rng = random.Random(name)
    tiles = []
    # the kernel's tiling (exact for EXACT masks), another one, tails included
    for bm, bn, exact in ((128, 64, True), (64, 128, False)):
        tiles += [(i, min(i + bm, SHAPE.sq), j, min(j + bn, SHAPE.sk), exact)
                  for i in range(0, SHAPE.sq, bm) for j in range(0, SHAPE.sk, bn)]
    for _ in range(300):  # arbitrary tiles
        q0, k0 = rng.randrange(SHAPE.sq), rng.randrange(SHAPE.sk)
        tiles.append((q0, min(SHAPE.sq, q0 + rng.randint(1, 300)), k0,
                      min(SHAPE.sk, k0 + rng.randint(1, 300)), False))
    inexact = 0
    for q0, q1, k0, k1, aligned in tiles:
        for b in range(SHAPE.b):
            for h in range(SHAPE.hq):
                got = interval.classify_block(fn, b, h, (q0, q1), (k0, k1), aux)
                want = _truth(mask[b, h, q0:q1, k0:k1])
                assert got is want or got is BlockKind.PARTIAL, (b, h, q0, q1, k0, k1, got, want)
                if got is not want:
                    inexact += 1
                    assert not (aligned and name in EXACT), (b, h, q0, q1, k0, k1, got, want)
    if name in EXACT:
        assert inexact <= len(tiles) * SHAPE.b * SHAPE.hq // 10


@pytest.mark.parametrize("op", BINARY)
@pytest.mark.parametrize("dtype", [DType.INT, DType.FLOAT])
def test_rules_are_monotone_under_inclusion(op, dtype):
    """X in Y implies op(X) in op(Y): what kv_block_range's binary search relies on."""
    rng = random.Random(hash(("mono", op, dtype.value)) & 0xFFFF)
    a_var, b_var = expr.var("q"), expr.var("k")
    if dtype == DType.FLOAT:
        a_var, b_var = expr.cast(a_var, DType.FLOAT), expr.cast(b_var, DType.FLOAT)
    node = expr.apply(op, a_var, b_var)
    fn = eval(f"lambda q, k: {interval.render(node, interval.python_lang(str))}",
              {"iv": interval, "math": math})
    is_int = dtype == DType.INT
    for _ in range(400):
        big_a, big_b = _random_interval(rng, is_int), _random_interval(rng, is_int)
        sub_a = tuple(sorted(_sample(rng, big_a, is_int) for _ in range(2)))
        sub_b = tuple(sorted(_sample(rng, big_b, is_int) for _ in range(2)))
        lo, hi = fn(big_a, big_b)
        sub_lo, sub_hi = fn(sub_a, sub_b)
        assert lo <= sub_lo and sub_hi <= hi, (op, big_a, big_b, sub_a, sub_b)
