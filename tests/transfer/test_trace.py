"""Tracing mods into the hook IR: semantics match torch, errors say what and where."""

from __future__ import annotations

import inspect
import math

import pytest
import torch
import torch.nn.functional as F
from hook_variants import (
    VARIANTS,
    half_precision_aux,
    pair_mask_aux,
    random_blocks_aux,
    tree_aux,
)

from cubridge.transfer import expr
from cubridge.transfer.expr import DType, evaluate_const
from cubridge.transfer.simplify import simplify
from cubridge.transfer.torch_render import render_torch
from cubridge.transfer.trace import TraceError, trace_mask_mod, trace_score_mod

B, H, SQ, SK = 2, 3, 37, 45


def _grid():
    return (torch.arange(B).view(B, 1, 1, 1), torch.arange(H).view(1, H, 1, 1),
            torch.arange(SQ).view(1, 1, SQ, 1), torch.arange(SK).view(1, 1, 1, SK))


def _aux():
    g = torch.Generator().manual_seed(3)
    return {
        "prefix_len": torch.tensor(11),
        "far_prefix": torch.tensor(2**25 + 11),
        "doc_id": torch.randint(0, 3, (B, max(SQ, SK)), generator=g).sort(dim=1).values,
        "segment": torch.randint(0, 4, (B, max(SQ, SK)), generator=g, dtype=torch.int32),
        "slope": torch.rand(H, generator=g),
        "rel_bias": torch.randn(H, SQ + SK - 1, generator=g),
        "log_s": torch.tensor(math.log(SK), dtype=torch.float32),
        **half_precision_aux(max(SQ, SK), H, g),
        **pair_mask_aux(max(SQ, SK), H, B, g),
        **tree_aux(max(SQ, SK), g),
        **random_blocks_aux(max(SQ, SK), H, g),
    }


def _eval_traced(node, aux, scores):
    """Evaluate a traced expression with the torch renderer on the full grid."""
    b, h, q, k = _grid()
    code = render_torch(node, {n: n for n in aux}, {n: t.dtype for n, t in aux.items()})
    env = {"torch": torch, "math": math, "b": b, "h": h, "q_idx": q, "kv_idx": k, "s": scores,
           **aux}
    return eval(code, env)


def _kwargs(fn, aux):
    names = [p.name for p in inspect.signature(fn).parameters.values() if p.kind == p.KEYWORD_ONLY]
    return {n: aux[n] for n in names}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_traced_mods_compute_what_the_mods_compute(name):
    spec = VARIANTS[name]
    aux = _aux()
    b, h, q, k = _grid()
    scores = torch.randn(B, H, SQ, SK, generator=torch.Generator().manual_seed(5)) * 5
    if spec.mask_mod is not None:
        traced = trace_mask_mod(spec.mask_mod, aux)
        assert traced.node.dtype == DType.BOOL
        want = spec.mask_mod(b, h, q, k, **_kwargs(spec.mask_mod, aux))
        got = _eval_traced(traced.node, aux, scores)
        assert torch.equal(got.expand(B, H, SQ, SK), want.expand(B, H, SQ, SK))
    if spec.score_mod is not None:
        traced = trace_score_mod(spec.score_mod, aux)
        assert traced.node.dtype == DType.FLOAT
        want = spec.score_mod(scores, b, h, q, k, **_kwargs(spec.score_mod, aux))
        got = _eval_traced(traced.node, aux, scores)
        torch.testing.assert_close(got.expand_as(want).float(), want.float(), rtol=1e-5,
                                   atol=1e-5)


