"""On the GPU: each library kernel that runs on this device, with each generated
hook header, computes its spec (through the verifier), block tables (at the
kernel's own table tile) included. Run with `pytest -m gpu`."""

from __future__ import annotations

import glob
from pathlib import Path

import pytest
import torch

from cubridge.attention import Shape
from cubridge.lower.hook_header import generate_header
from cubridge.spec import load
from cubridge.transfer.hooks import plan_hooks

pytestmark = pytest.mark.gpu
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "specs"

def _rules_path(spec) -> bool:
    """Inside the hook family: the router lowers it by hooks (cosine, MLA, the
    structural examples take the LLM path; tests/pipeline/test_structural_examples.py)."""
    from cubridge.kernels import get_kernel
    from cubridge.pipeline.route import choose_path

    return choose_path(spec, get_kernel("fa_sm80")).path == "rules"


SPECS = {s.name: s for s in map(load, sorted(glob.glob(str(EXAMPLES / "*.py"))))
         if _rules_path(s)}
# tails, Sq != Sk both ways, GQA 8, and long enough for 1024-token windows
SHAPES = [Shape(2, 16, 2, 200, 127, 128), Shape(1, 4, 4, 65, 300, 128),
          Shape(1, 8, 1, 2100, 2300, 128), Shape(2, 4, 4, 1100, 1100, 64)]


def _impl(spec, kernel_name, head_dim=128, head_dim_v=None):
    from cubridge.kernels import get_kernel

    kernel = get_kernel(kernel_name)
    plan = plan_hooks(spec, table_block=kernel.table_block(head_dim, head_dim_v))
    header = generate_header(plan)

    def attention(q, k, v, scale=None, **aux):
        shape = Shape(q.shape[0], q.shape[1], k.shape[1], q.shape[2], k.shape[2], q.shape[3])
        out, lse = kernel.attention(q, k, v, scale=scale, hooks_header=header.text,
                                    aux=header.pack_aux(aux, shape))
        if lse is None:
            return out, lse
        return header.fill_empty_rows(out, lse, v)  # (a floor mask's rows with no key)

    return attention


def _runs_here(kernel_name: str) -> bool:
    from cubridge.build.driver import device_arch
    from cubridge.kernels import get_kernel

    arch = device_arch(torch.device("cuda"))
    return not get_kernel(kernel_name).unsupported(arch=arch)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("kernel_name", ["fa_sm80", "fa_sm90"])
@pytest.mark.parametrize("name", sorted(SPECS))
def test_generated_hooks_compute_the_spec_on_the_gpu(name, kernel_name):
    from cubridge.verify import verify

    if not _runs_here(kernel_name):
        pytest.skip(f"{kernel_name} does not run on this GPU")
    spec = SPECS[name]
    report = verify(spec, _impl(spec, kernel_name), device="cuda", dtypes=[torch.bfloat16],
                    shapes=SHAPES, seed=0, require_lse=spec.returns_lse)
    assert report.passed, report.table()


# fa_sm90 at its other head dims, every hook family, with tails, Sq != Sk both ways, GQA
# and more tiles than SMs: D = 256 (64-key blocks, one Q buffer with O staged in it), QK/V
# 192/128 (MLA's: 128-key blocks, one Q buffer, pair reads not staged), D = 96 (its own
# build: 64-byte-swizzled panels of 32 columns) and D = 80 (run on the D = 96 build: TMA
# zero-fills the columns past 80 and the store skips them).
OTHER_HEAD_DIMS = {"head_dim_256": (256, None), "qk_v_192_128": (192, 128),
                   "head_dim_96": (96, None), "head_dim_80": (80, None)}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dims", OTHER_HEAD_DIMS.values(), ids=OTHER_HEAD_DIMS)
