"""attention-gym's mods as generated CUDA hooks, compiled and run on the host
(tests/lower/host_harness.py) against the mods themselves called per element,
as FlexAttention calls them: Morton NATTEN's bit operations, Flamingo's row
reads, the captured document ids and the plain C division of non-negative
operands all computed by the C++ the kernels include. Block kinds from the
header (interval code or the block table built from the traced mask) are
checked against the brute-force tiles."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from attn_gym_corpus import TAKEN, B, H

from cubridge.attention import HeadConfig, Shape
from cubridge.kernels import get_kernel
from cubridge.lower.hook_header import generate_header
from cubridge.pipeline.route import choose_path
from cubridge.spec import from_mods
from cubridge.spec.mods import elementwise_mask, elementwise_score

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lower"))
from host_harness import build, compiler, run  # noqa: E402
from host_harness import scores as harness_scores  # noqa: E402

pytest.importorskip("attn_gym", reason="attention-gym (pip install attn-gym)")
pytestmark = [pytest.mark.slow]
if compiler() is None:
    pytestmark = [pytest.mark.slow, pytest.mark.skip(reason="neither g++ nor nvcc found")]

TILES = (128, 64)


def _ids(cases):
    return [c.name.split("(")[0].strip() for c in cases]


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    kernel = get_kernel("fa_sm90")
    plans = []
    for c in TAKEN:
        score_mod, mask_mod = c.make("cpu")
        spec = from_mods(score_mod, mask_mod, configs=[HeadConfig("corpus", H, 2, 64)],
                         seq_lens=[c.sq])
        plans.append((c, score_mod, mask_mod, choose_path(spec, kernel).plan))
    headers = [generate_header(p) for *_, p in plans]
    workdir = Path(tmp_path_factory.mktemp("corpus_hooks"))
    exe = build(headers, workdir)
    out = {}
    for i, ((c, score_mod, mask_mod, _), header) in enumerate(zip(plans, headers, strict=True)):
        shape = Shape(B, H, 2, c.sq, c.sk, 64)
        packed = header.pack_aux({}, shape, "cpu")
        values = run(exe, i, packed, (B, H, c.sq, c.sk), *TILES, workdir)
        out[c.name] = (c, score_mod, mask_mod, values)
    return out


def _indices(c):
    return [torch.arange(n, dtype=torch.int32) for n in (B, H, c.sq, c.sk)]


@pytest.mark.parametrize("c", TAKEN, ids=_ids(TAKEN))
def test_compiled_hooks_compute_what_the_mods_compute(evaluated, c):
    _, score_mod, mask_mod, got = evaluated[c.name]
    if mask_mod is not None:
        want = elementwise_mask(mask_mod)(*_indices(c)).numpy()
        np.testing.assert_array_equal(got.mask, want)
        assert want.any() and not want.all(), "a corpus mask should allow some pairs, not all"
    else:
        assert got.mask.all()
    if score_mod is not None:
        scores = harness_scores(B, H, c.sq, c.sk)
        want = elementwise_score(score_mod)(scores, *_indices(c)).float().numpy()
        np.testing.assert_allclose(got.score, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("c", [c for c in TAKEN if c.make("cpu")[1] is not None],
                         ids=_ids([c for c in TAKEN if c.make("cpu")[1] is not None]))
def test_block_kinds_are_conservative_and_ranges_cover_live_blocks(evaluated, c):
    _, _, _, got = evaluated[c.name]
    bm, bn = TILES
    mask = got.mask
    nq, nk = got.kinds.shape[2:]
    padded = np.zeros((B, H, nq * bm, nk * bn), dtype=np.int8) - 1
    padded[:, :, :c.sq, :c.sk] = mask
    tiles = padded.reshape(B, H, nq, bm, nk, bn)
    some = (tiles == 1).any(axis=(3, 5))
    every = ((tiles == 1) | (tiles == -1)).all(axis=(3, 5))
    assert not ((got.kinds == 1) & ~every).any(), "FULL claimed for a tile that is not"
    assert not ((got.kinds == 0) & some).any(), "EMPTY claimed for a live tile"
    cols = np.arange(nk)
    lo, hi = got.ranges[..., :1], got.ranges[..., 1:]
    assert not (some & ((cols < lo) | (cols >= hi))).any(), "a live block is outside the range"
