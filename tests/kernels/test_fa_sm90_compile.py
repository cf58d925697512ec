"""fa_sm90 builds for sm_90a with no local memory and a clean wgmma pipeline
(CI runs this wherever nvcc exists): no spills, setmaxnreg honoured (no C7508),
no wgmma serialised or waits/fences injected by ptxas (C7510-C7520), its
host-side parameter struct matches the C++ one, hook headers compile into it,
the generated wgmma wrappers are what their generator writes, and selection
picks it on Hopper only."""

from __future__ import annotations

import ctypes
import functools
import inspect
import re
from pathlib import Path

import pytest
import torch
from build_ahead import builds_ahead  # (tests/, on the path by its conftest)

from cubridge.build import compile_cuda
from cubridge.build.errors import CompileError, UnsupportedArchError
from cubridge.build.jobs import build_all
from cubridge.kernels import get_kernel, select_kernel
from cubridge.kernels.abi import FwdParams
from cubridge.kernels.common import gen_sm90_wgmma
from cubridge.kernels.fa_sm90.launch import Sm90Params, schedule_section

fa_sm90 = get_kernel("fa_sm90")
HOOKS = Path(__file__).parent / "hooks"
PTXAS_NOTES = re.compile(r"\(C75\d\d\)[^\n]*")


def _check_clean(compiled, what: str) -> None:
    res = compiled.resources_of(fa_sm90.entry)
    assert res.arch == "sm_90a"
    assert not res.spills and res.stack_frame_bytes == 0, f"{what}: {res}"
    notes = PTXAS_NOTES.findall(compiled.log)
    assert not notes, f"{what}: ptxas {notes}"


@pytest.fixture(scope="module")
def library_builds(request):
    return builds_ahead(request, "test_library_builds_are_clean",
                        lambda p: functools.partial(fa_sm90.compile, p["build"][0],
                                                    p["build"][1], "sm_90a",
                                                    causal=p["build"][2]))


@pytest.fixture(scope="module")
def hook_builds(request):
    return builds_ahead(request, "test_hook_headers_compile_clean",
                        lambda p: functools.partial(fa_sm90.compile, 128, torch.bfloat16,
                                                    "sm_90a",
                                                    hooks_header=(HOOKS / p["header"]).read_text()))


@pytest.mark.slow  # nvcc builds (as fa_sm80's compile tests)
@pytest.mark.nvcc
@pytest.mark.parametrize("build", [(128, torch.bfloat16, False), (128, torch.bfloat16, True),
                                   (64, torch.bfloat16, False), (64, torch.bfloat16, True),
                                   (128, torch.float16, False), (256, torch.bfloat16, False),
                                   (256, torch.bfloat16, True), (96, torch.bfloat16, False),
                                   (96, torch.float16, True)],
                         ids=["d128-bf16-full", "d128-bf16-causal", "d64-bf16-full-3wg",
                              "d64-bf16-causal", "d128-fp16-full", "d256-bf16-full-1q",
                              "d256-bf16-causal-1q", "d96-bf16-full-sw64",
                              "d96-fp16-causal-sw64"])
def test_library_builds_are_clean(build, library_builds, request):
    d, dtype, causal = build
    compiled = library_builds[request.node.callspec.id].result()
    _check_clean(compiled, f"D{d} {dtype} causal={causal}")
    cubin = compiled.cubin()
    assert b"cubridge_kernel_info" in cubin and b"cubridge_tile_panels" in cubin


@pytest.mark.slow  # an nvcc build
@pytest.mark.nvcc
def test_the_tile_trace_build_stays_clean():
    """bench/kernels/fa_sm90/tile_trace.py's build (CUBRIDGE_TILE_TRACE) keeps the
    pipeline clean and exports the globals the script reads; default builds have
    neither global (the trace is compiled out)."""
    traced = fa_sm90.compile(128, torch.bfloat16, "sm_90a", causal=True,
                             source="#define CUBRIDGE_TILE_TRACE 1\n" + fa_sm90.source.read_text())
    _check_clean(traced, "tile trace")
    for name in (b"cubridge_tile_trace", b"cubridge_cta_time"):
        assert name in traced.cubin()
        assert name not in fa_sm90.compile(128, torch.bfloat16, "sm_90a", causal=True).cubin()