@pytest.mark.parametrize("name", sorted(SPECS))
def test_generated_hooks_at_fa_sm90s_other_head_dims(name, dims):
    from cubridge.verify import verify

    if not _runs_here("fa_sm90"):
        pytest.skip("fa_sm90 does not run on this GPU")
    d, dv = dims
    shapes = [Shape(2, 16, 2, 200, 127, d, dv), Shape(1, 4, 4, 65, 300, d, dv),
              Shape(1, 8, 1, 2100, 2300, d, dv), Shape(3, 40, 8, 700, 900, d, dv)]
    spec = SPECS[name]
    report = verify(spec, _impl(spec, "fa_sm90", d, dv), device="cuda", dtypes=[torch.bfloat16],
                    shapes=shapes, seed=0, require_lse=spec.returns_lse)
    assert report.passed, report.table()


# Key runs (cubridge/lower/key_runs.py): fa_sm90 sets a masked block's bits from the
# runs of its staged key values where they change at most once in the block, and
# falls back to mask_mod per pair otherwise. The spec's own ids exercise both only
# through their lengths; these id patterns pin each case down.
def _random_runs(pos: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    lengths = torch.randint(1, 40, (len(pos),), generator=g)
    return torch.repeat_interleave(torch.arange(len(pos)), lengths)[: len(pos)]


ID_PATTERNS = {
    "one_run": lambda pos, g: torch.zeros_like(pos),       # no change in any block
    "block_edges": lambda pos, g: pos // 128,               # changes on block boundaries
    "one_inside": lambda pos, g: (pos + 37) // 128,         # one change inside each block
    "two_inside": lambda pos, g: pos // 50,                 # two in some blocks: per pair
    "alternating": lambda pos, g: pos % 2,                  # a change at every key
    "random_runs": _random_runs,                            # runs of 1 to 39 keys
}
KEY_RUN_SHAPES = [Shape(2, 8, 2, 700, 700, 128), Shape(1, 4, 4, 300, 1000, 128),
                  Shape(1, 4, 1, 1000, 260, 64)]


def _with_ids(spec, pattern):
    """The spec with its staged id tensors drawn from `pattern` (every aux key of the
    spec is an id per position: document or segment ids). Batch row b's pattern is
    shifted by 64 b keys, so block-edge changes also fall mid-block and on lane edges."""
    import dataclasses

    def make_aux(shape, generator, device):
        n = max(shape.sq, shape.sk)
        rows = torch.stack([pattern(torch.arange(n) + 64 * b, generator)
                            for b in range(shape.b)]).to(device)
        aux = {}
        for name, dims in spec.aux_shapes.items():
            length = shape.sq if dims[-1] == "Sq" else shape.sk
            ids = rows[:, :length] if dims[0] == "B" else rows[0, :length]
            aux[name] = ids.contiguous()
        return aux

    return dataclasses.replace(spec, make_aux=make_aux)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("pattern", sorted(ID_PATTERNS))
@pytest.mark.parametrize("name", ["document_causal", "share_question"])
def test_key_run_masks_compute_the_spec_for_every_run_pattern(name, pattern):
    from cubridge.verify import verify

    if not _runs_here("fa_sm90"):
        pytest.skip("fa_sm90 does not run on this GPU")
    spec = _with_ids(SPECS[name], ID_PATTERNS[pattern])
    report = verify(spec, _impl(spec, "fa_sm90"), device="cuda", dtypes=[torch.bfloat16],
                    shapes=KEY_RUN_SHAPES, seed=0, require_lse=True)
    assert report.passed, report.table()


# Pair reads (cubridge/lower/pair_reads.py): fa_sm90 stages a dense 16-bit bias's rows
# (a dense bool mask's, in masked blocks) per key block by cp.async (a tile's first
# block reads them from global memory) in O's staging rows at D = 128 and a tile of
# their own at D = 64 (the mask: O's rows at both). The tensor as a model may hand it:
# contiguous with rows on 16-byte boundaries or not (the launcher then pads a copy), a
# view at an odd offset, broadcast over the batch.
PAIR_SHAPES = [Shape(2, 8, 2, 700, 1024, 128), Shape(1, 4, 4, 300, 256, 64),
               Shape(2, 4, 1, 333, 517, 128), Shape(1, 8, 8, 1100, 1100, 64)]
PAIR_LAYOUTS = {
    "contiguous": lambda full: full,
    "offset_view": lambda full: torch.nn.functional.pad(full, (3, 5))[..., 3:-5],
    "batch_broadcast": lambda full: full[:1].expand_as(full),
}


# (graph_mask: a dense bool adjacency, mask_mod's pair read; its rows align at 16 keys;
# graph_spatial_bias: int32 distances, packed as int16 indices and staged as pairs;
# graph_edge_bias: its path lengths, coded with the edge types as int16 pair codes)
PAIR_READS = {"pair_bias": "bias", "graph_mask": "adjacency", "graph_spatial_bias": "distance",
              "graph_edge_bias": "path_length"}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("layout", sorted(PAIR_LAYOUTS))
@pytest.mark.parametrize("name", sorted(PAIR_READS))
def test_pair_reads_compute_the_spec_for_every_layout(name, layout):
    import dataclasses

    from cubridge.verify import verify

    if not _runs_here("fa_sm90"):
        pytest.skip("fa_sm90 does not run on this GPU")
    spec, read = SPECS[name], PAIR_READS[name]

    def make_aux(shape, generator, device):
        aux = spec.make_aux(shape, generator, device)
        return {**aux, read: PAIR_LAYOUTS[layout](aux[read])}

    report = verify(dataclasses.replace(spec, make_aux=make_aux), _impl(spec, "fa_sm90"),
                    device="cuda", dtypes=[torch.bfloat16, torch.float16], shapes=PAIR_SHAPES,
                    seed=0, require_lse=True)
    assert report.passed, report.table()


# The test variants of tests/transfer/hook_variants.py that no example mirrors: a
# floor-mod mask with a distance-table score (kitchen_sink), a log2 mask with a
# tabulated log bucket (log_buckets), 16-bit reads widened (half_precision_reads), bool
# and int8 pair masks, a prefix past the 32-bit interval range, a tree mask read from a
# mask table (tree_mask), a row factor of every sign (row_factor_signs), a window chosen
# per head (window_per_head), masks written as -inf in score_mod (causal_in_score_mod,
# sigmoid_window_in_score_mod), patterns chosen per head (strided_heads: mask cases), a
# sin of the score on the SFU beside a cos of the distance in a table (trig_terms),
# rows that see every key as a choice in each row interval (longformer_globals),
# != and bit operations as intervals and key sets (unequal_shifted_blocks), key sets
# of periods that are not powers of two (odd_periods),
# floor masks (finfo_min_mask, finfo_min_causal; finfo_window_empty_rows, whose rows past
# Sk + 15 keep no key: the pass after the kernel) and finfo.min left in score_mod beside a
# mask_mod (finfo_min_beside_mask_mod: the kernels' SCORE_FLOOR).
# Their hooks are checked per element on the host (test_hooks_compiled.py); here,
# through each kernel.
BEYOND_EXAMPLES = ["c_style_ops", "causal_in_score_mod", "finfo_min_beside_mask_mod",
                   "finfo_min_causal", "finfo_min_mask", "finfo_window_empty_rows",
                   "half_precision_reads", "kitchen_sink", "log_buckets", "longformer_globals",
                   "odd_periods", "pair_masks", "prefix_past_int_range", "prompt_then_frames",
                   "random_blocks",
                   "residue_keys", "residue_ranges", "row_factor_signs",
                   "sigmoid_window_in_score_mod", "sparse_fixed", "strided_heads", "tree_mask",
                   "trig_terms", "unequal_shifted_blocks", "window_per_head"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("kernel_name", ["fa_sm80", "fa_sm90"])
@pytest.mark.parametrize("name", BEYOND_EXAMPLES)
def test_test_variants_compute_their_spec_on_the_gpu(name, kernel_name):
    from hook_variants import VARIANTS  # (tests/lower/conftest.py puts it on the path)

    from cubridge.verify import verify

    if not _runs_here(kernel_name):
        pytest.skip(f"{kernel_name} does not run on this GPU")
    spec = VARIANTS[name]
    report = verify(spec, _impl(spec, kernel_name), device="cuda", dtypes=[torch.bfloat16],
                    shapes=SHAPES[:3], seed=0, require_lse=spec.returns_lse)
    assert report.passed, report.table()
