"""Mods rewritten as a Flex FLASH user must write them (cubridge.verify.flash_forms):
the same values, none of the ops its CuTe-DSL code generator lacks."""

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.nn.attention.flex_attention import create_mask, flex_attention

from cubridge.spec.mods import BoundMods
from cubridge.verify.flash_forms import WHAT, flash_form
from cubridge.verify.peers import fit_flash_mods

CPU = torch.device("cpu")
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