@pytest.mark.slow  # nvcc builds (as fa_sm80's compile tests)
@pytest.mark.nvcc
@pytest.mark.parametrize("header", sorted(p.name for p in HOOKS.glob("*.cuh")))
def test_hook_headers_compile_clean(header, hook_builds, request):
    """Headers using every hook point (score_mod with aux, mask_mod, EMPTY blocks,
    an elementwise normaliser) keep the pipeline as clean as the default hooks."""
    compiled = hook_builds[request.node.callspec.id].result()
    _check_clean(compiled, header)


@pytest.mark.slow  # nvcc builds (as fa_sm80's compile tests)
@pytest.mark.nvcc
def test_host_params_struct_matches_the_kernel(tmp_path):
    """static_asserts on sizeof/offsetof, compiled against the kernel source itself."""
    checks = [f"static_assert(sizeof(Sm90Params) == {ctypes.sizeof(Sm90Params)});"]
    base = Sm90Params.p.offset
    members = [(n, getattr(Sm90Params, n).offset) for n, *_ in Sm90Params._fields_
               if not n.startswith("_")]
    members += [(f"p.{n}", base + getattr(FwdParams, n).offset) for n, *_ in FwdParams._fields_]
    for member, offset in members:
        checks.append(f'static_assert(offsetof(Sm90Params, {member}) == {offset}, "{member}");')
    source = (f'#include <cstddef>\n#include "{fa_sm90.source}"\n' + "\n".join(checks) + "\n")
    compiled = compile_cuda(source, arch="sm_90a", defines={"CUBRIDGE_HEAD_DIM": 128},
                            cache_dir=tmp_path)
    assert compiled.resources_of(fa_sm90.entry).registers > 0


def test_generated_wgmma_header_is_current():
    assert gen_sm90_wgmma.HEADER.read_text() == gen_sm90_wgmma.render(), \
        "run python cubridge/kernels/common/gen_sm90_wgmma.py"


def test_selected_on_hopper_only():
    assert select_kernel("sm_90a", 128, torch.bfloat16).name == "fa_sm90"
    assert select_kernel("sm_80", 128, torch.bfloat16).name == "fa_sm80"
    assert select_kernel("sm_100a", 128, torch.bfloat16).name == "fa_sm80"
    assert select_kernel("sm_90a", 256, torch.bfloat16).name == "fa_sm90"
    assert "sm_90a only" in fa_sm90.unsupported(arch="sm_89")
    with pytest.raises(UnsupportedArchError, match="sm_90a"):
        fa_sm90.compile(128, torch.bfloat16, "sm_80")


def test_schedule_sections_hold_whole_gqa_groups_and_about_a_wave():
    # MHA, S = 4096 (32 query blocks) on 132 SMs: one wave is ~4 heads
    assert schedule_section(32, 32, 4096, 128, 2, 32, 132) == 4
    # GQA 8:1: whole groups
    assert schedule_section(64, 8, 4096, 128, 2, 32, 132) % 8 == 0
    # very long keys: the L2 budget caps the section at one group
    assert schedule_section(32, 32, 1 << 20, 128, 2, 8192, 132) == 1


def test_epilogue_divides_o_by_the_headers_activation_scale():
    """fa_sm90 declares CUBRIDGE_KERNEL_ACTIVATION_SCALE (docs/hooks.md), so fp16
    sigmoid headers hand it 2^15 sigmoid: its epilogue must divide that back."""
    source = fa_sm90.source.read_text()
    assert "#define CUBRIDGE_KERNEL_ACTIVATION_SCALE 1" in source
    assert "constexpr float kActivationScale = CUBRIDGE_HOOKS_ACTIVATION_SCALE;" in source
    assert "r.inv[half] = 1.f / kActivationScale;" in source


def test_the_cubin_states_its_panel_widths_and_the_launcher_takes_only_those_it_encodes():
    """The host encodes each TMA box and swizzle from the build's panel widths
    (`cubridge_tile_panels`, read into KernelInfo.panel_cols): 64 columns with the
    128-byte swizzle, 32 with the 64-byte one. Other widths are refused by name."""
    from cubridge.build.attention_op import KernelInfo
    from cubridge.build.errors import LaunchError
    from cubridge.kernels.fa_sm90.launch import SWIZZLE_OF_PANEL, sm90_launch, tensor_map

    source = fa_sm90.source.read_text()
    assert ('extern "C" __constant__ int cubridge_tile_panels[2] = '
            '{QTile::kPanelCols, VTile::kPanelCols};') in source
    assert SWIZZLE_OF_PANEL == {64: 3, 32: 2}  # CU_TENSOR_MAP_SWIZZLE_128B, _64B
    raw = b"".join(x.to_bytes(4, "little") for x in (128, 128, 384, 1000, 0, 96, 2))
    info = KernelInfo.from_bytes(raw, None, (32, 32))
    assert info.head_dim == 96 and info.panel_cols == (32, 32)
    t = torch.empty(1, 1, 8, 96, dtype=torch.bfloat16)
    with pytest.raises(LaunchError, match="16-column panels; the launcher encodes"):
        tensor_map(t, 64, "q", 16)
    # a cubin that lost the constant (an edited source) is refused before any map
    stateless = KernelInfo.from_bytes(raw)
    assert stateless.panel_cols is None
    with pytest.raises(LaunchError, match="states no cubridge_tile_panels"):
        sm90_launch(stateless, "fa_sm90_fwd", t, t, t, t, t, 1.0, [])


