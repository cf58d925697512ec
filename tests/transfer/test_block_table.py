"""Host-side block tables for data-dependent masks: kinds and ranges against
brute force, chunking, broadcasting over b/h, and the cache."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hook_variants import VARIANTS, document_causal, share_question

from cubridge.attention import Shape
from cubridge.transfer import block_table
from cubridge.transfer.block_table import BlockTableCache, build_block_table
from cubridge.transfer.hooks import DEFAULT_TABLE_BLOCK, plan_hooks

SHAPE = Shape(b=3, hq=2, hk=1, sq=700, sk=650, d=64)


def _aux(seed: int = 0):
    return VARIANTS["document_causal"].make_aux(SHAPE, torch.Generator().manual_seed(seed),
                                                torch.device("cpu"))


def _brute(mask: np.ndarray, bm: int, bn: int) -> tuple[np.ndarray, np.ndarray]:
    b, h, sq, sk = mask.shape
    nq, nk = -(-sq // bm), -(-sk // bn)
    kinds = np.zeros((b, h, nq, nk), dtype=np.uint8)
    ranges = np.zeros((b, h, nq, 2), dtype=np.int32)
    for i in range(nq):
        for j in range(nk):
            t = mask[:, :, i * bm:(i + 1) * bm, j * bn:(j + 1) * bn]
            kinds[:, :, i, j] = np.where(t.all((2, 3)), 1, np.where(t.any((2, 3)), 2, 0))
    for bi in range(b):
        for hi in range(h):
            for i in range(nq):
                live = np.nonzero(kinds[bi, hi, i])[0]
                if len(live):
                    ranges[bi, hi, i] = (live[0], live[-1] + 1)
    return kinds, ranges


def _dense(fn, aux, bt, ht):
    b = torch.arange(bt).view(-1, 1, 1, 1)
    h = torch.arange(ht).view(1, -1, 1, 1)
    q = torch.arange(SHAPE.sq).view(1, 1, -1, 1)
    k = torch.arange(SHAPE.sk).view(1, 1, 1, -1)
    return fn(b, h, q, k, **aux).expand(bt, ht, SHAPE.sq, SHAPE.sk).numpy()


@pytest.mark.parametrize("tiles", [(128, 64), (64, 128), (96, 80)])
def test_document_table_matches_brute_force(tiles, monkeypatch):
    monkeypatch.setattr(block_table, "_CHUNK_ELEMENTS", 50_000)  # several row chunks
    aux = {"doc_id": _aux()["doc_id"]}
    t = build_block_table(document_causal, SHAPE, *tiles, aux, depends_on_h=False)
    kinds, ranges = _brute(_dense(document_causal, aux, SHAPE.b, 1), *tiles)
    assert t.kinds.dtype == torch.uint8 and t.ranges.dtype == torch.int32
    assert t.kinds.shape == (SHAPE.b, 1, *kinds.shape[2:])
    np.testing.assert_array_equal(t.kinds.numpy(), kinds)
    np.testing.assert_array_equal(t.ranges.numpy(), ranges)
    assert (kinds == 0).any() and (kinds == 1).any() and (kinds == 2).any()


def test_mask_independent_of_b_and_h_gives_one_table():
    aux = VARIANTS["share_question"].make_aux(SHAPE, torch.Generator(), torch.device("cpu"))
    plan = plan_hooks(VARIANTS["share_question"], aux)
    assert plan.classification == "table"
    # this variant's segments are indexed by b, the example spec's are not
    assert plan.table_depends_on_b and not plan.table_depends_on_h
    seg = {"segment": aux["segment"][:1].expand(SHAPE.b, -1)}
    t = build_block_table(share_question, SHAPE, 128, 64, seg, depends_on_b=False,
                          depends_on_h=False)
    assert t.kinds.shape[:2] == (1, 1)
    kinds, _ = _brute(_dense(share_question, seg, 1, 1), 128, 64)
    np.testing.assert_array_equal(t.kinds.numpy(), kinds)


def test_rows_with_nothing_allowed_get_an_empty_range():
    def nothing_before_300(b, h, q, k):
        return (q >= 300) & (k <= q)

    t = build_block_table(nothing_before_300, SHAPE, 128, 64, {})
    assert t.ranges[0, 0, 0].tolist() == [0, 0] and t.ranges[0, 0, 1].tolist() == [0, 0]
    assert (t.kinds[0, 0, :2] == 0).all()
    assert t.ranges[0, 0, 2, 1] > 0


def test_cache_reuses_only_for_equal_aux():
    cache = BlockTableCache()
    aux = {"doc_id": _aux(1)["doc_id"]}
    t1 = cache.get(document_causal, SHAPE, 128, 64, aux, depends_on_h=False)
    t2 = cache.get(document_causal, SHAPE, 128, 64, {"doc_id": aux["doc_id"].clone()},
                   depends_on_h=False)
    assert t1 is t2 and cache.builds == 1
    other = {"doc_id": _aux(2)["doc_id"]}
    t3 = cache.get(document_causal, SHAPE, 128, 64, other, depends_on_h=False)
    assert t3 is not t1 and cache.builds == 2
    aux["doc_id"][0, :] = 0  # changed in place: the entry kept a copy, so no stale hit
    t4 = cache.get(document_causal, SHAPE, 128, 64, aux, depends_on_h=False)
    assert cache.builds == 3 and not torch.equal(t4.kinds, t1.kinds)
    cache.get(document_causal, SHAPE, 64, 64, aux, depends_on_h=False)
    assert cache.builds == 4  # block sizes are part of the key


def test_bad_inputs_are_reported():
    with pytest.raises(ValueError, match="block sizes"):
        build_block_table(document_causal, SHAPE, 0, 64, {"doc_id": _aux()["doc_id"]})
    with pytest.raises(TypeError, match="not a bool tensor"):
        build_block_table(lambda b, h, q, k: q - k, SHAPE, 128, 64, {})


def test_cache_hit_on_the_same_tensors_needs_no_comparison(monkeypatch):
    """On a GPU a content comparison would synchronise; the same unmodified
    tensors hit without one."""
    cache = BlockTableCache()
    aux = {"doc_id": _aux(3)["doc_id"]}
    t1 = cache.get(document_causal, SHAPE, 128, 64, aux, depends_on_h=False)

    def no_compare(*args, **kwargs):
        raise AssertionError("compared contents")

    monkeypatch.setattr(torch, "equal", no_compare)
    assert cache.get(document_causal, SHAPE, 128, 64, aux, depends_on_h=False) is t1
    assert cache.builds == 1


def test_plan_tables_come_from_the_traced_mask():
    """The table is the traced expression evaluated on the grid: it reads only
    what the expression reads (a parameter the mod never uses is not needed),
    and its kinds are those of the mod itself."""
    from cubridge.transfer.hooks import HookPlan

    def mask(b, h, q, k, *, doc_id, unused):
        return (q >= k) & (doc_id[b, q] == doc_id[b, k])

    spec = VARIANTS["document_causal"]
    aux = {**_aux(), "unused": torch.zeros(1)}
    plan = plan_hooks(spec.__class__(**{**spec.__dict__, "mask_mod": mask}), aux)
    assert isinstance(plan, HookPlan) and plan.classification == "table"
    assert set(plan.mask_aux(aux)) == {"doc_id"}
    table = plan.block_table(SHAPE, {"doc_id": aux["doc_id"]})
    taken = {"doc_id": aux["doc_id"], "unused": aux["unused"]}
    kinds, _ = _brute(_dense(mask, taken, SHAPE.b, 1), *DEFAULT_TABLE_BLOCK)
    np.testing.assert_array_equal(table.kinds.numpy(), kinds)
