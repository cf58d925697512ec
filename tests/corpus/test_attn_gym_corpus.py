"""attention-gym's mods through cubridge, unchanged (tests/corpus/attn_gym_corpus.py).

Fast: every export is in the corpus; every taken mod builds a spec from its
mods alone, takes the rules path (traced, and the trace checked element by
element against the mod), and lowers to a hook header; every mod not taken
fails with a located TraceError, never a raw traceback; docs/flex_attention.md
lists exactly the ones not taken. Slow: the target CuIR of each taken mod
verifies on the CPU executor. nvcc: each compiles with the kernel selected
for sm_90 (fa_sm90) and sm_80 (fa_sm80) at D = 128, within the variant
spill budget or, for the mods SPILL_EXCEPTIONS names, within today's measured bound.
"""

from __future__ import annotations

import functools
import inspect
import re
from pathlib import Path

import pytest
import torch
from attn_gym_corpus import CORPUS, NOT_TAKEN, SMALL, TAKEN, Case, Size
from build_ahead import builds_ahead

from cubridge.attention import HeadConfig, Shape
from cubridge.build.resources import SPILL_BUDGET_BYTES
from cubridge.kernels import get_kernel
from cubridge.lower.hook_header import generate_header
from cubridge.pipeline.route import choose_path
from cubridge.spec import from_mods
from cubridge.transfer.rules import transfer_by_rules
from cubridge.transfer.trace import TraceError, trace_mask_mod, trace_score_mod

attn_gym = pytest.importorskip("attn_gym", reason="attention-gym (pip install attn-gym)")

DOC = Path(__file__).resolve().parents[2] / "docs" / "flex_attention.md"
D = 64  # head dim of the fast and IR checks (the kernels are compiled at 64 and 128)
KERNELS = {"fa_sm90": "sm_90a", "fa_sm80": "sm_80"}  # what select_kernel picks per arch
# Corpus mods over SPILL_BUDGET_BYTES at D = 128, bounded at what nvcc 13.0
# reports today (bytes of spill traffic, the larger entry point; fa_sm90 as of
# its mask bits for index-only masks). All come from the per-score mask_mod /
# score_mod beside the consumer's accumulators (with a trivial mask_mod they
# compile without spills); docs/flex_attention.md lists them. A regression past
# these fails.
SPILL_EXCEPTIONS: dict[tuple[str, str], int] = {}  # none since fa_sm80's key-terms masks


def _spec(c: Case, d: int = D):
    score_mod, mask_mod = c.make("cpu")
    return from_mods(score_mod, mask_mod, name="corpus", configs=[HeadConfig("corpus", 4, 2, d)],
                     seq_lens=[c.sq])


def _ids(cases):
    return [c.name.split("(")[0].strip() for c in cases]


def test_every_mask_and_score_generator_attention_gym_exports_is_in_the_corpus():
    import attn_gym.masks
    import attn_gym.mods

    exported = set()
    for module in (attn_gym.masks, attn_gym.mods):
        for name, obj in vars(module).items():
            if not inspect.isfunction(obj):
                continue
            params = list(inspect.signature(obj).parameters)
            is_mod = params[:4] == ["b", "h", "q_idx", "kv_idx"]
            if name.startswith("generate_") or name.endswith("_mask_mod") or is_mod:
                exported.add(name)
    covered = {c.name.split("(")[0].split(" ")[0] for c in CORPUS}
    assert exported <= covered, f"not in the corpus: {sorted(exported - covered)}"
    assert len(TAKEN) >= 27 and len(NOT_TAKEN) <= 2


@pytest.mark.parametrize("c", TAKEN, ids=_ids(TAKEN))
def test_taken_mods_route_to_the_rules_and_lower(c):
    kernel = get_kernel("fa_sm90")
    route = choose_path(_spec(c), kernel)  # traces, and checks the trace per element
    assert route.path == "rules", route.reason
    header = generate_header(route.plan)
    score_mod, mask_mod = c.make("cpu")
    assert f"kHasScoreMod = {'true' if score_mod else 'false'}" in header.text
    assert f"kHasMaskMod = {'true' if mask_mod else 'false'}" in header.text
    captured = {s.name for s in header.slots if s.source == "captured"}
    assert ("captured" in c.tags) == bool(captured)


@pytest.mark.parametrize("c", NOT_TAKEN, ids=_ids(NOT_TAKEN))
def test_mods_not_taken_fail_with_a_located_trace_error(c):
    score_mod, mask_mod = c.make("cpu")
    with pytest.raises(TraceError) as e:
        if score_mod is not None:
            trace_score_mod(score_mod, {})
        else:
            trace_mask_mod(mask_mod, {})
    assert re.search(r"attn_gym/.*\.py:\d+", e.value.where), e.value
    route = choose_path(_spec(c), get_kernel("fa_sm90"))
    assert route.path == "llm" and "TraceError" in route.reason