def test_launch_refuses_batches_and_kv_heads_past_16_bits():
    """The producer keeps each ring slot's batch and K/V head in 16 bits each: past
    that a launch says so before it builds anything (no GPU needed to get there)."""
    from cubridge.build.errors import LaunchError
    from cubridge.kernels.fa_sm90.launch import sm90_launch

    one = torch.empty(1, 1, 1, 128, dtype=torch.bfloat16)
    for q, k in [(one.expand(1 << 16, 1, 1, 128), one.expand(1 << 16, 1, 1, 128)),
                 (one.expand(1, 1 << 16, 1, 128), one.expand(1, 1 << 16, 1, 128))]:
        with pytest.raises(LaunchError, match="at most 65535"):
            sm90_launch(None, "fa_sm90_fwd", q, k, k, q, q, 1.0, [])


@pytest.mark.parametrize("name, dropped", [
    ("full", ["CUBRIDGE_KEEP_MAX_BY_SUMS"]),
    ("relative_position", ["CUBRIDGE_KEEP_MAX_BY_SUMS", "CUBRIDGE_ROW_INTERVAL_BITS"]),
    ("document_causal", ["CUBRIDGE_KEEP_MAX_BY_SUMS", "CUBRIDGE_KEY_RUN_BITS"]),
])
def test_a_spilling_variant_is_rebuilt_without_each_fast_path_its_header_takes(name, dropped):
    """The spill fallback tries only the fast paths the header turns on (row intervals
    for index masks, key runs for staged document masks), each alone, then all."""
    from cubridge.bench.commands import load_specs
    from cubridge.kernels.fa_sm90.kernel import spill_fallbacks
    from cubridge.lower.hook_header import generate_header
    from cubridge.pipeline.route import choose_path

    header = generate_header(choose_path(load_specs([name])[0], fa_sm90).plan).text
    alone = [{d: 0} for d in dropped]
    assert spill_fallbacks(header) == alone + ([{d: 0 for d in dropped}] if len(dropped) > 1
                                               else [])


@pytest.mark.slow  # nvcc builds
@pytest.mark.nvcc
def test_a_variant_past_the_budget_is_rebuilt_until_a_build_fits(monkeypatch):
    """relative_position (a causal mask with a per-pair bias gather), with the budget
    set just under what its build with every fast path on spills (it fits the real
    budget since its reads at a key share one address a row): the compile's fallback
    rebuilds it without each fast path its header takes (the row max by sums,
    row-interval bits), then without both, in that order, until a build fits the
    budget, and uses the least-spilling build up to there."""
    from cubridge.bench.commands import load_specs
    kernel_module = inspect.getmodule(type(fa_sm90))  # (the library loads kernel.py by path)
    from cubridge.lower.hook_header import generate_header
    from cubridge.pipeline.route import choose_path

    spec = load_specs(["relative_position"])[0]
    header = generate_header(choose_path(spec, fa_sm90).plan).text
    assert "constexpr int kRowIntervals = 1;" in header
    source = fa_sm90.source.read_text()

    def spills(prefix: str | None) -> int:
        kw = {} if prefix is None else {"source": prefix + source}
        compiled = fa_sm90.compile(128, torch.bfloat16, "sm_90a", hooks_header=header, **kw)
        return compiled.resources_of(fa_sm90.metadata.entry).spill_bytes

    sums_off = "#define CUBRIDGE_KEEP_MAX_BY_SUMS 0\n"
    rows_off = "#define CUBRIDGE_ROW_INTERVAL_BITS 0\n"
    # (a patched source is built as given: no fallback; the four builds run together)
    in_order = build_all([functools.partial(spills, prefix)
                          for prefix in ("", sums_off, rows_off, sums_off + rows_off)])
    budget = in_order[0] - 1
    monkeypatch.setattr(kernel_module, "SPILL_BUDGET_BYTES", budget)
    assert min(in_order[1:]) <= budget  # (some fallback fits, or the test says nothing)
    best = in_order[0]
    for build in in_order[1:]:
        if best <= budget:
            break
        best = min(best, build)
    assert spills(None) == best


