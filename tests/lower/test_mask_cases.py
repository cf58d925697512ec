"""Mask cases (cubridge/lower/mask_cases.py): which conditions of a mask are choices on
the batch and head alone, and that each case's mask is the mask with them fixed. The
header's C++ form is checked against mask_mod for every pair by the host harness
(hook_harness.inc, test_hooks_compiled.py: the strided_heads variant), and fa_sm90's
build of it in tests/kernels/test_fa_sm90_compile.py."""

from __future__ import annotations

import pytest
import torch

from cubridge.lower.mask_cases import MAX_CASE_ATOMS, case_atoms, case_masks, render_mask_cases
from cubridge.transfer.expr import Node
from cubridge.transfer.torch_render import grid_function
from cubridge.transfer.trace import trace_mask_mod

TABLE = torch.tensor([True, False, True, True])


def _node(mask_mod, aux=None) -> Node:
    return trace_mask_mod(mask_mod, aux or {}).node


WITH_CASES = {
    "strided_or_local": (lambda b, h, q, k: (q >= k) & torch.where(
        h % 2 == 1, (q - k) % 64 == 0, q - k < 96), 1),
    "two_choices": (lambda b, h, q, k: (q >= k) & torch.where(
        h % 2 == 1, (q - k) % 64 == 0, q - k < 96) | (h < 2) & (k < 8), 2),
    "written_as_a_union": (lambda b, h, q, k: ((h % 2 == 1) & ((q - k) % 8 == 0)) |
                           ((h % 2 == 0) & (q >= k)), 2),
    "by_batch": (lambda b, h, q, k: torch.where(b == 0, q >= k, k <= q + 3), 1),
}


@pytest.mark.parametrize("name", sorted(WITH_CASES))
def test_each_case_is_the_mask_with_its_choices_fixed(name):
    mask_mod, atoms_expected = WITH_CASES[name]
    node = _node(mask_mod)
    atoms = case_atoms(node)
    assert len(atoms) == atoms_expected
    masks = case_masks(node, atoms)
    assert len(masks) == 1 << len(atoms)
    for m in masks:  # no case keeps a choice on (b, h)
        assert not case_atoms(m)
    q = torch.arange(200)[:, None]
    k = torch.arange(200)[None, :]
    for b in range(2):
        for h in range(4):
            bh = (torch.tensor(b), torch.tensor(h))
            case = sum(int(bool(grid_function(a)(*bh, q, k))) << i for i, a in enumerate(atoms))
            want = torch.as_tensor(grid_function(node)(*bh, q, k)).expand(200, 200)
            got = torch.as_tensor(grid_function(masks[case])(*bh, q, k)).expand(200, 200)
            assert torch.equal(got, want), (b, h, case)


WITHOUT = {
    "causal": lambda b, h, q, k: q >= k,
    # a value per head (not a choice between masks): the compiler hoists it
    "window_per_head_value": lambda b, h, q, k: q - k < torch.where(h % 2 == 1, 512, 128),
    # the mask on the head alone: block_kind decides it, there is no per-score choice
    "heads_only": lambda b, h, q, k: h < 3,
    "three_choices": lambda b, h, q, k: torch.where(h == 0, q >= k, k < 8) |
    torch.where(h == 1, q - k < 9, k > 90) | (b == 1) & (q == k),
}


@pytest.mark.parametrize("name", sorted(WITHOUT))
def test_masks_without_a_few_choices_on_the_head_have_no_cases(name):
    node = _node(WITHOUT[name])
    assert case_atoms(node) == ()
    header = "\n".join(render_mask_cases(node, {}, {}))
    assert "constexpr int kMaskCases = 1;" in header
    assert "if constexpr" not in header
    assert MAX_CASE_ATOMS == 2  # (three_choices is one past it)


def test_a_per_head_table_read_is_a_choice_and_the_header_reads_it_once_a_block():
    node = _node(lambda b, h, q, k, *, keep: torch.where(keep[h], q >= k, (q - k) % 4 == 0),
                 {"keep": TABLE})
    (atom,) = case_atoms(node)
    assert atom.op == "aux_load"
    text = "\n".join(render_mask_cases(node, {"keep": 0}, {"keep": torch.bool}))
    case_fn = text.split("CUBRIDGE_HD int mask_case")[1].split("template")[0]
    assert "aux_load<bool>(aux, 0, h)" in case_fn
    assert "constexpr int kMaskCases = 2;" in text
    plain = text.split("CUBRIDGE_HD bool mask_mod_case")[1].split("} else {")[0]
    assert "aux_load" not in plain and plain.count("return") == 2


