"""Header generation details: literals, manifest, aux packing and its errors."""

from __future__ import annotations

import math

import pytest
import torch
from hook_variants import VARIANTS, make_spec

from cubridge.attention import Shape
from cubridge.lower.cuda_render import RenderError, c_literal, int_interval_bound
from cubridge.lower.hook_header import generate_header
from cubridge.transfer.expr import DType
from cubridge.transfer.hooks import DEFAULT_TABLE_BLOCK, plan_hooks

SHAPE = Shape(b=2, hq=4, hk=2, sq=300, sk=260, d=64)


def test_literals():
    assert c_literal(-3, DType.INT) == "(-3)"
    assert c_literal(30.0, DType.FLOAT) == "30.0f"
    assert c_literal(1e-5, DType.FLOAT) == "1e-05f"
    assert c_literal(-math.inf, DType.FLOAT) == "(-INFINITY)"
    assert c_literal(True, DType.BOOL) == "true"
    with pytest.raises(RenderError, match="32-bit"):
        c_literal(2**40, DType.INT)


def test_flags_and_normaliser():
    text = generate_header(plan_hooks(VARIANTS["sigmoid_causal"])).text
    assert "constexpr bool kHasScoreMod = true;" in text
    assert "constexpr bool kHasMaskMod = true;" in text
    assert "kNormalizer = Normalizer::Elementwise;" in text
    assert "return detail::fast_sigmoid(s);" in text
    text = generate_header(plan_hooks(VARIANTS["full"])).text
    assert "kHasScoreMod = false" in text and "kHasMaskMod = false" in text
    assert "Normalizer::Softmax" in text and "return KvRange{0, num_kv_blocks};" in text