def test_dtype_promotion_follows_torch():
    t = trace_score_mod(lambda s, b, h, q, k: s + (q - k) // 2 + (q / 4), {}).node
    # int // int stays int and is cast once; int / int is float
    assert t.dtype == DType.FLOAT
    ops = [n.op for n in t.walk()]
    assert "floordiv" in ops and "truediv" in ops
    fd = next(n for n in t.walk() if n.op == "floordiv")
    assert fd.dtype == DType.INT
    td = next(n for n in t.walk() if n.op == "truediv")
    assert all(a.dtype == DType.FLOAT for a in td.args)
    m = trace_mask_mod(lambda b, h, q, k: (q - k) * 1.5 < 3, {}).node
    lt = next(n for n in m.walk() if n.op == "lt")
    assert lt.args[0].dtype == DType.FLOAT and lt.args[1] == expr.const(3.0)


def test_aux_reads_are_recorded_with_rank_and_dtype():
    aux = _aux()
    t = trace_mask_mod(VARIANTS["document_causal"].mask_mod, aux)
    assert [(a.name, a.dtype, a.rank) for a in t.aux] == [("doc_id", torch.int64, 2)]
    loads = [n for n in t.node.walk() if n.op == "aux_load"]
    assert {len(n.args) for n in loads} == {2}
    t = trace_mask_mod(VARIANTS["prefix_lm"].mask_mod, aux)
    assert [(a.name, a.rank) for a in t.aux] == [("prefix_len", 0)]


def test_aux_shape_is_read_at_run_time_not_baked_in():
    t = trace_score_mod(VARIANTS["relative_position"].score_mod, _aux())
    sizes = [n for n in t.node.walk() if n.op == "aux_size"]
    assert sizes and sizes[0].arg == ("rel_bias", 1)


def test_chained_indexing_and_methods():
    aux = {"tab": torch.randn(3, 4)}
    t = trace_score_mod(lambda s, b, h, q, k, *, tab: s.clamp(min=0).tanh() + tab[h][k % 4],
                        aux).node
    ops = {n.op for n in t.walk()}
    assert {"max", "tanh", "aux_load", "mod"} <= ops


def _line_of(fn, marker):
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, text in enumerate(lines) if marker in text)


def test_unsupported_op_names_the_op_and_line():
    def mask(b, h, q, k):
        x = q - k
        return torch.atan(x) > 0  # the bad line

    with pytest.raises(TraceError) as e:
        trace_mask_mod(mask, {})
    assert "torch.atan" in str(e.value)
    assert e.value.where == f"{__file__}:{_line_of(mask, 'the bad line')}"
    assert "mask_mod" in str(e.value)


@pytest.mark.parametrize("fn", [
    lambda s, d: s + torch.log1p(d), lambda s, d: s + torch.special.log1p(d),
    lambda s, d: s + torch.expm1(-d / 50), lambda s, d: s - torch.log2(d + 1),
    lambda s, d: s - (d + 1).log10(), lambda s, d: s * torch.rsqrt(d + 1),
    lambda s, d: s + (d + 1).reciprocal(), lambda s, d: s + torch.log2(d + 1).floor()],
    ids=["log1p", "special.log1p", "expm1", "log2", "log10", "rsqrt", "reciprocal",
         "floor-log2"])
def test_composed_functions_trace_to_what_they_compute(fn):
    """Functions the IR writes with its own ops (log1p as log(1 + x), ...) compute
    what torch's do, to float32 rounding; log2 is an op of its own, exact at powers
    of two (a bucket's floor(log2(d)) must not round down at 8)."""
    def score_mod(score, b, h, q, k):
        return fn(score, (q - k).abs().float())

    b, h, q, k = _grid()
    scores = torch.randn(B, H, SQ, SK, generator=torch.Generator().manual_seed(5)) * 5
    got = _eval_traced(trace_score_mod(score_mod, {}).node, {}, scores)
    want = score_mod(scores, b, h, q, k)
    torch.testing.assert_close(got.expand_as(want), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fn", [
    lambda s, h, d: s - 2.0 ** (-8.0 * (h + 1) / 32) * d,
    lambda s, h, d: s - torch.pow(2.0, -(h + 1) / 4) * d,
    lambda s, h, d: s + 0.5 ** d.float(),
    lambda s, h, d: s * torch.tensor(3.0) ** (h / 2)],
    ids=["alibi-slope", "torch.pow", "decay", "tensor-base"])
