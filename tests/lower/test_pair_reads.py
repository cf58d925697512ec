"""Which of score_mod's aux reads a kernel may stage as pair rows (a 16-bit tensor
read at [..., k] with its other indices of b, h, q), how the header spells them,
and the launcher's row alignment. That score_mod_paired gives score_mod's value
bit for bit is checked for every test variant by the host harness
(hook_harness.inc); that fa_sm90 computes the spec with them, on the GPU
(tests/lower/test_hooks_gpu.py)."""

from __future__ import annotations

from pathlib import Path

import torch
from hook_variants import VARIANTS, make_spec

from cubridge.attention import Shape
from cubridge.lower.hook_header import generate_header
from cubridge.lower.pair_reads import MASK_PAIR_DTYPES, aligned_pair_rows, pair_read
from cubridge.spec import load
from cubridge.transfer.hooks import plan_hooks

BF16 = torch.bfloat16
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "specs"
PAIR_BIAS = EXAMPLES / "pair_bias.py"


def load_pair_bias():
    return load(PAIR_BIAS)


def _picked(score, aux):
    plan = plan_hooks(make_spec("s", None, score), aux)
    node = pair_read(plan.score.node, {a.name: a.dtype for a in plan.aux})
    return None if node is None else node.arg


def _mask_picked(mask, aux):
    plan = plan_hooks(make_spec("m", mask), aux)
    node = pair_read(plan.mask.node, {a.name: a.dtype for a in plan.aux}, MASK_PAIR_DTYPES)
    return None if node is None else node.arg


