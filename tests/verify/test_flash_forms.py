"""Mods rewritten as a Flex FLASH user must write them (cubridge.verify.flash_forms):
the same values, none of the ops its CuTe-DSL code generator lacks, no tensor made
inside a mod."""

import re
from pathlib import Path

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.nn.attention.flex_attention import create_mask, flex_attention

from cubridge.attention import HeadConfig, Shape
from cubridge.bench.check import check_output, tolerance_for
from cubridge.bench.oracle import float64_reference
from cubridge.bench.runner import BenchConfig, build_case
from cubridge.spec import load, make_aux
from cubridge.spec.grids import elementwise_mask, elementwise_score
from cubridge.spec.mods import BoundMods
from cubridge.spec.shapes import fit_shapes
from cubridge.verify import peers
from cubridge.verify.flash_forms import WHAT, flash_form, with_number_constants
from cubridge.verify.peer_forms import constant_mods
from cubridge.verify.peers import fit_flash_mods

CPU = torch.device("cpu")
ROOT = Path(__file__).resolve().parents[2]
LACKED = ("clamp", "maximum", "minimum", "aten.any")


def _ops(fn, *args):
    return make_fx(fn)(*args).code


def natten_like(b, h, q_idx, kv_idx):
    center = (q_idx // 8).clamp(2, 5)
    near = torch.maximum(center - 2, kv_idx // 8 - 0) <= torch.minimum(center + 2, kv_idx // 8)
    return near & ((kv_idx % 8) >= (q_idx % 8).clamp_min(3) - 3)


def test_clamp_maximum_and_minimum_become_where_and_the_mask_is_unchanged():
    form = flash_form(natten_like, False, CPU)
    code = _ops(form, *(torch.zeros((), dtype=torch.int32) for _ in range(4)))
    assert not [op for op in LACKED if op in code] and "where" in code
    assert torch.equal(create_mask(form, 1, 1, 64, 64, device="cpu"),
                       create_mask(natten_like, 1, 1, 64, 64, device="cpu"))


def test_a_row_reduction_becomes_ors_and_int64_indices_int32():
    topk = torch.randint(0, 4, (2, 3, 4, 2), generator=torch.Generator().manual_seed(0))
    assert topk.dtype == torch.int64

    def vsa_like(b, h, q_idx, kv_idx):
        return (topk[b, h, q_idx // 16] == (kv_idx // 16).unsqueeze(-1)).any(dim=-1)

    form = flash_form(vsa_like, False, CPU)
    code = _ops(form, *(torch.zeros((), dtype=torch.int32) for _ in range(4)))
    assert "bitwise_or" in code
    assert not [op for op in ("aten.any", "select", "squeeze", "lift_fresh") if op in code]
    held = [t for _, t in form.__closure__[0].cell_contents.named_buffers()]
    assert held and all(t.dtype == torch.int32 for t in held)
    assert torch.equal(create_mask(form, 2, 3, 64, 64, device="cpu"),
                       create_mask(vsa_like, 2, 3, 64, 64, device="cpu"))


def test_constant_subscripts_become_slices_of_the_captured_tensor():
    intervals = torch.tensor([[0, 40], [20, 64]])
    image = torch.repeat_interleave(torch.arange(2), 16)

    def flamingo_like(b, h, q_idx, kv_idx):
        interval = intervals[image[kv_idx]]
        return (q_idx >= interval[0]) & (q_idx < interval[1])

    form = flash_form(flamingo_like, False, CPU)
    code = _ops(form, *(torch.zeros((), dtype=torch.int32) for _ in range(4)))
    assert "lift_fresh" not in code and code.count("aten.index") == 3
    assert torch.equal(create_mask(form, 1, 1, 64, 32, device="cpu"),
                       create_mask(flamingo_like, 1, 1, 64, 32, device="cpu"))


def test_shifts_become_products_and_floor_divisions():
    def bits(b, h, q_idx, kv_idx):
        return ((q_idx - 20) >> 2) == ((kv_idx << 1) >> 3)

    form = flash_form(bits, False, CPU)
    assert "shift" not in _ops(form, *(torch.zeros((), dtype=torch.int32) for _ in range(4)))
    assert torch.equal(create_mask(form, 1, 1, 64, 64, device="cpu"),
                       create_mask(bits, 1, 1, 64, 64, device="cpu"))


def test_a_score_mod_with_a_clamp_keeps_its_scores():
    lengths = torch.randint(0, 3, (1, 32, 32), generator=torch.Generator().manual_seed(1))
    table = torch.randn(2, 3)

    types = torch.randint(0, 3, (1, 32, 32, 2), generator=torch.Generator().manual_seed(2))

    def edge_like(score, b, h, q_idx, kv_idx):
        n = lengths[b, q_idx, kv_idx]
        total = 0.0
        for i in range(2):
            total = total + torch.where(n > i, table[h, types[b, q_idx, kv_idx, i]], 0.0)
        return score + total / torch.clamp(n, min=1)

    form = flash_form(edge_like, True, CPU)
    code = _ops(form, *(torch.zeros(()) if i == 0 else torch.zeros((), dtype=torch.int32)
                        for i in range(5)))
    assert not [op for op in ("clamp", "lift_fresh", "torch.int64") if op in code]
    q, k, v = (torch.randn(1, 2, 32, 16, generator=torch.Generator().manual_seed(i))
               for i in range(3))
    torch.testing.assert_close(flex_attention(q, k, v, score_mod=form),
                               flex_attention(q, k, v, score_mod=edge_like))


def test_the_peer_retries_with_the_form_and_says_so_or_says_why_not():
    mods = BoundMods(None, natten_like)
    original = {"mask": natten_like}

    def remake(m):
        return {"mask": m.mask_mod}

    def flash_lacks_maximum(**kw):
        if kw["mask"] is natten_like:
            raise RuntimeError("CuteDSL template failed: " + "=" * 80 +
                               "\nUNSUPPORTED CUTEDSL OPERATION: 'maximum'\n" + "=" * 80)

    kwargs, note = fit_flash_mods(flash_lacks_maximum, original, "BlockMask", mods, remake, CPU)
    assert kwargs["mask"] is not natten_like
    assert note.startswith(f"BlockMask; mods written for it: {WHAT}")
    assert "UNSUPPORTED CUTEDSL OPERATION: 'maximum'" in note

    def always_fails(**kw):
        raise ValueError("Expected TensorSSA, but got <class 'int'>")

    with pytest.raises(RuntimeError, match=r"(?s)TensorSSA.*; rewritten as its users.*TensorSSA"):
        fit_flash_mods(always_fails, original, "", mods, remake, CPU)
    assert fit_flash_mods(lambda **kw: None, original, "n", mods, remake, CPU) == (original, "n")


def test_the_peer_retries_with_the_key_block_its_error_names():
    """At D = 256 Flex FLASH's Hopper kernel tiles keys by 80 and refuses the default
    128-key BlockMask, saying so; its users then build the BlockMask with 80-key
    blocks, and so does the peer, before any rewrite of the mods."""
    mods = BoundMods(None, natten_like)
    made = []

    def remake(m, kv_block=None):
        made.append((m.mask_mod is natten_like, kv_block))
        return {"mask": m.mask_mod, "kv_block": kv_block}

    def flash_tiles_by_80(**kw):
        if kw.get("kv_block") is None or kw["kv_block"] % 80:
            raise ValueError("Block sparsity requires sparse_block_size[1] to be a multiple "
                             "of tile_n=80.")

    kwargs, note = fit_flash_mods(flash_tiles_by_80, {"mask": natten_like}, "BlockMask", mods,
                                  remake, CPU)
    assert kwargs == {"mask": natten_like, "kv_block": 80} and made == [(True, 80)]
    assert note == "BlockMask; BlockMask of 80-key blocks, the key tile its error names"

    def flash_lacks_maximum_too(**kw):
        flash_tiles_by_80(**kw)
        if kw["mask"] is natten_like:
            raise RuntimeError("UNSUPPORTED CUTEDSL OPERATION: 'maximum'")

    made.clear()
    kwargs, note = fit_flash_mods(flash_lacks_maximum_too, {"mask": natten_like}, "", mods,
                                  remake, CPU)
    assert kwargs["mask"] is not natten_like and kwargs["kv_block"] == 80
    assert made == [(True, 80), (False, 80)] and "'maximum'" in note
    assert "BlockMask of 80-key blocks" in note


# -- tensors made in a mod, as Python numbers ------------------------------------------

MADE = ("lift_fresh", "aten.full", "scalar_tensor", "_like", "new_", "aten.ones", "aten.zeros")


def _agree(form, fn, is_score, sizes=(2, 3, 70, 70)):
    """form and fn per element, as Flex calls them (vmap), on a grid of (b, h, q, k)
    and, for a score_mod, random scores: equal values (dtypes may differ: a Python
    number promotes as the user's code then does)."""
    b, h, q, k = (torch.arange(n, dtype=torch.int32) for n in sizes)
    if not is_score:
        return torch.equal(elementwise_mask(form)(b, h, q, k), elementwise_mask(fn)(b, h, q, k))
    score = torch.randn(*sizes, generator=torch.Generator().manual_seed(3)) * 10
    got = elementwise_score(form)(score, b, h, q, k).double()
    want = elementwise_score(fn)(score, b, h, q, k).double()
    return torch.allclose(got, want, rtol=1e-6, atol=1e-6)


def _code(form):
    """The code of the graph a mod's form runs."""
    return form.__closure__[0].cell_contents.code


def test_tensors_made_in_a_mod_become_the_numbers_they_hold():
    table = torch.randn(3, 5, generator=torch.Generator().manual_seed(0))  # captured: stays

    def made(score, b, h, q_idx, kv_idx):
        up = torch.tensor(0.5)
        bonus = torch.where(q_idx // 16 == kv_idx // 16, up, -up)
        far = torch.where(kv_idx - q_idx > 40, torch.full_like(score, -4.0),
                          torch.zeros_like(score))
        scaled = score * (torch.full((), 0.25) * torch.scalar_tensor(2.0)) + q_idx.new_tensor(3)
        return scaled + bonus + far + torch.as_tensor(1.5) + table[h, kv_idx % 5]

    form = with_number_constants(made, True, CPU)
    assert form.mod is not made
    assert form.numbers == (0.5, -0.5, -4.0, 0.0, 3, 1.5)  # (0.25 * 2.0 folded: 0.5 once)
    assert form.note == ("score_mod's tensors made in it as Python numbers "
                         "(0.5, -0.5, -4, 0, 3, 1.5)")
    code = _code(form.mod)
    assert not [op for op in MADE if op in code], code
    assert "where(eq, 0.5, -0.5)" in code
    assert code.count("= self._tensor_constant") == 1  # the captured table
    held = [t for _, t in form.mod.__closure__[0].cell_contents.named_buffers()]
    assert len(held) == 1 and torch.equal(held[0], table)
    assert _agree(form.mod, made, True)

    def prefix(b, h, q_idx, kv_idx):
        return torch.where(kv_idx < 24, torch.ones_like(q_idx, dtype=torch.bool),
                           q_idx >= kv_idx)

    form = with_number_constants(prefix, False, CPU)
    assert form.numbers == (True,) and "_like" not in _code(form.mod)
    assert _agree(form.mod, prefix, False)


def test_mods_that_make_no_tensor_are_left_as_they_are():
    slopes = torch.tensor([0.5, 0.25, 0.125])  # made outside: a captured tensor

    def alibi(score, b, h, q_idx, kv_idx):
        return score + slopes[h] * (kv_idx - q_idx)

    def python_numbers(score, b, h, q_idx, kv_idx):  # (these trace to scalar_tensor too)
        return torch.where(q_idx >= kv_idx, score * 0.5, torch.finfo(score.dtype).min) \
            + torch.where(q_idx > 3, -float("inf"), 0.0)

    def window(b, h, q_idx, kv_idx):
        return abs(q_idx - kv_idx) <= min(256, 1000)

    for fn, is_score in ((alibi, True), (python_numbers, True), (window, False)):
        form = with_number_constants(fn, is_score, CPU)
        assert form.mod is fn and form.numbers == () and form.note == ""
    assert with_number_constants(None, True, CPU) == with_number_constants(None, False, CPU)
    assert with_number_constants(None, True, CPU).mod is None


def test_a_tensor_no_number_stands_for_leaves_the_mod_as_written_and_says_why():
    def per_head(score, b, h, q_idx, kv_idx):
        return score + torch.tensor([1.0, 2.0, 3.0])[h] + torch.tensor(0.5)

    form = with_number_constants(per_head, True, CPU)
    assert form.mod is per_head and form.numbers == ()
    assert form.note == ("score_mod makes a tensor of shape (3,) (torch.float32), which no "
                         "Python number stands for: left as written")

    def no_scalar_overload(b, h, q_idx, kv_idx):  # aten.maximum takes no number
        return torch.maximum(q_idx, torch.tensor(3)) >= kv_idx

    form = with_number_constants(no_scalar_overload, False, CPU)
    assert form.mod is no_scalar_overload
    assert re.match(r"mask_mod's tensors made in it left as written: with numbers \(3\) it "
                    r"fails \(RuntimeError: .*maximum", form.note), form.note

    def returns_it(b, h, q_idx, kv_idx):
        return torch.ones_like(q_idx, dtype=torch.bool)

    form = with_number_constants(returns_it, False, CPU)
    assert form.mod is returns_it and form.note.startswith("mask_mod returns a tensor it makes")


def _recorded_specs():
    """The spec files of the records that define their own mods (the api_* files of
    cpu-spec-surface call cubridge's API when loaded)."""
    own_mods = re.compile(r"^(def )?(mask_mod|score_mod)\b", re.M)
    return [p for p in sorted(ROOT.glob("bench/results/*/specs/*.py"))
            if own_mods.search(p.read_text())]


# The recorded specs whose mods make tensors: torch.tensor(0.5) (wrong under Flex FLASH,
# bench/results/h100-trace-ops-row-choices-b01e7c4/), ones_like, full_like, and the
# new_ones / new_zeros of FlexAttention's own and_masks / or_masks.
MAKE_TENSORS = {"local_where_consts": (0.5, -0.5), "ones_like_prefix": (True,),
                "piecewise_distance_bias": (-4.0,), "and_or_masks": (False, True),
                "and_or_1500": (False, True)}


def test_every_recorded_spec_keeps_its_values_with_numbers_for_the_tensors_it_makes():
    found = {}
    for path in _recorded_specs():
        spec = load(path)
        shape = fit_shapes(spec, [Shape(2, 3, 3, 70, 70, 16)])[0]
        mods = constant_mods(spec, make_aux(spec, shape, torch.Generator().manual_seed(0)))
        for fn, is_score in ((mods.score_mod, True), (mods.mask_mod, False)):
            form = with_number_constants(fn, is_score, CPU)
            if form.mod is fn:
                assert form.note == "", (path, form.note)
                continue
            found[path.stem] = form.numbers
            assert _agree(form.mod, fn, is_score, (2, 3, shape.sq, shape.sk)), path
    assert found == MAKE_TENSORS


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_the_flash_peer_runs_the_mods_with_numbers_and_says_so(monkeypatch):
    """Before the first call, which gives no error: Flex FLASH reads a tensor made in a
    mod wrongly without one. Flex's eager path here, the peer's forms as on the GPU."""
    monkeypatch.setattr(peers, "flash_attn_cute_available", lambda: True)
    spec = load(ROOT / "bench/results/prepared-trace-ops/specs/local_where_consts.py")
    tiny = HeadConfig("tiny", 4, 2, 32)
    case = build_case(spec, tiny, 384, BenchConfig(seq_lens=(384,), configs=("tiny",),
                                                   tokens=384, device="cpu"))
    prepared = peers.make_flex_preparer("FLASH", compiled=False)(case)
    assert prepared.note == ("BlockMask; score_mod's tensors made in it as Python numbers "
                             "(0.5, -0.5)")
    out = prepared.to_standard(prepared.run())
    ref = float64_reference(case.spec, case.q, case.k, case.v, case.aux, case.mods, True).out
    check = check_output(out, ref, case.v, tolerance_for(case.spec, case.dtype))
    assert check.ok, check.reason
    triton = peers.make_flex_preparer("TRITON", compiled=False)(case)
    assert triton.note == "BlockMask"  # (Triton reads the tensors: the mods as written)
