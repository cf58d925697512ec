"""The generated CUDA hooks, compiled and evaluated on the host, against torch.

For every docs/benchmark.md variant (plus extra op coverage): score_mod within float
tolerance of torch on the spec's mods, mask_mod equal, block_kind conservative
against the brute-force grid (and exact where the mask allows it),
kv_block_range covering every live block (and tight), activation as torch.
nvcc compiles the header for sm_80 too (a probe kernel calls every hook).
"""

from __future__ import annotations

import glob
import inspect
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch
from hook_variants import VARIANTS
from host_harness import HookValues, build, compiler, device_compile, run
from host_harness import scores as harness_scores

from cubridge.attention import Shape
from cubridge.lower.hook_header import generate_header
from cubridge.spec import load
from cubridge.transfer import interval
from cubridge.transfer.hooks import plan_hooks
from cubridge.transfer.score_masks import FLOOR_MASK_LIMIT, SCORE_FLOOR

# A host compiler (g++, else nvcc) builds the hooks into a host program.
pytestmark = [pytest.mark.slow]
if compiler() is None:
    pytestmark = [pytest.mark.slow, pytest.mark.skip(reason="neither g++ nor nvcc found")]

# Sq != Sk, neither a tile multiple; long enough for the 1024 windows and 512 blocks.
SHAPE = Shape(b=2, hq=2, hk=1, sq=1090, sk=1150, d=64)
ALIGNED = (128, 64)  # the kernel's tiling; the table's too
ODD = (96, 80)  # another tiling: classification must stay conservative
# masks whose tiles interval arithmetic / the table classify exactly at ALIGNED
EXACT = {"full", "causal", "sliding_window_1024", "global_sliding_window", "prefix_lm",
         "document_causal", "share_question", "causal_blockwise", "alibi_causal",
         "softcap_causal", "relative_position", "relu_causal", "sigmoid_causal",
         "comb_prefix_softcap_sigmoid", "prefix_past_int_range"}
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "specs"
# our own variant mods, and the example specs of the spec library where present
ALL_SPECS = dict(VARIANTS)
for _path in sorted(glob.glob(str(EXAMPLES / "*.py"))):
    _spec = load(_path)
    ALL_SPECS[f"examples/{_spec.name}"] = _spec
EXACT |= {f"examples/{n}" for n in EXACT} | {"examples/mqa", "examples/alibi",
                                             "examples/prefix_lm_bidirectional"}


def _kwargs(fn, aux):
    names = [p.name for p in inspect.signature(fn).parameters.values() if p.kind == p.KEYWORD_ONLY]
    return {n: aux[n] for n in names}


def _make_aux(spec):
    if spec.make_aux is None:
        return {}
    return dict(spec.make_aux(SHAPE, torch.Generator().manual_seed(7), torch.device("cpu")))


def _grid(shape: Shape):
    return (torch.arange(shape.b).view(-1, 1, 1, 1), torch.arange(shape.hq).view(1, -1, 1, 1),
            torch.arange(shape.sq).view(1, 1, -1, 1), torch.arange(shape.sk).view(1, 1, 1, -1))


