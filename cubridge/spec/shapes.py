"""Problem sizes derived from a spec: the small shapes that spec checks and
the verifier use, and the evaluation of declared aux dims ("Sq + Sk - 1")."""

from __future__ import annotations

import ast
from collections.abc import Sequence

from cubridge.attention import HeadConfig, Shape
from cubridge.spec.model import Spec

# (batch, Sq, Sk) of the default verification sweep. Lengths straddle the
# usual 64/128 tiles (63, 65, 127, 129, 200), go both ways in Sq != Sk, include
# a single query, and one long-query case (Sq >> Sk) in which windowed and
# document masks leave rows with no allowed key.
SWEEP: tuple[tuple[int, int, int], ...] = (
    (2, 128, 128),
    (1, 63, 63),
    (2, 65, 129),
    (3, 200, 127),
    (1, 1, 200),
    (1, 1300, 65),
)

# A few sizes for spec checks: cheap, not tile multiples, Sq != Sk both ways.
CHECK_SIZES: tuple[tuple[int, int, int], ...] = ((1, 16, 16), (2, 33, 65), (1, 65, 33))

MAX_SMALL_KV_HEADS = 2


def reduced_heads(cfg: HeadConfig) -> tuple[int, int]:
    """Fewer heads with the same GQA ratio: at most two KV heads (two, so that
    a wrong query-to-KV-head mapping shows), each with its full query group."""
    hk = min(cfg.hk, MAX_SMALL_KV_HEADS)
    return hk * (cfg.hq // cfg.hk), hk


def small_configs(configs: Sequence[HeadConfig]) -> list[tuple[int, int, int, int | None]]:
    """Distinct (hq, hk, d, dv) of the configs once heads are reduced."""
    seen: list[tuple[int, int, int, int | None]] = []
    for cfg in configs:
        hq, hk = reduced_heads(cfg)
        key = (hq, hk, cfg.d, cfg.dv)
        if key not in seen:
            seen.append(key)
    return seen


def shapes_for(
    configs: Sequence[HeadConfig], sizes: Sequence[tuple[int, int, int]]
) -> list[Shape]:
    return [
        Shape(b, hq, hk, sq, sk, d, dv)
        for hq, hk, d, dv in small_configs(configs)
        for b, sq, sk in sizes
    ]


# One long shape, so that structure at the scale of the benchmark variants
# (1024-wide windows, 512-blocks, 64 global keys) is exercised. Few heads keep
# its float64 reference cheap on CPU.
LONG: tuple[int, int, int] = (1, 1100, 1037)


def long_shape(configs: Sequence[HeadConfig]) -> Shape:
    hq, hk, d, dv = small_configs(configs)[0]
    group = min(hq // hk, 2)
    b, sq, sk = LONG
    return Shape(b, group, 1, sq, sk, d, dv)


def verification_shapes(configs: Sequence[HeadConfig]) -> list[Shape]:
    """The default sweep of the verifier: SWEEP for each reduced config, then
    the long shape."""
    return [*shapes_for(configs, SWEEP), long_shape(configs)]


def check_shapes(configs: Sequence[HeadConfig]) -> list[Shape]:
    return shapes_for(configs, CHECK_SIZES)


def smoke_shape(configs: Sequence[HeadConfig], sq: int = 8, sk: int = 8) -> Shape:
    """One tiny shape to call a reference on while loading."""
    hq, hk, d, dv = small_configs(configs)[0]
    return Shape(1, hq, hk, sq, sk, d, dv)


_DIM_NAMES = ("B", "Hq", "Hk", "Sq", "Sk", "D", "Dv", "S")  # (S: Sq = Sk, self-attention)
_ALLOWED_NODES = (
    ast.Expression, ast.BinOp, ast.Name, ast.Constant, ast.Load,
    ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.UnaryOp, ast.USub,
)


def dim_env(shape: Shape) -> dict[str, int]:
    # (S only where Sq = Sk: a self-attention spec's shapes; fit_shapes makes them so)
    env = dict(zip(_DIM_NAMES[:-1], (shape.b, shape.hq, shape.hk, shape.sq, shape.sk,
                                      shape.d, shape.head_dim_v), strict=True))
    if shape.sq == shape.sk:
        env["S"] = shape.sq
    return env


def uses_s(dims: Sequence[int | str]) -> bool:
    """Whether declared dims name S (the sequence length of a self-attention spec)."""
    return any(isinstance(d, str) and any(isinstance(n, ast.Name) and n.id == "S"
                                          for n in ast.walk(ast.parse(d, mode="eval")))
               for d in dims)


def fit_shapes(spec: Spec, shapes: Sequence[Shape]) -> list[Shape]:
    """`shapes` as `spec` can take them: for a self-attention spec (SELF_ATTENTION =
    True) each at Sq = Sk = max(Sq, Sk), duplicates dropped (the tails and lengths
    stay, the query/key asymmetry goes); for any other spec as given."""
    if not spec.self_attention:
        return list(shapes)
    out: list[Shape] = []
    for sh in shapes:
        n = max(sh.sq, sh.sk)
        square = Shape(sh.b, sh.hq, sh.hk, n, n, sh.d, sh.dv)
        if square not in out:
            out.append(square)
    return out


def validate_dim(dim: object) -> str | None:
    """None if `dim` is a valid aux dim, else why not."""
    if isinstance(dim, bool):
        return f"{dim!r} is not a dim"
    if isinstance(dim, int):
        return None if dim >= 0 else f"{dim} is negative"
    if not isinstance(dim, str):
        return f"{dim!r} is neither an int nor an expression string"
    try:
        tree = ast.parse(dim, mode="eval")
    except SyntaxError:
        return f"{dim!r} does not parse"
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED_NODES):
            return f"{dim!r} uses {type(node).__name__}; only + - * // on ints and {_DIM_NAMES}"
        if isinstance(node, ast.Name) and node.id not in _DIM_NAMES:
            return f"{dim!r} names {node.id!r}; known dims are {', '.join(_DIM_NAMES)}"
        if isinstance(node, ast.Constant) and not isinstance(node.value, int):
            return f"{dim!r} has a non-integer constant"
    return None


def eval_dim(dim: int | str, shape: Shape) -> int:
    """The size a declared aux dim has for `shape` (validate_dim first)."""
    if isinstance(dim, int):
        return dim
    env = dim_env(shape)
    if "S" not in env and uses_s((dim,)):
        raise ValueError(f"aux dim {dim!r} names S, the sequence length of a self-attention "
                         f"spec, but Sq = {shape.sq} != Sk = {shape.sk}")
    return int(eval(compile(ast.parse(dim, mode="eval"), "<aux dim>", "eval"),
                    {"__builtins__": {}}, env))