def test_a_positive_constant_to_a_traced_power_is_exp2(fn):
    """c ** x with a traced exponent (ALiBi's slopes from h: 2 ** (-8 (h + 1) / H)) is
    exp2(log2(c) x), what torch computes to float32 rounding."""
    def score_mod(score, b, h, q, k):
        return fn(score, h, (q - k).abs())

    b, h, q, k = _grid()
    scores = torch.randn(B, H, SQ, SK, generator=torch.Generator().manual_seed(5)) * 5
    node = trace_score_mod(score_mod, {}).node
    assert "exp2" in {n.op for n in node.walk()}
    got = _eval_traced(node, {}, scores)
    want = score_mod(scores, b, h, q, k)
    torch.testing.assert_close(got.expand_as(want), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fn", [lambda q, k: 2 ** (q - k), lambda q, k: (-2.0) ** (q - k),
                                lambda q, k: (q - k).float() ** (q - k)],
                         ids=["int-power", "negative-base", "traced-base"])
def test_other_traced_powers_are_rejected(fn):
    with pytest.raises(TraceError, match="pow with a traced exponent"):
        trace_score_mod(lambda s, b, h, q, k: s + fn(q, k), {})


def test_unsupported_method_names_the_method():
    def score(s, b, h, q, k):
        return s.cumsum(0)  # method

    with pytest.raises(TraceError, match=r"\.cumsum\(\)") as e:
        trace_score_mod(score, {})
    assert e.value.where.endswith(f":{_line_of(score, '# method')}")


def test_python_control_flow_is_rejected_with_its_line():
    def mask(b, h, q, k):
        if q > k:  # branch
            return q > 0
        return q < 0

    with pytest.raises(TraceError, match="control flow") as e:
        trace_mask_mod(mask, {})
    assert e.value.where.endswith(f":{_line_of(mask, '# branch')}")


def test_math_functions_on_traced_values_are_rejected():
    with pytest.raises(TraceError, match="float\\(\\)"):
        trace_score_mod(lambda s, b, h, q, k: s + math.log(q), {})


def test_float_bitwise_ops_are_rejected():
    """Bit operations take integers and bools (as in torch), not floats."""
    with pytest.raises(TraceError, match="bitwise & on a float"):
        trace_score_mod(lambda s, b, h, q, k: s & 1, {})
    with pytest.raises(TraceError, match="bitwise << on a float"):
        trace_score_mod(lambda s, b, h, q, k: s + (q / 2 << 1), {})


def test_non_bool_mask_is_rejected():
    with pytest.raises(TraceError, match="bool mask"):
        trace_mask_mod(lambda b, h, q, k: q - k, {})


def test_missing_aux_is_named():
    def mask(b, h, q, k, *, lengths):
        return q < lengths[b]

    with pytest.raises(TraceError, match="'lengths'"):
        trace_mask_mod(mask, {"other": torch.zeros(2)})


def test_an_aux_of_a_dtype_hooks_cannot_read_is_blamed_on_the_mod_taking_it():
    def score(s, b, h, q, k, *, bias):
        return s + bias[h]

    line = score.__code__.co_firstlineno
    with pytest.raises(TraceError, match="score_mod takes aux 'bias', which has dtype "
                       "torch.float8_e4m3fn; hooks read only") as e:
        trace_score_mod(score, {"bias": torch.zeros(2, dtype=torch.float8_e4m3fn)})
    assert e.value.where == f"{__file__}:{line}"


def test_global_tensor_captured_by_a_mod_is_lifted_to_aux():
    table = torch.arange(10)

    def mask(b, h, q, k):
        return table[q] > 3  # captured

    t = trace_mask_mod(mask, {})
    assert [(a.name, a.rank) for a in t.aux] == [("table", 1)]
    assert dict(t.captured)["table"] is table