def _true_kinds(mask: np.ndarray, bm: int, bn: int) -> np.ndarray:
    b, h, sq, sk = mask.shape
    nq, nk = -(-sq // bm), -(-sk // bn)
    kinds = np.empty((b, h, nq, nk), dtype=np.uint8)
    for i in range(nq):
        for j in range(nk):
            tile = mask[:, :, i * bm:(i + 1) * bm, j * bn:(j + 1) * bn]
            kinds[:, :, i, j] = np.where(tile.all(axis=(2, 3)), 1,
                                         np.where(tile.any(axis=(2, 3)), 2, 0))
    return kinds


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    """Per variant: (spec, header, aux, scores, harness values per tiling)."""
    grid_scores = harness_scores(SHAPE.b, SHAPE.hq, SHAPE.sq, SHAPE.sk)
    names = list(ALL_SPECS)
    headers = [generate_header(plan_hooks(ALL_SPECS[n])) for n in names]
    workdir = Path(tmp_path_factory.mktemp("hooks"))
    exe = build(headers, workdir)

    def one(i: int):
        spec, header = ALL_SPECS[names[i]], headers[i]
        aux = _make_aux(spec)
        packed = header.pack_aux(aux, SHAPE)
        dims = (SHAPE.b, SHAPE.hq, SHAPE.sq, SHAPE.sk)
        values = {ALIGNED: run(exe, i, packed, dims, *ALIGNED, workdir),
                  ODD: run(exe, i, packed, dims, *ODD, workdir, grid=False)}
        return names[i], (spec, header, aux, grid_scores, values)

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return dict(pool.map(one, range(len(names))))


@pytest.mark.parametrize("name", list(ALL_SPECS))
def test_score_and_mask_match_torch(evaluated, name):
    spec, header, aux, scores, values = evaluated[name]
    got: HookValues = values[ALIGNED]
    b, h, q, k = _grid(SHAPE)
    if header.plan.mask_in_score:
        # score_mod's -inf condition (or a floor mask's, at its C) is the header's mask:
        # the pairs allowed, and their scores, are the mods' (without a C kept for the
        # pass after the kernel, what is masked is -inf, or C under sigmoid and relu)
        want = spec.score_mod(scores, b, h, q, k, **_kwargs(spec.score_mod, aux)).float().numpy()
        floor = header.plan.mask_floor
        allowed = want > FLOOR_MASK_LIMIT if floor is None else want != np.float32(floor)
        if spec.mask_mod is not None:
            allowed &= spec.mask_mod(b, h, q, k, **_kwargs(spec.mask_mod, aux)).expand(
                got.mask.shape).numpy()
        np.testing.assert_array_equal(got.mask, allowed)
        np.testing.assert_allclose(got.score[allowed], want[allowed], rtol=2e-5, atol=2e-5)
    else:
        if spec.score_mod is not None:
            want = spec.score_mod(scores, b, h, q, k,
                                  **_kwargs(spec.score_mod, aux)).float().numpy()
            if spec.normalizer == "softmax":  # (finfo.min as a mask value: kernel_score)
                want = np.maximum(want, SCORE_FLOOR)
            np.testing.assert_allclose(got.score, want, rtol=2e-5, atol=2e-5)
            assert not np.array_equal(got.score, scores.numpy()), "score_mod changed nothing"
        else:
            np.testing.assert_array_equal(got.score, scores.numpy())
        if spec.mask_mod is not None:
            want_mask = spec.mask_mod(b, h, q, k, **_kwargs(spec.mask_mod, aux)).expand(
                got.mask.shape).numpy()
            np.testing.assert_array_equal(got.mask, want_mask)
        else:
            assert got.mask.all()
    act = {"softmax": scores[0, 0, 0], "sigmoid": torch.sigmoid(scores[0, 0, 0]),
           "relu": torch.relu(scores[0, 0, 0])}[spec.normalizer]
    np.testing.assert_allclose(got.activation, act.numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", list(ALL_SPECS))
@pytest.mark.parametrize("tiles", [ALIGNED, ODD], ids=["128x64", "96x80"])
def test_block_kind_and_range_against_brute_force(evaluated, name, tiles):
    spec, header, aux, scores, values = evaluated[name]
    got: HookValues = values[tiles]
    truth = _true_kinds(values[ALIGNED].mask, *tiles)  # the mask equals torch's (test above)
    # conservative: FULL only if all in-bounds pairs are allowed, EMPTY only if none
    assert not ((got.kinds == 1) & (truth != 1)).any(), "FULL claimed for a tile that is not"
    assert not ((got.kinds == 0) & (truth != 0)).any(), "EMPTY claimed for a live tile"
    if tiles == ALIGNED and name in EXACT:
        np.testing.assert_array_equal(got.kinds, truth)
    # kv_block_range covers every live block
    live = truth != 0
    nk = live.shape[-1]
    cols = np.arange(nk)
    lo, hi = got.ranges[..., :1], got.ranges[..., 1:]
    assert not (live & ((cols < lo) | (cols >= hi))).any(), "a live block is outside the range"
    assert ((0 <= lo) & (lo <= hi) & (hi <= nk)).all()
    if tiles == ALIGNED and name in EXACT:
        want_lo = np.where(live.any(-1), live.argmax(-1), 0)
        want_hi = np.where(live.any(-1), nk - live[..., ::-1].argmax(-1), 0)
        np.testing.assert_array_equal(lo[..., 0][live.any(-1)], want_lo[live.any(-1)])
        np.testing.assert_array_equal(hi[..., 0][live.any(-1)], want_hi[live.any(-1)])


@pytest.mark.parametrize("name", [n for n, s in ALL_SPECS.items()
                                  if plan_hooks(s).classification == "interval"])
def test_python_interval_agrees_with_cuda(evaluated, name):
    """The CuIR's interval code and the CUDA header classify tiles identically."""
    spec, header, aux, scores, values = evaluated[name]
    fn = interval.compile_mask(header.plan.mask.node)
    bm, bn = ALIGNED
    got = values[ALIGNED].kinds
    for bi in range(SHAPE.b):
        for hi in range(SHAPE.hq):
            for i in range(got.shape[2]):
                for j in range(got.shape[3]):
                    kind = interval.classify_block(
                        fn, bi, hi, (i * bm, min((i + 1) * bm, SHAPE.sq)),
                        (j * bn, min((j + 1) * bn, SHAPE.sk)), aux)
                    assert int(kind) == int(got[bi, hi, i, j]), (bi, hi, i, j)


@pytest.mark.nvcc
def test_headers_compile_for_device(evaluated, tmp_path):
    """Every generated header compiles as device code for sm_80 and sm_90a."""
    device_compile([evaluated[n][1] for n in ALL_SPECS], tmp_path)


def test_sparsity_is_exploited(evaluated):
    """The masks that skip work do skip it: EMPTY tiles exist and ranges are tight."""
    for name in ("causal", "sliding_window_1024", "document_causal", "causal_blockwise"):
        got = evaluated[name][4][ALIGNED]
        assert (got.kinds == 0).mean() > 0.25, name
        assert (got.ranges[..., 1] - got.ranges[..., 0]).mean() < got.kinds.shape[-1], name