def test_the_docs_list_exactly_the_mods_not_taken_with_their_reasons():
    text = DOC.read_text()
    section = text.split("## attention-gym mods cubridge cannot take", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^- `([^`]+)`", section, flags=re.M)
    assert listed == [c.name for c in NOT_TAKEN]
    flat = " ".join(section.split())
    for c in NOT_TAKEN:
        assert " ".join(c.not_taken.split()) in flat, c.name


def test_corpus_sizes_are_those_whose_canvases_scale_by_an_integer_side():
    assert (SMALL.b, SMALL.h, SMALL.n, SMALL.r, SMALL.side) == (2, 4, 128, 1, 1)
    assert (Size(8, 32, 2048).r, Size(8, 32, 2048).side) == (16, 4)
    for n in (256, 1000, 4096):
        with pytest.raises(ValueError, match="128 \\* k\\^2"):
            Size(1, 1, n)


MASKS = [c for c in TAKEN if c.make("cpu")[1] is not None]


@pytest.mark.parametrize("c", MASKS, ids=_ids(MASKS))
def test_masks_made_for_a_larger_size_keep_their_density(c):
    """What the GPU timing test relies on: a mask made for 512 positions (and
    so for 2048) allows about the share of pairs it allows at 128."""
    from torch.nn.attention.flex_attention import create_mask

    def density(size: Size) -> float:
        sq, sk = c.lengths(size)
        mask = create_mask(c.make("cpu", size)[1], size.b, size.h, sq, sk, device="cpu")
        return float(mask.float().mean())

    small, large = density(SMALL), density(Size(2, 4, 512))
    assert 0 < large < 1 and abs(large - small) <= 0.4 * small, (small, large)


@pytest.mark.slow
@pytest.mark.parametrize("c", TAKEN, ids=_ids(TAKEN))
def test_taken_mods_verify_as_target_cuir_on_the_cpu(c):
    """Both kernels' CuIR, with tails, Sq != Sk, GQA and two batches."""
    spec = _spec(c)
    shapes = [Shape(1, 2, 1, c.sq, c.sk, D), Shape(2, 4, 2, c.sq - 27, c.sk - 13, D)]
    for name in KERNELS:
        kernel = get_kernel(name)
        route = choose_path(spec, kernel)
        result = transfer_by_rules(spec, kernel.cuir_class(), shapes=shapes,
                                   config=kernel.cuir_config(D), plan=route.plan)
        assert result.report.passed, result.report.summary()


def _build_at_128(c: Case, kernel_name: str):
    """The build, not yet run: the header is made here (tracing stays on this
    thread), nvcc runs when it is called."""
    kernel = get_kernel(kernel_name)
    header = generate_header(choose_path(_spec(c, 128), kernel).plan).text
    return functools.partial(kernel.compile, 128, torch.bfloat16, KERNELS[kernel_name],
                             hooks_header=header)


@pytest.fixture(scope="module")
def corpus_builds(request):
    return builds_ahead(request, "test_taken_mods_compile_within_the_spill_budget",
                        lambda p: _build_at_128(p["c"], p["kernel_name"]))


@pytest.mark.nvcc
@pytest.mark.slow
@pytest.mark.parametrize("kernel_name", list(KERNELS))
@pytest.mark.parametrize("c", TAKEN, ids=_ids(TAKEN))
def test_taken_mods_compile_within_the_spill_budget(c, kernel_name, corpus_builds, request):
    """At D = 128, the head dim of the benchmark's configs (built ahead, together)."""
    kernel = get_kernel(kernel_name)
    compiled = corpus_builds[request.node.callspec.id].result()
    entry = kernel.metadata.entry
    budget = next((b for (k, name), b in SPILL_EXCEPTIONS.items()
                   if k == kernel_name and c.name.startswith(name)), SPILL_BUDGET_BYTES)
    for name in [entry] + ([f"{entry}_long"] if kernel_name == "fa_sm80" else []):
        res = compiled.resources_of(name)
        assert res.spill_bytes <= budget, f"{c.name} on {name}: {res}"


@pytest.mark.nvcc
@pytest.mark.slow
def test_fa_sm90_variants_past_the_budget_take_the_build_that_spills_less():
    """fa_sm90's steady blocks keep the row max by the sums of P with a second
    set of P fragments live; a generated variant that spills past the budget is
    also built without that (CUBRIDGE_KEEP_MAX_BY_SUMS=0), then without the other fast
    paths its header takes, until a build fits the budget. Graphormer's edge encoding
    read per score (its pair codes off: with them it fits) has no mask, so the first
    fallback is the build used."""
    c = next(c for c in TAKEN if c.name.startswith("generate_graphormer_edge_bias"))
    kernel = get_kernel("fa_sm90")
    header = generate_header(choose_path(_spec(c, 128), kernel).plan, pair_codes=False).text
    defines = kernel.compile_defines(128, torch.bfloat16, None)

    def spills(compiled):
        return compiled.resources_of(kernel.metadata.entry).spill_bytes

    def as_built(**switches):
        return spills(kernel.compile_source(None, "sm_90a", header, {**defines, **switches}))

    with_sums, without = as_built(), as_built(CUBRIDGE_KEEP_MAX_BY_SUMS=0)
    assert with_sums > SPILL_BUDGET_BYTES and without < with_sums
    used = kernel.compile(128, torch.bfloat16, "sm_90a", hooks_header=header)
    assert spills(used) == without
    # A patched copy of the source (an A/B's side) is held to the same budget.
    patched = kernel.compile(128, torch.bfloat16, "sm_90a", hooks_header=header,
                             source="// an A/B side\n" + kernel.source.read_text())
    assert spills(patched) == without and patched.directory != used.directory