@pytest.mark.slow  # an nvcc build
@pytest.mark.nvcc
def test_a_register_split_past_the_launch_allocation_does_not_compile():
    """The consumers' setmaxnreg.inc can only take what the producer releases from the
    launch's 168 registers a thread: a producer of 48 (which the register file alone
    would allow) left the consumers waiting forever on an H100
    (bench/results/fa_sm90-ab-2026-11-27-walker/). The kernel refuses it at compile time."""
    source = "#define CUBRIDGE_PRODUCER_REGS 48\n" + fa_sm90.source.read_text()
    with pytest.raises(CompileError, match="claim more registers than the producer releases"):
        fa_sm90.compile(128, torch.bfloat16, "sm_90a", source=source)


@pytest.mark.slow  # an nvcc build
@pytest.mark.nvcc
def test_a_spilling_build_with_three_consumers_is_refused():
    """share_question at block_m 192 / block_n 64 spills in the 32-register producer,
    where ptxas (nvcc 13.0) uses the stack pointer R1 as a general register: on an
    H100 its first spill store faulted (compute-sanitizer: an out-of-range local
    address in the key walk; bench/results/fa_sm90-2026-11-27-three-consumers/). The
    compile refuses such a build with the cause; the same variant at block_m 128 builds."""
    from cubridge.bench.commands import load_specs
    from cubridge.lower.hook_header import generate_header
    from cubridge.pipeline.route import choose_path

    spec = load_specs(["share_question"])[0]
    header = generate_header(choose_path(spec, fa_sm90).plan).text
    three = fa_sm90.config_type(block_m=192, block_n=64, stages=2)
    with pytest.raises(CompileError, match="three consumer warpgroups .* stack pointer"):
        fa_sm90.compile(128, torch.bfloat16, "sm_90a", hooks_header=header, config=three)
    two = fa_sm90.config_type(block_m=128, block_n=64, stages=2)
    built = fa_sm90.compile(128, torch.bfloat16, "sm_90a", hooks_header=header, config=two)
    assert built.cubin()


@pytest.mark.slow  # an nvcc build
@pytest.mark.nvcc
def test_t5_buckets_read_a_distance_table_within_the_register_budget():
    """T5's bucketed bias computed per score (a log, clamps, a gather by the bucket)
    spilled 380 B on fa_sm90, over the library's budget; tabulated over (h, q - k)
    (cubridge/transfer/distance_tables.py) it is one read a score and fits."""
    from cubridge.build.resources import SPILL_BUDGET_BYTES
    from cubridge.lower.hook_header import generate_header
    from cubridge.pipeline.route import choose_path
    from cubridge.spec import load

    spec = load(Path(__file__).resolve().parents[2] / "examples" / "specs" /
                "t5_relative_bias.py")
    header = generate_header(choose_path(spec, fa_sm90).plan)
    assert len(header.distance_tables) == 1
    compiled = fa_sm90.compile(128, torch.bfloat16, "sm_90a", hooks_header=header.text)
    spill = compiled.resources_of(fa_sm90.metadata.entry).spill_bytes
    assert spill <= SPILL_BUDGET_BYTES, f"{spill} B of spills"


# The examples with the most per-score work and staging, per head dim whose tile differs
# from D = 128's. D = 256: 64-key blocks, O staged in the one Q buffer (so the dense mask
# table's staging in O's rows is off); D = 96: 64-byte-swizzled panels of 32 columns, O's
# 48 accumulators a thread (mask pair rows staged in each consumer's own 4 KB of two O
# panels). Both give the pair-read biases a pair tile of their own.
HEAVY_AT_HEAD_DIM = {
    256: ["graph_edge_bias", "pair_bias", "relative_position", "t5_relative_bias",
          "document_causal", "comb_prefix_softcap_sigmoid", "graph_mask"],
    96: ["graph_edge_bias", "pair_bias", "relative_position", "document_causal",
         "comb_prefix_softcap_sigmoid", "graph_mask", "softcap_sliding_window"],
}


