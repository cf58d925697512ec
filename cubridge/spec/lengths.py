"""Check lengths chosen from the spec itself.

A mask or score modification with a position constant (a window of 300, a
512-block, 64 global keys) only shows at sequence lengths past that
constant: a mod with radius 250 and a reference with radius 300 agree on
every shape shorter than 251. So the checks that compare a spec's mods with
its reference, and the run's CuIR verification, add one long case whose
lengths exceed twice the largest integer constant in the spec's code (its
reference, mods and make_aux, the spec-file functions they call, and the
module-level ints they read), and at least MIN_LONG positions.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from cubridge.attention import HeadConfig, Shape
from cubridge.spec.model import Spec

MIN_LONG = 1100  # the shortest long case: past 1024-windows and 512-blocks
MAX_LONG = 4200  # the longest (its float64 reference costs seconds on a CPU core)
# Integers at or above this are sentinels ("no limit"), not positions.
SENTINEL = 1 << 20
TILE = 64  # long lengths avoid multiples of the usual tile sizes


def _code_objects(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield from _code_objects(c)


def _numbers(value: object) -> Iterator[int]:
    if isinstance(value, bool):
        return
    if isinstance(value, int):
        yield abs(value)
    elif isinstance(value, float) and value.is_integer() and abs(value) < SENTINEL:
        yield abs(int(value))
    elif isinstance(value, tuple | frozenset):
        for v in value:
            yield from _numbers(v)


def _functions(value: object) -> Iterator[Callable[..., object]]:
    """The Python functions (and partials) in a closure cell or a partial
    argument, or in a tuple or list of them: the mods that FlexAttention's
    `and_masks` / `or_masks` and users' nested closures combine."""
    if isinstance(value, functools.partial) or getattr(value, "__code__", None) is not None:
        yield value  # type: ignore[misc]
    elif isinstance(value, tuple | list):
        for v in value:
            yield from _functions(v)


def integer_constants(spec: Spec) -> set[int]:
    """The integer constants the spec's code can compare positions with: the
    literals of reference, mask_mod, score_mod and make_aux (and of the
    functions of the spec file they call), the module-level numbers they read
    by name, and the numbers bound in their closures or functools.partial
    arguments, following the functions those hold (`or_masks(causal, window)`).
    Sentinels (>= 2**20) are left out."""
    roots = [spec.reference, spec.mask_mod, spec.score_mod, spec.make_aux]
    spec_file = str(Path(spec.path).resolve()) if spec.path is not None else None
    found: set[int] = set()
    seen: set[types.CodeType] = set()
    todo: list[Callable[..., object]] = [fn for fn in roots if fn is not None]
    while todo:
        fn = todo.pop()
        if isinstance(fn, functools.partial):  # partial(window_mask, radius=300)
            for value in (*fn.args, *fn.keywords.values()):
                found.update(_numbers(value))
                todo.extend(_functions(value))
            todo.append(fn.func)
            continue
        for cell in getattr(fn, "__closure__", None) or ():  # make_mask(300)'s closure
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            found.update(_numbers(value))
            todo.extend(_functions(value))  # and_masks(causal, window)'s mods
        code = getattr(fn, "__code__", None)
        if code is None or code in seen:
            continue
        seen.add(code)
        env = getattr(fn, "__globals__", {})
        for c in _code_objects(code):
            for const in c.co_consts:
                found.update(_numbers(const))
            for name in c.co_names:
                value = env.get(name)
                found.update(_numbers(value))
                inner = getattr(value, "__code__", None)
                if inner is not None and spec_file is not None and \
                        str(Path(inner.co_filename).resolve()) == spec_file:
                    todo.append(value)  # type: ignore[arg-type]
    return {n for n in found if n < SENTINEL}


def long_length(spec: Spec) -> int:
    """The key length of the long check case: > 2 x the largest constant,
    at least MIN_LONG, at most MAX_LONG, not a multiple of the tile."""
    largest = max(integer_constants(spec), default=0)
    n = min(max(MIN_LONG, 2 * largest + 2), MAX_LONG)
    return n + 1 if n % TILE == 0 else n


def covered_constant(spec: Spec) -> tuple[int, bool]:
    """(largest constant, whether the long case is longer than twice it)."""
    largest = max(integer_constants(spec), default=0)
    return largest, long_length(spec) > 2 * largest


def long_check_shapes(configs: Sequence[HeadConfig], spec: Spec) -> list[Shape]:
    """The long case: one batch, one KV head with up to two query heads (GQA
    mappings are checked on the small shapes), Sq = Sk + 19 > Sk = long_length."""
    cfg = configs[0]
    group = min(cfg.hq // cfg.hk, 2)
    sk = long_length(spec)
    return [Shape(1, group, 1, sk + 19, sk, cfg.d, cfg.dv)]