def test_wrong_index_count_and_float_index_are_rejected():
    aux = {"tab": torch.randn(3, 4)}
    with pytest.raises(TraceError, match="rank 2 but got 3"):
        trace_score_mod(lambda s, b, h, q, k, *, tab: s + tab[h, q, k], aux)
    with pytest.raises(TraceError, match="float expression"):
        trace_score_mod(lambda s, b, h, q, k, *, tab: s + tab[h, q / 2], aux)
    with pytest.raises(TraceError, match="used as a value"):
        trace_score_mod(lambda s, b, h, q, k, *, tab: s + tab[h], aux)


def test_unsupported_aux_dtype_is_rejected():
    with pytest.raises(TraceError, match="float8_e4m3fn"):
        trace_score_mod(lambda s, b, h, q, k, *, t: s + t[h],
                        {"t": torch.ones(2).to(torch.float8_e4m3fn)})


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_aux_reads_are_float_reads(dtype):
    """A bias kept in the model's dtype: read as a float (FlexAttention promotes it)."""
    traced = trace_score_mod(lambda s, b, h, q, k, *, t: s + t[h],
                             {"t": torch.ones(2, dtype=dtype)})
    (read,) = [n for n in traced.node.walk() if n.op == "aux_load"]
    assert read.dtype == DType.FLOAT and traced.node.dtype == DType.FLOAT


def test_simplify_folds_constants_and_identities():
    t = trace_mask_mod(lambda b, h, q, k: (q - 0 >= k * 1) & (3 < 4) | (2 > 5), {}).node
    assert t == expr.apply("ge", expr.var("q"), expr.var("k"))
    t = trace_score_mod(lambda s, b, h, q, k: torch.where(q >= 0, s, s) + 0.0, {}).node
    assert t == expr.var("score")
    # floor division and modulo fold with Python/torch sign rules
    folded = simplify(expr.apply("floordiv", expr.const(-7), expr.const(2)))
    assert folded == expr.const(-4)
    assert simplify(expr.apply("mod", expr.const(-7), expr.const(3))) == expr.const(2)
    # division by zero is left for run time
    assert simplify(expr.apply("floordiv", expr.const(1), expr.const(0))).op == "floordiv"


def test_dtype_and_device_attributes_for_constants():
    def score(s, b, h, q, k):
        return torch.where(q >= k, s, torch.tensor(-1.0, dtype=s.dtype, device=s.device))

    t = trace_score_mod(score, {}).node
    assert t.op == "where" and t.args[2] == expr.const(-1.0)


def test_flex_attention_mask_combinators_trace():
    from torch.nn.attention.flex_attention import and_masks, or_masks

    def sink(b, h, q, k):
        return k < 64

    def window(b, h, q, k):
        return q - k < 1024

    mask = and_masks(VARIANTS["causal"].mask_mod, or_masks(window, sink))
    t = trace_mask_mod(mask, {}).node
    want = trace_mask_mod(VARIANTS["global_sliding_window"].mask_mod, {}).node
    assert t == want  # the constant True/False seeds simplify away


def test_masked_fill_is_a_where():
    t = trace_score_mod(lambda s, b, h, q, k: s.masked_fill(q < k, -math.inf), {}).node
    assert t.op == "where" and t.args[1] == expr.const(-math.inf) and t.args[2] == expr.var("score")


def test_min_and_max_against_constant_arithmetic_render_as_clamps():
    """torch.minimum takes no Python number: `min(100 - 1, q)` (a row interval's folded
    bounds) renders as a clamp, whichever side the constant arithmetic is on."""
    q = expr.var("q")
    ninety_nine = expr.apply("add", expr.const(100), expr.const(-1))
    for op, want in (("min", torch.clamp(_grid()[2], max=99)),
                     ("max", torch.clamp(_grid()[2], min=99))):
        for args in ((ninety_nine, q), (q, ninety_nine)):
            got = _eval_traced(expr.apply(op, *args), {}, None)
            assert torch.equal(got, want), (op, args)


# ---------------------------------------------------------------------------
# torch ops users write in mods: each traces to what torch computes on the grid
# (q - k spans both signs; scores both signs, past softplus's threshold)


