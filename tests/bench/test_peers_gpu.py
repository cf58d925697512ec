"""Every peer on every docs/benchmark.md variant on the GPU, in the form the
benchmark gives it (issue 14, part 5): each runs and matches the float64
reference, or refuses with the reason the coverage table expects. A peer that
raises anything else fails here, so it cannot reach a report as an error.

FA4 and Flex FLASH need flash-attn-4 (with the CuTe DSL) on the machine;
without it their cases are skipped, saying so.

    python -m pytest -m gpu tests/bench/test_peers_gpu.py
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from peer_coverage import EXPECTED_UNSUPPORTED

from cubridge.attention import HeadConfig
from cubridge.bench.check import check_output, tolerance_for
from cubridge.bench.commands import BENCHMARK_VARIANTS, load_specs
from cubridge.bench.oracle import float64_reference, mods_agree_with_reference
from cubridge.bench.runner import BenchConfig, build_case
from cubridge.spec import load
from cubridge.verify.peers import PEERS, Unsupported, flash_attn_cute_available

pytestmark = pytest.mark.gpu

# GQA 4:1 at D = 128, one sequence of 2048: the shortest benchmark length where
# a 1024-key window is not the causal mask itself.
GQA = HeadConfig("gqa4_d128", 8, 2, 128)
SEQ = 2048
NEEDS_FA4 = {"fa4", "flex_flash"}
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def specs():
    return {s.name: s for s in load_specs(BENCHMARK_VARIANTS)}


@pytest.mark.parametrize("peer", ["sdpa", "flex_triton", "flex_flash", "fa4"])
@pytest.mark.parametrize("name", BENCHMARK_VARIANTS)
def test_peer_runs_the_variant_or_names_the_gap(specs, name, peer):
    case = build_case(specs[name], GQA, SEQ, BenchConfig(seq_lens=(SEQ,), tokens=SEQ))
    expected = EXPECTED_UNSUPPORTED[peer].get(name)
    if expected is not None:
        with pytest.raises(Unsupported, match=re.escape(expected)):
            PEERS[peer].prepare(case)
        return
    if peer in NEEDS_FA4 and not flash_attn_cute_available():
        pytest.skip("flash-attn-4 (flash_attn.cute) is not installed")
    prepared = PEERS[peer].prepare(case)
    out = prepared.to_standard(prepared.run())
    torch.cuda.synchronize()
    agree, why = mods_agree_with_reference(case.spec, case.shape, case.device)
    assert agree, why
    ref = float64_reference(case.spec, case.q, case.k, case.v, case.aux, case.mods, agree).out
    check = check_output(out, ref, case.v, tolerance_for(case.spec, case.dtype))
    assert check.ok, f"{peer} on {name} ({prepared.note}): {check.reason}"


def test_flex_flash_runs_what_its_generator_lacks_in_its_users_form():
    """A NATTEN-style clamp and a loop's constant subscript stop Flex FLASH's
    CuTe-DSL generator as written; the peer runs them rewritten
    (cubridge.verify.flash_forms), says so, and matches the reference."""
    if not flash_attn_cute_available():
        pytest.skip("flash-attn-4 (flash_attn.cute) is not installed")
    from cubridge.spec import from_mods

    g = torch.Generator().manual_seed(0)
    types = torch.randint(0, 3, (1, SEQ, SEQ, 2), generator=g).cuda()
    table = torch.randn(GQA.hq, 3, generator=g).cuda()

    def window_2d(b, h, q_idx, kv_idx):  # a 32-wide canvas, the window clamped inside it
        row, dy = (q_idx // 32).clamp(4, SEQ // 32 - 5), kv_idx // 32
        dx = kv_idx % 32 - q_idx % 32
        return (dy >= row - 4) & (dy <= row + 4) & (dx >= -8) & (dx <= 8)

    def edge_terms(score, b, h, q_idx, kv_idx):
        total = 0.0
        for n in range(2):
            total = total + table[h, types[b, q_idx, kv_idx, n]]
        return score + total / torch.clamp(types[b, q_idx, kv_idx, 0], min=1)

    spec = from_mods(edge_terms, window_2d, name="clamped", configs=[GQA], seq_lens=[SEQ])
    case = build_case(spec, GQA, SEQ, BenchConfig(seq_lens=(SEQ,), tokens=SEQ))
    prepared = PEERS["flex_flash"].prepare(case)
    assert "mods written for it" in prepared.note, prepared.note
    out = prepared.to_standard(prepared.run())
    agree, why = mods_agree_with_reference(case.spec, case.shape, case.device)
    assert agree, why
    ref = float64_reference(case.spec, case.q, case.k, case.v, case.aux, case.mods, agree).out
    check = check_output(out, ref, case.v, tolerance_for(case.spec, case.dtype))
    assert check.ok, check.reason


def test_flex_flash_runs_a_mod_that_makes_a_tensor_with_the_number_it_holds():
    """local_where_consts's score_mod adds torch.where(..., torch.tensor(0.5), -up): as
    written Flex FLASH's output was wrong with no error (relative error 0.42,
    bench/results/h100-trace-ops-row-choices-b01e7c4/). The peer writes 0.5 and -0.5
    as a user of Flex FLASH does (flash_forms.with_number_constants), says so, and
    matches the reference."""
    if not flash_attn_cute_available():
        pytest.skip("flash-attn-4 (flash_attn.cute) is not installed")
    spec = load(ROOT / "bench/results/prepared-trace-ops/specs/local_where_consts.py")
    case = build_case(spec, GQA, SEQ, BenchConfig(seq_lens=(SEQ,), tokens=SEQ))
    prepared = PEERS["flex_flash"].prepare(case)
    assert "score_mod's tensors made in it as Python numbers (0.5, -0.5)" in prepared.note, \
        prepared.note
    out = prepared.to_standard(prepared.run())
    agree, why = mods_agree_with_reference(case.spec, case.shape, case.device)
    assert agree, why
    ref = float64_reference(case.spec, case.q, case.k, case.v, case.aux, case.mods, agree).out
    check = check_output(out, ref, case.v, tolerance_for(case.spec, case.dtype))
    assert check.ok, f"{prepared.note}: {check.reason}"