def test_position_offsets_divide_as_unsigned():
    """floor division and modulo of a position plus a constant by a positive constant
    render as unsigned / and % of the position plus the offset's residue (two
    instructions, not C's signed forms and their sign fix-ups: the temporal-head mask
    of attention-gym spilled 176 B with those); a dividend that may be negative for
    other reasons keeps the floor forms. The values are checked on the host against
    torch by test_hooks_compiled (the kitchen sink's mask has these terms)."""

    def mask(b, h, q, k):
        return (((k - 16) % 28 == (q + 12) % 28) | ((q + 7) // 60 >= (k - 200) // 60)
                | ((q - k) % 5 == 0))

    text = generate_header(plan_hooks(make_spec("offsets", mask))).text
    body = text[text.index("bool mask_mod("):text.index("bool mask_mod_paired(")]
    assert "static_cast<int>((static_cast<unsigned>(k) + 12u) % 28u)" in body
    assert "(static_cast<int>((static_cast<unsigned>(k) + 40u) / 60u) + (-4))" in body
    assert "((q + 12) % 28)" in body and "((q + 7) / 60)" in body  # (non-negative already)
    assert "detail::mod((q - k), 5)" in body


def test_powers_of_two_divide_as_shifts_and_masks():
    """floor division and modulo by 2^j are an arithmetic shift and an AND whatever the
    dividend's sign (one instruction, not the signed forms' fix-ups: a strided or
    dilated mask's (q - k) % 2^j, a block-wise mask's q // 512). The values are checked
    on the host against torch by test_hooks_compiled (strided_heads, dilated_window)."""

    def mask(b, h, q, k):
        return (((q - k) % 128 == 0) | ((k - 200) // 64 >= q // 512) | ((q - k) // 1 == 3)
                | ((q - k) % 1 == 1))

    text = generate_header(plan_hooks(make_spec("powers", mask))).text
    body = text[text.index("bool mask_mod("):].split("\n}\n")[0]
    for form in ("(t0 & 127)", "((k - 200) >> 6)", "(q >> 9)", "(t0 & 0)"):
        assert form in body, form
    assert "detail::mod" not in body and "detail::floordiv" not in body and "/" not in body


def test_only_searched_key_ranges_say_so():
    """CUBRIDGE_HOOKS_KV_RANGE_BY_SEARCH lets a kernel run the range search its own
    way (fa_sm90: 32 split points per round), so only headers whose kv_block_range
    is that search over block_kind may define it: not a table's closed form, not a
    maskless header's whole range."""
    macro = "#define CUBRIDGE_HOOKS_KV_RANGE_BY_SEARCH 1"
    for name, searched in [("sliding_window_1024", True), ("causal", True), ("prefix_lm", True),
                           ("document_causal", False), ("full", False)]:
        plan = plan_hooks(VARIANTS[name])
        text = generate_header(plan).text
        assert (macro in text) is searched, name
        assert ("binary searches" in text) is searched, name
        assert (plan.classification == "interval") is searched, name


def test_manifest_and_packing_of_a_table_variant():
    spec = VARIANTS["document_causal"]
    header = generate_header(plan_hooks(spec))
    manifest = header.manifest()
    assert [(a["slot"], a["name"], a["dtype"], a["rank"]) for a in manifest["aux"]] == [
        (0, "doc_id", "int32", 2), (1, "__cubridge_block_kinds", "uint8", 4),
        (2, "__cubridge_kv_ranges", "int32", 4)]
    aux = spec.make_aux(SHAPE, torch.Generator().manual_seed(0), torch.device("cpu"))
    packed = header.pack_aux(aux, SHAPE)
    assert packed[0] is aux["doc_id"]
    bm, bn = DEFAULT_TABLE_BLOCK  # one table row per warp of fa_sm80 (32 x 64)
    nq, nk = math.ceil(SHAPE.sq / bm), math.ceil(SHAPE.sk / bn)
    assert packed[1].shape == (SHAPE.b, 1, nq, nk) and packed[2].shape == (SHAPE.b, 1, nq, 2)


def test_packing_errors_name_the_aux():
    header = generate_header(plan_hooks(VARIANTS["alibi_causal"]))
    with pytest.raises(KeyError, match="slope"):
        header.pack_aux({}, SHAPE)
    with pytest.raises(ValueError, match="slope.*float32 rank 1, got torch.float64 rank 1"):
        header.pack_aux({"slope": torch.zeros(4, dtype=torch.float64)}, SHAPE)


def test_too_many_aux_tensors_is_an_error():
    def score(s, b, h, q, k, *, a0, a1, a2, a3, a4, a5, a6, a7, a8):
        return s + a0[h] + a1[h] + a2[h] + a3[h] + a4[h] + a5[h] + a6[h] + a7[h] + a8[h]

    aux = {f"a{i}": torch.zeros(4) for i in range(9)}
    with pytest.raises(ValueError, match="9 aux tensors, the kernel takes at most 8"):
        generate_header(plan_hooks(make_spec("many", None, score), aux))


def test_trig_helpers_are_pasted_only_where_the_hooks_call_them():
    """sin / cos in score_mod take the SFU forms of hook_trig.cuh, pasted into that
    header alone (every other header stays as it was); mask_mod keeps libm's exact
    sinf / cosf; a cos of the distance alone is a table read and pastes nothing."""
    helpers = "float fast_sin(float x)"
    text = generate_header(plan_hooks(VARIANTS["trig_terms"])).text
    assert text.count(helpers) == 2  # (the device's sin.approx, the host's sinf)
    assert "sin.approx.ftz.f32" in text and "cos.approx.ftz.f32" in text
    assert text.index(helpers) < text.index("score_mod(float s")
    for name in ("causal", "kitchen_sink", "softcap_causal", "log_buckets"):
        assert "fast_sin" not in generate_header(plan_hooks(VARIANTS[name])).text
    band = make_spec("cos_band", None, lambda s, b, h, q, k: s + torch.cos((q - k) / 20.0))
    assert "fast_cos" not in generate_header(plan_hooks(band)).text
    masked = make_spec("sin_mask", lambda b, h, q, k: torch.sin((q - k) * 0.1) > -0.5)
    text = generate_header(plan_hooks(masked)).text
    assert "sinf(" in text.split("mask_mod(int b")[1] and helpers not in text


def test_generation_is_deterministic():
    spec = VARIANTS["comb_prefix_softcap_sigmoid"]
    assert generate_header(plan_hooks(spec)).text == generate_header(plan_hooks(spec)).text


def test_integer_intervals_where_they_are_exact():
    """Masks of integers, bools and 0-d integer aux scalars classify with
    detail::ivi_*; floats, other aux reads and bounds past 2^30 keep the double
    rules (the twin test in test_hooks_compiled checks both forms against the
    Python intervals)."""
    for name in ("causal", "sliding_window_1024", "global_sliding_window", "dilated_window",
                 "causal_blockwise", "kitchen_sink"):
        text = generate_header(plan_hooks(VARIANTS[name])).text
        body = text[text.index("BlockKind block_kind("):text.index("KvRange kv_block_range(")]
        assert "detail::ivi_kind(" in body and "detail::iv_kind(" not in body, name
        assert "if (!detail::ivi_in_range(q_last, k_last)) return BlockKind::Partial;" in body
    # a 0-d aux scalar: read once, integer rules while it is in range, else doubles
    text = generate_header(plan_hooks(VARIANTS["prefix_lm"])).text
    body = text[text.index("BlockKind block_kind("):text.index("KvRange kv_block_range(")]
    assert body.count("aux_load<int64_t>(aux, 0, 0)") == 2  # the int form's and the fallback's
    assert ("if (detail::ivi_in_range(q_last, k_last) && "
            "detail::ivi_scalar_in_range(ivi_aux_prefix_len)) {") in body
    assert "detail::ivi_point(static_cast<int>(ivi_aux_prefix_len))" in body
    assert body.index("detail::ivi_kind(") < body.index("detail::iv_kind(")

    def bound(mask, aux=None):
        return int_interval_bound(plan_hooks(make_spec("m", mask), aux).mask.node)

    assert bound(lambda b, h, q, k: q >= k) == 1
    assert bound(lambda b, h, q, k: (q - k) // 7 > 2) == 1
    assert bound(lambda b, h, q, k: q * 64 - k >= 0) is None  # 2^30: past the int bound
    assert bound(lambda b, h, q, k: q // (k + 1) > 2) is None  # divisor not a constant
    assert bound(lambda b, h, q, k: (q - k) * 0.5 < 3.0) is None  # floats
    doc = torch.zeros(1, 8, dtype=torch.int32)
    assert bound(lambda b, h, q, k, *, doc: doc[b, q] == doc[b, k], {"doc": doc}) is None
    n = torch.tensor(5)
    assert bound(lambda b, h, q, k, *, n: (k < n) | (q >= k), {"n": n}) == 1
    assert bound(lambda b, h, q, k, *, n: q - k < n * 64, {"n": n}) is None  # 2^30
    x = torch.tensor(0.5)
    assert bound(lambda b, h, q, k, *, x: q - k < x, {"x": x}) is None  # a float scalar


def test_score_mod_aux_reads_assume_and_get_a_contiguous_last_dim():
    spec = VARIANTS["relative_position"]
    header = generate_header(plan_hooks(spec))
    assert "cubridge::aux_load_c<float, 2>(aux, 0, h," in header.text
    aux = spec.make_aux(SHAPE, torch.Generator().manual_seed(0), torch.device("cpu"))
    strided = aux["rel_bias"].t().contiguous().t()  # same values, last-dim stride != 1
    assert strided.stride(-1) != 1
    (packed,) = header.pack_aux({**aux, "rel_bias": strided}, SHAPE)
    assert packed.stride(-1) == 1 and torch.equal(packed, strided)
    (same,) = header.pack_aux(aux, SHAPE)
    assert same is aux["rel_bias"]  # already contiguous: no copy


def test_mask_mod_aux_reads_keep_runtime_strides():
    text = generate_header(plan_hooks(VARIANTS["document_causal"])).text
    mask = text[text.index("bool mask_mod("):text.index("float activation(")]
    assert "aux_load<" in mask and "aux_load_c<" not in mask
