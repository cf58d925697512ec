"""Which of mask_mod's aux reads the kernel stages (key-only, query-only) and
how the generated header spells them. That the staged form computes the same
mask as mask_mod is checked for every variant by the host harness
(hook_harness.inc), and on the GPU by the kernel tests."""

from __future__ import annotations

import torch
from hook_variants import VARIANTS, make_spec

from cubridge.lower.hook_header import generate_header
from cubridge.lower.staged_reads import MAX_STAGED, staged_reads
from cubridge.transfer.hooks import plan_hooks


def _reads(mask, aux):
    reads = staged_reads(plan_hooks(make_spec("m", mask), aux).mask.node)
    return [n.arg for n in reads.key], [n.arg for n in reads.row]


def test_document_ids_are_staged_per_key_and_per_query():
    text = generate_header(plan_hooks(VARIANTS["document_causal"])).text
    assert "#define CUBRIDGE_HOOKS_STAGED_READS 1" in text
    assert "constexpr int kKeyStaged = 1;" in text and "constexpr int kRowStaged = 1;" in text
    staged = text[text.index("bool mask_mod_staged("):text.index("float activation(")]
    assert "staged_value<int>(row_vals[0])" in staged and "staged_value<int>(key_vals[0])" in staged
    assert "aux_load" not in staged  # both reads come from shared memory


def test_only_reads_of_one_side_are_staged():
    doc = torch.zeros(2, 8, dtype=torch.int64)
    pair = torch.zeros(8, 8, dtype=torch.bool)
    slope = torch.zeros(4)
    # per (q, k) element, or per head only: nothing to stage
    assert _reads(lambda b, h, q, k, *, pair: pair[q, k], {"pair": pair}) == ([], [])
    assert _reads(lambda b, h, q, k, *, slope: (slope[h] > 0) & (q >= k), {"slope": slope}) \
        == ([], [])
    # an index mixing q and k is neither side
    assert _reads(lambda b, h, q, k, *, doc: doc[b, q - k] > 0, {"doc": doc}) == ([], [])
    # b and h may appear on either side
    assert _reads(lambda b, h, q, k, *, doc: doc[b, k] == doc[h, q], {"doc": doc}) \
        == (["doc"], ["doc"])


def test_staged_reads_are_capped_and_the_rest_stay_loads():
    aux = {f"d{i}": torch.zeros(8, dtype=torch.int32) for i in range(MAX_STAGED + 1)}

    def mask(b, h, q, k, **a):
        out = q >= k
        for t in a.values():
            out = out & (t[k] > 0)
        return out

    spec = make_spec("capped", mask)
    keys, rows = _reads(mask, aux)
    assert len(keys) == MAX_STAGED and rows == []
    text = generate_header(plan_hooks(spec, aux)).text
    staged = text[text.index("bool mask_mod_staged("):text.index("float activation(")]
    assert staged.count("key_vals[") == MAX_STAGED and staged.count("aux_load<") == 1


def test_index_only_masks_stage_nothing():
    text = generate_header(plan_hooks(VARIANTS["alibi_causal"])).text
    assert "constexpr int kKeyStaged = 0;" in text and "constexpr int kRowStaged = 0;" in text


def test_index_only_masks_are_declared_so():
    """CUBRIDGE_HOOKS_MASK_INDEX_ONLY (fa_sm90 then evaluates the mask before the
    S product) exactly when mask_mod reads no aux tensor."""
    flag = "#define CUBRIDGE_HOOKS_MASK_INDEX_ONLY 1"
    for name in ("causal", "sliding_window_1024", "global_sliding_window", "causal_blockwise"):
        assert flag in generate_header(plan_hooks(VARIANTS[name])).text, name
    # (prefix_lm and comb read their prefix length from a 0-d aux tensor)
    for name in ("document_causal", "share_question", "prefix_lm", "comb_prefix_softcap_sigmoid"):
        assert flag not in generate_header(plan_hooks(VARIANTS[name])).text, name
    slope = torch.zeros(4)
    reads_aux = plan_hooks(make_spec("m", lambda b, h, q, k, *, slope: (slope[h] > 0) & (q >= k)),
                           {"slope": slope})
    assert flag not in generate_header(reads_aux).text


def test_masks_with_key_terms_are_declared_so():
    """CUBRIDGE_HOOKS_MASK_KEY_TERMS (fa_sm80 then evaluates the mask's bits keys
    outer) exactly when mask_mod computes index terms from the key alone: a
    canvas position's coordinates, a clamp; not for comparisons, sums or reads."""
    flag = "#define CUBRIDGE_HOOKS_MASK_KEY_TERMS 1"

    def declared(mask, aux=None):
        return flag in generate_header(plan_hooks(make_spec("m", mask), aux or {})).text

    assert declared(lambda b, h, q, k: (q // 8 - k // 8).abs() <= 1)  # a 2-D tile's row
    assert declared(lambda b, h, q, k: (q % 8 - k % 8).abs() <= 2)  # and its column
    assert declared(lambda b, h, q, k: q >= k.clamp(min=4))
    assert declared(lambda b, h, q, k: (q // 64) >= (k // 64))  # causal_blockwise's form
    assert not declared(lambda b, h, q, k: q >= k)
    assert not declared(lambda b, h, q, k: (q - k < 128) & (q >= k))
    assert not declared(lambda b, h, q, k: (k < 16) | (q >= k))  # a prefix: one compare
    assert not declared(lambda b, h, q, k: (q // 8) == 3)  # the query's alone
    doc = torch.zeros(2, 8, dtype=torch.int64)
    assert not declared(lambda b, h, q, k, *, doc: doc[b, q] == doc[b, k], {"doc": doc})