def _check_score_mod(score_mod, atol=1e-5, exact=False):
    b, h, q, k = _grid()
    scores = torch.randn(B, H, SQ, SK, generator=torch.Generator().manual_seed(5)) * 15
    got = _eval_traced(trace_score_mod(score_mod, {}).node, {}, scores)
    want = score_mod(scores, b, h, q, k)
    got = torch.as_tensor(got).expand_as(want).to(want.dtype)
    if exact:
        assert torch.equal(got, want)
    else:
        torch.testing.assert_close(got, want, rtol=1e-5, atol=atol)


def _check_mask_mod(mask_mod):
    b, h, q, k = _grid()
    got = _eval_traced(trace_mask_mod(mask_mod, {}).node, {}, None)
    want = mask_mod(b, h, q, k)
    assert torch.equal(torch.as_tensor(got).expand(B, H, SQ, SK), want.expand(B, H, SQ, SK))


_INT_OPS = {
    "div_trunc": lambda q, k: torch.div(q - k, 7, rounding_mode="trunc"),
    "div_trunc_negative_divisor": lambda q, k: torch.div(q - k, -5, rounding_mode="trunc"),
    "div_trunc_traced_divisor": lambda q, k: torch.div(q - 20, k + 1, rounding_mode="trunc"),
    "div_trunc_nonnegative": lambda q, k: torch.div(q + k, 8, rounding_mode="trunc"),
    "tensor_div_trunc": lambda q, k: (k - q).div(6, rounding_mode="trunc"),
    "fmod": lambda q, k: torch.fmod(q - k, 7),
    "fmod_negative_divisor": lambda q, k: torch.fmod(k - q, -4),
    "fmod_traced_divisor": lambda q, k: torch.fmod(q - 20, k + 1),
    "fmod_method": lambda q, k: (q - k).fmod(16),
    "sign": lambda q, k: torch.sign(q - k),
    "sgn": lambda q, k: (k - q).sgn() * 3,
    "clamp_min": lambda q, k: (q - k).clamp_min(-4),
    "clamp_max": lambda q, k: torch.clamp_max(q - k, 6),
    "cube": lambda q, k: (q - k) ** 3,
    "pow_zero": lambda q, k: torch.pow(q - k, 0) + q,
    "add_alpha": lambda q, k: torch.add(q, k, alpha=3),
    "sub_alpha": lambda q, k: torch.sub(q, k, alpha=2),
    "rsub_alpha": lambda q, k: torch.rsub(q, k, alpha=2),
}


@pytest.mark.parametrize("name", sorted(_INT_OPS))
def test_integer_ops_trace_exactly(name):
    """C-style truncating division and remainder (torch.div(rounding_mode="trunc"),
    torch.fmod), sign, one-sided clamps, integer powers and alpha= are exact on
    integers of either sign."""
    fn = _INT_OPS[name]
    _check_score_mod(lambda s, b, h, q, k: fn(q, k).to(torch.float32), exact=True)


_FLOAT_OPS = {
    "div_trunc": lambda s, d: torch.div(s, 3.0, rounding_mode="trunc"),
    "trunc": lambda s, d: torch.trunc(s / 2),
    "fmod": lambda s, d: torch.fmod(s, 4.0),
    "sign": lambda s, d: torch.sign(s) * d,
    "softplus": lambda s, d: F.softplus(s),
    "softplus_beta": lambda s, d: F.softplus(s, beta=2.0, threshold=10.0),
    "logsigmoid": lambda s, d: F.logsigmoid(s),
    "silu": lambda s, d: F.silu(s),
    "hardtanh": lambda s, d: F.hardtanh(s, -5.0, 5.0),
    "leaky_relu": lambda s, d: F.leaky_relu(s, 0.1),
    "cube": lambda s, d: (s / 10) ** 3,
    "inverse": lambda s, d: (d + 1) ** -1,
    "inverse_square": lambda s, d: torch.pow(d + 1, -2),
    "inverse_sqrt": lambda s, d: s * torch.pow(1.0 + d, -0.5),
    "int_base_float_power": lambda s, d: s + d.long() ** 2.0,
    "type_as": lambda s, d: s + d.long().type_as(s),
    "double": lambda s, d: s + d.long().double(),
    "new_tensor": lambda s, d: s * s.new_tensor(1.5) + d.long().new_tensor(2.7),
    "sin_cos": lambda s, d: torch.sin(s) + 0.5 * torch.cos(d * 0.05),
    "sin_cos_methods": lambda s, d: s.sin() * d.long().cos(),  # (an int's cos is float)
}