@pytest.mark.slow  # nvcc builds, run together
@pytest.mark.nvcc
@pytest.mark.parametrize("d", sorted(HEAVY_AT_HEAD_DIM), ids=lambda d: f"d{d}")
def test_heavy_variants_build_within_the_budget_at_other_head_dims(d):
    """Each builds within the register budget on that head dim's tile, with the wgmma
    pipeline clean."""
    from cubridge.bench.commands import load_specs
    from cubridge.build.resources import SPILL_BUDGET_BYTES
    from cubridge.lower.hook_header import generate_header
    from cubridge.transfer.hooks import plan_hooks

    names = HEAVY_AT_HEAD_DIM[d]
    headers = [generate_header(plan_hooks(spec, table_block=fa_sm90.table_block(d))).text
               for spec in load_specs(names)]
    builds = build_all([functools.partial(fa_sm90.compile, d, torch.bfloat16, "sm_90a",
                                          hooks_header=h) for h in headers])
    for name, compiled in zip(names, builds, strict=True):
        res = compiled.resources_of(fa_sm90.entry)
        assert res.spill_bytes <= SPILL_BUDGET_BYTES, f"D{d} {name}: {res}"
        assert not PTXAS_NOTES.findall(compiled.log), \
            f"D{d} {name}: {PTXAS_NOTES.findall(compiled.log)}"


@pytest.mark.slow  # nvcc builds, run together
@pytest.mark.nvcc
def test_the_mla_pair_builds_clean_and_heavy_variants_fit_it():
    """QK/V head dims 192/128 (MLA), fa_sm90's one built pair: its library builds
    (full, causal; bf16, fp16) are clean, and examples with much per-score work and
    staging build within the register budget on its tile (one Q buffer, O staged in
    it, 128-key blocks). Not the pair-read biases (pair_bias, Graphormer's, T5's):
    their staging tile does not fit beside 208 KB of tiles, and read as written they
    spill (NOTES.md, "QK/V head dims 192/128")."""
    from cubridge.bench.commands import load_specs
    from cubridge.build.resources import SPILL_BUDGET_BYTES
    from cubridge.lower.hook_header import generate_header
    from cubridge.transfer.hooks import plan_hooks

    assert fa_sm90.config(192, 128).q_buffers == 1
    library = [(dtype, causal) for dtype in (torch.bfloat16, torch.float16)
               for causal in (False, True)]
    names = ["relative_position", "document_causal", "comb_prefix_softcap_sigmoid",
             "graph_mask", "softcap_sliding_window", "alibi_causal"]
    headers = [generate_header(plan_hooks(spec, table_block=fa_sm90.table_block(192, 128))).text
               for spec in load_specs(names)]
    builds = build_all(
        [functools.partial(fa_sm90.compile, 192, dtype, "sm_90a", causal=causal,
                           head_dim_v=128) for dtype, causal in library]
        + [functools.partial(fa_sm90.compile, 192, torch.bfloat16, "sm_90a", hooks_header=h,
                             head_dim_v=128) for h in headers])
    for (dtype, causal), compiled in zip(library, builds, strict=False):
        _check_clean(compiled, f"D192/128 {dtype} causal={causal}")
    for name, compiled in zip(names, builds[len(library):], strict=True):
        res = compiled.resources_of(fa_sm90.entry)
        assert res.spill_bytes <= SPILL_BUDGET_BYTES, f"{name}: {res}"
        assert not PTXAS_NOTES.findall(compiled.log), f"{name}: {PTXAS_NOTES.findall(compiled.log)}"