def test_each_case_with_key_sets_says_so_and_whole_row_intervals_give_none():
    strided = _node(WITH_CASES["strided_or_local"][0])
    text = "\n".join(render_mask_cases(strided, {}, {}))
    sets = text.split("CUBRIDGE_HD cubridge::KeySet case_key_set")[1]
    assert "return c == 0 ? 1 : c == 1 ? 1 : 0;" in text
    assert "constexpr int kKeySetCases = 2;" in text
    # case 1 (odd heads) keeps one key in 64; case 0 (even heads) a window of every key
    odd = sets.split("if constexpr (C == 1)")[1]
    assert ", 64, " in odd.split("}")[0]
    assert ", 1, 0, 1}" in sets.split("if constexpr (C == 1)")[0]
    # causal has row intervals: no key sets beside them
    causal = "\n".join(render_mask_cases(_node(WITHOUT["causal"]), {}, {}))
    assert "constexpr int kKeySetCases = 0;" in causal
    # no cases, but the whole mask keeps one residue: case 0's sets
    dilated = "\n".join(render_mask_cases(_node(lambda b, h, q, k: (q >= k) & (
        (q - k) % 2 == 0)), {}, {}))
    assert "constexpr int kMaskCases = 1;" in dilated
    assert "constexpr int kKeySetCases = 1;" in dilated and ", 2, " in dilated
    # a mask reading aux per key has none
    table = torch.tensor([True, False] * 100)
    read = "\n".join(render_mask_cases(_node(lambda b, h, q, k, *, t: (q >= k) & t[k] & (
        (q - k) % 4 == 0), {"t": table}), {"t": 0}, {"t": torch.bool}))
    assert "constexpr int kKeySetCases = 0;" in read


def test_a_header_says_when_a_period_is_not_a_power_of_two():
    """CUBRIDGE_HOOKS_ODD_PERIODS only where some key set's period is not a power of two
    (without it a kernel leaves the test of the period out: the builds of every other
    header stay as they were); a row a guard leaves empty keeps that period, a constant."""
    odd = "\n".join(render_mask_cases(_node(lambda b, h, q, k: (q >= k) & (
        (q - k) % 7 == q % 7)), {}, {}))
    assert "#define CUBRIDGE_HOOKS_ODD_PERIODS 1" in odd
    assert "KeySet{0, -1, 7, 0, 1}" in odd and "KeySet{0, -1, 1, 0, 1}" not in odd.split(
        "case_key_set(")[1].split("} else {")[0]
    for powers in (lambda b, h, q, k: (q >= k) & ((q - k) % 8 == q % 8),
                   WITH_CASES["strided_or_local"][0]):
        text = "\n".join(render_mask_cases(_node(powers), {}, {}))
        assert "kKeySetCases = 0" not in text and "ODD_PERIODS" not in text


def test_the_header_names_the_form_a_kernel_sets_the_mask_bits_by():
    from hook_variants import VARIANTS  # (tests/lower/conftest.py puts it on the path)

    from cubridge.kernels import get_kernel
    from cubridge.lower.hook_header import generate_header
    from cubridge.transfer.hooks import plan_hooks

    sm90 = get_kernel("fa_sm90").source.read_text()
    sm80 = get_kernel("fa_sm80").source.read_text()
    forms = {name: generate_header(plan_hooks(VARIANTS[name])) for name in (
        "full", "causal", "strided_heads", "document_causal", "kitchen_sink", "tree_mask")}
    assert {n: h.mask_form(sm90) for n, h in forms.items()} == {
        "full": "no mask_mod", "causal": "row intervals (1 a row)",
        "strided_heads": "key sets (in 4 of 4 mask cases)", "document_causal": "key runs",
        "kitchen_sink": "key sets (in 1 of 2 mask cases), mask_mod per pair in the others",
        "tree_mask": "mask table"}
    assert forms["strided_heads"].mask_form(sm80) == "mask_mod per pair"
    assert forms["causal"].mask_form(sm80) == "mask_mod per pair"