@pytest.mark.parametrize("name", sorted(_FLOAT_OPS))
def test_float_ops_trace_to_what_torch_computes(name):
    fn = _FLOAT_OPS[name]
    _check_score_mod(lambda s, b, h, q, k: fn(s, (q - k).abs().float()))


def test_sin_and_cos_are_ops_of_their_own_and_fold_as_torch_computes():
    node = trace_score_mod(lambda s, b, h, q, k: s.sin() + torch.cos(q - k), {}).node
    assert {"sin", "cos"} <= {n.op for n in node.walk()}
    cos = next(n for n in node.walk() if n.op == "cos")
    assert cos.dtype == DType.FLOAT and cos.args[0].dtype == DType.FLOAT
    # constants fold; at +-inf NaN, as torch.sin gives (math.sin raises there)
    assert math.isnan(evaluate_const("sin", DType.FLOAT, [math.inf]))
    assert evaluate_const("cos", DType.FLOAT, [math.pi]) == -1.0


def test_an_integer_to_a_negative_integer_power_is_rejected_as_torch_does():
    with pytest.raises(TraceError, match="negative integer powers"):
        trace_score_mod(lambda s, b, h, q, k: s + (q - k) ** -1, {})


def test_trunc_division_and_fmod_of_indices_by_a_positive_constant_are_the_floor_forms():
    """A non-negative dividend (indices, their sums, products, quotients) by a positive
    constant: torch.div(trunc) and torch.fmod are // and %, with no sign fix-up, so
    the mask analyses see the floor forms (row intervals of q // 64 == k // 64)."""
    node = trace_mask_mod(lambda b, h, q, k: torch.div(q, 64, rounding_mode="trunc")
                          == torch.div(k, 64, rounding_mode="trunc"), {}).node
    assert {n.op for n in node.walk()} == {"eq", "floordiv", "var", "const"}
    node = trace_mask_mod(lambda b, h, q, k: torch.fmod(q + 2 * k, 8) != 3, {}).node
    assert "where" not in {n.op for n in node.walk()}
    node = trace_mask_mod(lambda b, h, q, k: torch.fmod(q - k, 8) < 3, {}).node
    assert "where" in {n.op for n in node.walk()}  # (q - k may be negative)


@pytest.mark.parametrize("mask_mod", [
    lambda b, h, q, k: (q >= k) * (q - k < 9),
    lambda b, h, q, k: torch.mul(q >= k, k > 3) + (q == k),
    lambda b, h, q, k: torch.ones_like(q, dtype=torch.bool) & (q >= k),
    lambda b, h, q, k: torch.where(k < 4, torch.full_like(q, True, dtype=torch.bool), q >= k),
    lambda b, h, q, k: torch.zeros_like(k, dtype=torch.bool) | (q - k < 5),
    lambda b, h, q, k: torch.sign(q - k) >= 0,
    lambda b, h, q, k: torch.fmod(k - q, 3) == -1,
    lambda b, h, q, k: torch.div(k - q, 4, rounding_mode="trunc") == 0,
], ids=["bool-product", "bool-sum", "ones_like-bool", "full_like-bool", "zeros_like-bool",
        "sign", "fmod", "div-trunc"])
def test_masks_written_with_bool_arithmetic_and_like_dtypes(mask_mod):
    """bool * bool and bool + bool are bool in torch (and, or), and *_like(dtype=bool)
    is a bool: each is a mask."""
    _check_mask_mod(mask_mod)