@pytest.mark.slow  # an nvcc build
@pytest.mark.nvcc
def test_patterns_chosen_per_head_build_one_mask_loop_a_case_without_spills():
    """Strided heads beside local ones (`where(h % 2 == 1, (q - k) % 64 == 0, q - k <
    96) | (h < 2) & (k < 8)`): evaluated per score, a choice on the head computes both
    sides and selects, 64 scores a thread (strided_sparse spilled 108 B so,
    bench/results/h100-user-specs-peers-8fa2c6b/compile-only.txt); with mask cases
    (lower/mask_cases.py) the consumers branch once a block into one of four
    straight-line mask loops and it builds without spills, the wgmma pipeline clean."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "transfer"))
    from hook_variants import VARIANTS

    from cubridge.lower.hook_header import generate_header
    from cubridge.transfer.hooks import plan_hooks

    header = generate_header(plan_hooks(VARIANTS["strided_heads"])).text
    assert "constexpr int kMaskCases = 4;" in header
    compiled = fa_sm90.compile(128, torch.bfloat16, "sm_90a", hooks_header=header)
    res = compiled.resources_of(fa_sm90.entry)
    assert res.spill_bytes == 0 and res.stack_frame_bytes == 0, res
    assert not PTXAS_NOTES.findall(compiled.log), PTXAS_NOTES.findall(compiled.log)


@pytest.mark.slow  # nvcc builds
@pytest.mark.nvcc
@pytest.mark.parametrize("name", ["strided_heads", "residue_keys", "sparse_fixed",
                                  "residue_ranges", "unequal_shifted_blocks",
                                  "odd_periods"])
def test_key_set_masks_set_their_bits_from_the_sets_without_spills(name):
    """Masks whose cases allow each row a union of key sets (a window; one residue of
    keys modulo 4, 16, 64 or 256, or 3, 7 and 24: lower/row_interval.py with periods)
    build clean with their bits set from the sets, and the per-pair mask loops those
    replace are gone:
    the cubin is far smaller than the same build with CUBRIDGE_KEY_SET_BITS=0 (which
    for residue_keys spills 24 B)."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "transfer"))
    from hook_variants import VARIANTS

    from cubridge.lower.hook_header import generate_header
    from cubridge.transfer.hooks import plan_hooks

    header = generate_header(plan_hooks(VARIANTS[name])).text
    cases = {"strided_heads": 4, "residue_keys": 2, "sparse_fixed": 1, "residue_ranges": 2,
             "unequal_shifted_blocks": 2,
             "odd_periods": 2}[name]
    assert f"constexpr int kKeySetCases = {cases};" in header
    base = fa_sm90.compile_defines(128, torch.bfloat16)
    sizes = {}
    for on in (1, 0):
        compiled = fa_sm90.compile_source(None, "sm_90a", header,
                                          {**base, "CUBRIDGE_KEY_SET_BITS": on})
        sizes[on] = (Path(compiled.directory) / "kernel.cubin").stat().st_size
        if on:
            res = compiled.resources_of(fa_sm90.entry)
            assert res.spill_bytes == 0 and res.stack_frame_bytes == 0, res
            assert not PTXAS_NOTES.findall(compiled.log), PTXAS_NOTES.findall(compiled.log)
    assert sizes[1] < 0.85 * sizes[0], sizes


@pytest.mark.slow  # nvcc builds
@pytest.mark.nvcc
def test_a_mask_read_by_key_group_is_evaluated_once_a_group_without_spills():
    """random_blocks (BigBird on 32-key blocks: a random-block table read at [h, q // 32,
    k // 32]) read its table per pair and spilled 492 B; evaluated once a 32-key group
    (lower/key_groups.py) it builds clean."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "transfer"))
    from hook_variants import VARIANTS

    from cubridge.lower.hook_header import generate_header
    from cubridge.transfer.hooks import plan_hooks

    header = generate_header(plan_hooks(VARIANTS["random_blocks"])).text
    assert "constexpr int kKeyGroup = 32;" in header
    base = fa_sm90.compile_defines(128, torch.bfloat16)
    spills = {}
    for on in (1, 0):
        compiled = fa_sm90.compile_source(None, "sm_90a", header,
                                          {**base, "CUBRIDGE_KEY_GROUP_BITS": on})
        spills[on] = compiled.resources_of(fa_sm90.entry).spill_bytes
        if on:
            assert not PTXAS_NOTES.findall(compiled.log), PTXAS_NOTES.findall(compiled.log)
    assert spills[1] == 0 and spills[0] > 160, spills


@pytest.mark.slow  # an nvcc build
@pytest.mark.nvcc
def test_a_sin_of_the_score_builds_without_spills_or_a_stack_frame():
    """trig_terms (a sin of the score, a cos of the distance in a table) on the SFU's
    sin.approx.ftz builds clean at D = 128 bf16. __sinf (no ftz: ptxas adds its
    subnormal handling) spilled 16 B here, and libm's sinf keeps a 32-byte stack frame
    for its large-argument reduction (lower/hook_trig.cuh)."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "transfer"))
    from hook_variants import VARIANTS

    from cubridge.lower.hook_header import generate_header
    from cubridge.transfer.hooks import plan_hooks

    header = generate_header(plan_hooks(VARIANTS["trig_terms"])).text
    assert "detail::fast_sin(s)" in header
    _check_clean(fa_sm90.compile(128, torch.bfloat16, "sm_90a", hooks_header=header),
                 "trig_terms")