def test_a_dense_half_precision_bias_is_a_pair_read():
    bias = torch.zeros(2, 4, 8, 8, dtype=BF16)
    assert _picked(lambda s, b, h, q, k, *, bias: s + bias[b, h, q, k], {"bias": bias}) == "bias"
    # the row indices may be any expression of b, h and q
    assert _picked(lambda s, b, h, q, k, *, bias: s + bias[0, h // 2, q - 1, k],
                   {"bias": bias}) == "bias"
    fp16 = torch.zeros(8, 8, dtype=torch.float16)
    assert _picked(lambda s, b, h, q, k, *, t: s * t[q, k], {"t": fp16}) == "t"


def test_reads_that_are_not_rows_of_keys_stay_loads():
    b16 = torch.zeros(8, 8, dtype=BF16)
    f32 = torch.zeros(8, 8)
    # 32-bit elements: a block's rows would not fit beside the tiles
    assert _picked(lambda s, b, h, q, k, *, t: s + t[q, k], {"t": f32}) is None
    # the key is not the last index, or not alone there
    assert _picked(lambda s, b, h, q, k, *, t: s + t[k, q], {"t": b16}) is None
    assert _picked(lambda s, b, h, q, k, *, t: s + t[q, k // 2], {"t": b16}) is None
    # the key in a row index, or no query at all (a key-only read)
    assert _picked(lambda s, b, h, q, k, *, t: s + t[q - k, k], {"t": b16}) is None
    assert _picked(lambda s, b, h, q, k, *, t: s + t[h, k], {"t": b16}) is None


def test_the_header_gives_the_rows_and_the_paired_score_mod():
    text = generate_header(plan_hooks(load_pair_bias())).text
    assert "#define CUBRIDGE_HOOKS_PAIR_READS 1" in text and "constexpr int kPairReads = 1;" in text
    row = text[text.index("const uint16_t* pair_row("):text.index("float score_mod_paired(")]
    assert "aux.t[0].stride[2]" in row and "aux.t[0].stride[3]" not in row  # k = 0
    paired = text[text.index("float score_mod_paired("):text.index("bool mask_mod(")]
    assert "widen16<cubridge::Bf16>(pair)" in paired
    assert "aux_load_c<cubridge::Bf16" not in paired  # the bias comes from `pair` alone
    assert "aux_load_c<cubridge::Fp16, 1>(aux, 1, h)" in paired  # the head scale is still read
    # a header without a pair read says so, and keeps the hooks' names
    plain = generate_header(plan_hooks(VARIANTS["alibi_causal"])).text
    assert "constexpr int kPairReads = 0;" in plain and "score_mod_paired(" in plain


def test_aligned_rows_are_passed_as_given():
    t = torch.randn(2, 3, 5, 64).to(BF16)
    assert aligned_pair_rows(t) is t
    expanded = torch.randn(3, 5, 64).to(BF16).expand(2, 3, 5, 64)  # (a stride of 0)
    assert aligned_pair_rows(expanded) is expanded


def test_unaligned_rows_are_copied_into_padded_rows():
    for t in (torch.randn(2, 3, 5, 300).to(BF16),               # 600-byte rows
              torch.randn(2, 3, 5, 72).to(BF16)[..., 3:67],      # an offset view
              torch.randn(2, 3, 5, 72).to(BF16)[..., :61],       # rows ending mid-chunk
              torch.randn(2, 3, 64, 5).to(BF16).transpose(-1, -2)):  # keys strided
        out = aligned_pair_rows(t)
        assert torch.equal(out, t) and out.shape == t.shape and out.stride(-1) == 1
        assert out.data_ptr() % 16 == 0
        assert all(st % 8 == 0 for st in out.stride()[:-1])


def test_pack_aux_aligns_the_pair_read_only():
    spec = load_pair_bias()
    header = generate_header(plan_hooks(spec))
    assert header.pair_slots == (0,)
    shape = Shape(1, 2, 2, 10, 13, 64)
    aux = spec.make_aux(shape, torch.Generator().manual_seed(0), "cpu")
    bias, scale = header.pack_aux(aux, shape, "cpu")
    assert torch.equal(bias, aux["bias"]) and bias.stride()[-2] == 16  # 13 keys -> 16
    assert scale is aux["head_scale"]


def test_a_dense_boolean_mask_is_a_mask_pair_read():
    adj = torch.zeros(2, 1, 8, 8, dtype=torch.bool)
    assert _mask_picked(lambda b, h, q, k, *, adj: adj[b, 0, q, k], {"adj": adj}) == "adj"
    u8 = torch.zeros(8, 8, dtype=torch.uint8)
    assert _mask_picked(lambda b, h, q, k, *, t: (q >= k) & (t[q, k] > 1), {"t": u8}) == "t"
    # 16-bit or wider masks' reads, and reads at the key alone, stay as they are
    i32 = torch.zeros(8, 8, dtype=torch.int32)
    assert _mask_picked(lambda b, h, q, k, *, t: t[q, k] > 0, {"t": i32}) is None
    assert _mask_picked(lambda b, h, q, k, *, t: t[0, k] > 0, {"t": u8}) is None
    text = generate_header(plan_hooks(load(EXAMPLES / "graph_mask.py"))).text
    assert "#define CUBRIDGE_HOOKS_MASK_PAIR_READS 1" in text
    assert "constexpr int kMaskPairReads = 1;" in text
    paired = text[text.index("bool mask_mod_paired("):]
    paired = paired[:paired.index("\n}")]
    assert "static_cast<bool>(pair)" in paired and "aux_load" not in paired
    # a header without one keeps the names (and the score's pair read is separate)
    bias = generate_header(plan_hooks(load_pair_bias())).text
    assert "constexpr int kMaskPairReads = 0;" in bias and "constexpr int kPairReads = 1;" in bias


def test_byte_rows_align_to_sixteen_elements():
    ok = torch.zeros(2, 1, 4, 1024, dtype=torch.bool)
    assert aligned_pair_rows(ok) is ok
    odd = torch.rand(2, 1, 4, 1000) < 0.5  # 1000 keys: rows of 62.5 chunks
    out = aligned_pair_rows(odd)
    assert torch.equal(out, odd) and out.stride()[-2] == 1008 and out.data_ptr() % 16 == 0