def test_bool_arithmetic_beside_a_number_stays_arithmetic():
    node = trace_score_mod(lambda s, b, h, q, k: s + (q >= k) * 2 + (q >= k) * (k > 1), {}).node
    _check_score_mod(lambda s, b, h, q, k: s + (q >= k) * 2 + (q >= k) * (k > 1), exact=True)
    assert "mul" in {n.op for n in node.walk()}


TOKEN_TYPES = torch.tensor([0, 2, 2, 3])


@pytest.mark.parametrize("mask_mod", [
    lambda b, h, q, k, *, segment: (q >= k) & (torch.isin(segment[b, k], TOKEN_TYPES) | (q == k)),
    lambda b, h, q, k, *, segment: torch.isin(segment[b, q], TOKEN_TYPES, invert=True),
    lambda b, h, q, k, *, segment: torch.isin(k - q, torch.tensor([-3, 0, 5, 40])),
    lambda b, h, q, k, *, segment: torch.isin(q - k, 4),
    lambda b, h, q, k, *, segment: torch.isin(k, torch.arange(40) // 2 * 3),  # (20 distinct)
    lambda b, h, q, k, *, segment: torch.isin(segment[b, k], torch.tensor([], dtype=torch.int32))
    | (q == k),
], ids=["keys-of-some-types", "invert", "signed-offsets", "a-number", "repeated-members",
        "empty-set"])
def test_isin_against_a_constant_set_is_an_or_of_equalities(mask_mod):
    aux = {"segment": _aux()["segment"]}
    node = trace_mask_mod(mask_mod, aux).node
    assert {n.op for n in node.walk()} <= {"or", "and", "not", "eq", "ge", "sub", "var",
                                           "const", "aux_load"}
    b, h, q, k = _grid()
    want = mask_mod(b, h, q, k, segment=aux["segment"])
    got = _eval_traced(node, aux, None)
    assert torch.equal(torch.as_tensor(got).expand(B, H, SQ, SK), want.expand(B, H, SQ, SK))


def test_isin_tests_each_distinct_member_once():
    node = trace_mask_mod(lambda b, h, q, k: torch.isin(k, TOKEN_TYPES), {}).node
    assert sorted(n.args[1].arg for n in node.walk() if n.op == "eq") == [0, 2, 3]


def test_isin_against_more_than_32_numbers_or_a_traced_set_is_rejected():
    def past_the_limit(b, h, q, k):
        return torch.isin(k, torch.arange(33))  # the bad line

    with pytest.raises(TraceError, match="a set of 33 numbers; hooks take at most 32") as e:
        trace_mask_mod(past_the_limit, {})
    assert e.value.where == f"{__file__}:{_line_of(past_the_limit, 'the bad line')}"
    assert trace_mask_mod(lambda b, h, q, k: torch.isin(k, torch.arange(32)), {}).node
    with pytest.raises(TraceError, match="against a value traced per pair; hooks take a "
                                         "constant set"):
        trace_mask_mod(lambda b, h, q, k: torch.isin(k, q), {})

    def aux_set(b, h, q, k, *, allowed):
        return torch.isin(k, allowed)

    with pytest.raises(TraceError, match="against aux tensor 'allowed'.* at most 32 numbers"):
        trace_mask_mod(aux_set, {"allowed": torch.arange(3)})


# x >> j and x & (2^j - 1) of signed offsets: floor quotients and residues, exact for
# either sign (arithmetic shifts, two's complement low bits)
_BIT_FORMS = {
    "shift": lambda q, k: (q - k) >> 3,
    "shift_of_a_negative_offset": lambda q, k: (k - q - 7) >> 2,
    "shift_by_zero": lambda q, k: (q - k) >> 0,
    "bitwise_right_shift": lambda q, k: torch.bitwise_right_shift(k - q, 4),
    "low_bits": lambda q, k: (q - k) & 7,
    "low_bits_on_the_left": lambda q, k: 15 & (k - q - 3),
    "low_bit": lambda q, k: torch.bitwise_and(k - 2 * q, 1),
    "both": lambda q, k: ((k - q) >> 2) & 3,
}


@pytest.mark.parametrize("name", sorted(_BIT_FORMS))
def test_shifts_and_masks_of_low_bits_are_floor_quotients_and_residues(name):
    fn = _BIT_FORMS[name]
    node = trace_score_mod(lambda s, b, h, q, k: fn(q, k).to(torch.float32), {}).node
    ops = {n.op for n in node.walk()}
    assert not ops & {"shr", "bitand"} and ops & {"floordiv", "mod", "sub"}, ops
    _check_score_mod(lambda s, b, h, q, k: fn(q, k).to(torch.float32), exact=True)
    # the IR's own (Python) semantics agree with the bit ops at values of either sign
    q, k = expr.var("q"), expr.var("k")
    for qv, kv in [(0, 0), (3, 40), (40, 3), (-17, 6), (5, -33), (-1, 0)]:
        at = simplify(expr.substitute(node, {q: expr.const(qv), k: expr.const(kv)}))
        assert at == expr.const(float(fn(torch.tensor(qv), torch.tensor(kv)).item())), (qv, kv)


@pytest.mark.parametrize("fn", [
    lambda q, k: (q - k) & 6, lambda q, k: (q - k) >> 31, lambda q, k: (q - k) >> (k % 3),
    lambda q, k: (q - k) << 2, lambda q, k: (q - k) & 0,
], ids=["not-low-bits", "shift-past-30", "traced-shift", "left-shift", "and-zero"])
def test_other_bit_operations_stay_bit_operations(fn):
    node = trace_score_mod(lambda s, b, h, q, k: fn(q, k).to(torch.float32), {}).node
    assert {n.op for n in node.walk()} & {"shr", "bitand", "shl"} or node.op == "const"
    _check_score_mod(lambda s, b, h, q, k: fn(q, k).to(torch.float32), exact=True)


_FMOD_CASES = [(p, s, op) for p in (3, 7, 24) for s in (-p, 1 - p, -2, -1, 1, 2, p - 1, p)
               for op in ("eq", "ne")]


@pytest.mark.parametrize(("period", "s", "op"), _FMOD_CASES,
                         ids=[f"fmod{p}-{op}-{s}" for p, s, op in _FMOD_CASES])
def test_fmod_compared_with_a_constant_is_a_residue_and_a_sign(period, s, op):
    """torch.fmod(x, P) == s (C's remainder: the sign of x) for s != 0 is x % P == s and
    x >= 0 (s > 0), x % P == P + s and x < 0 (s < 0), never for |s| >= P: simplified, no
    where() is left (row_interval.py reads the residue as a key set), and it computes
    what torch does on offsets of either sign."""
    def mask_mod(b, h, q, k):
        r = torch.fmod(k - q - 5, period)  # (k - q - 5 spans -41..39)
        return r == s if op == "eq" else r != s

    node = simplify(trace_mask_mod(mask_mod, {}).node)
    assert "where" not in {n.op for n in node.walk()}
    if abs(s) >= period:
        assert node == expr.const(op == "ne")
    b, h, q, k = _grid()
    got = torch.as_tensor(_eval_traced(node, {}, None)).expand(B, H, SQ, SK)
    want = mask_mod(b, h, q, k).expand(B, H, SQ, SK)
    assert torch.equal(got, want)
    assert want.any() and not want.all() or abs(s) >= period


def test_a_bool_compared_with_true_or_false_is_itself():
    q, k = expr.var("q"), expr.var("k")
    lt = expr.apply("lt", q, k)
    for op, value in (("eq", True), ("ne", False)):
        assert simplify(expr.apply(op, lt, expr.const(value))) == lt
        assert simplify(expr.apply(op, expr.const(value), lt)) == lt
    assert simplify(expr.apply("eq", lt, expr.const(False))) != lt
