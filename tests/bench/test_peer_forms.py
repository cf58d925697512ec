"""Each peer gets a variant in the form its users write it (issue 14, part 5):
0-d aux as Python constants, per-position data as captured tensors, FA4's own
flags; every variant a peer cannot run is refused with the reason the
coverage table expects. CPU only: FA4 and the FLASH backend are not needed."""

from __future__ import annotations

import functools
import math
import re

import pytest
import torch
from bench_specs import TINY, make_spec
from peer_coverage import EXPECTED_UNSUPPORTED

from cubridge.attention import HeadConfig, Shape
from cubridge.bench.commands import BENCHMARK_VARIANTS, load_specs
from cubridge.bench.runner import BenchConfig, build_case
from cubridge.spec.grids import arange, eval_mask, index_grid
from cubridge.spec.mods import bind_mods
from cubridge.verify.peer_forms import (
    FA4Flags,
    Unsupported,
    bound_constants,
    captured_tensors,
    constant_mods,
    fa4_flags,
    query_scaled,
    scalar_constants,
)
from cubridge.verify.peers import PEERS, flex_note

SPECS = {s.name: s for s in load_specs(BENCHMARK_VARIANTS)}
SMALL = HeadConfig("small", 4, 2, 16)


@functools.cache
def case(name: str, seq_len: int = 256):
    """The benchmark's case (inputs, aux, exact pair count and structure) on the CPU."""
    return build_case(SPECS[name], SMALL, seq_len,
                      BenchConfig(seq_lens=(seq_len,), tokens=seq_len, device="cpu"))


def grid(n: int = 40):
    return index_grid(arange(1, "cpu"), arange(4, "cpu"), arange(n, "cpu"), arange(n, "cpu"))


def test_zero_d_aux_become_python_numbers_and_data_stays_tensors():
    aux = {"prefix_len": torch.tensor(64), "log_s": torch.tensor(2.5),
           "slopes": torch.ones(4), "ids": torch.zeros(2, 8, dtype=torch.int64)}
    got = scalar_constants(aux)
    assert got["prefix_len"] == 64 and type(got["prefix_len"]) is int
    assert got["log_s"] == 2.5 and type(got["log_s"]) is float
    assert got["slopes"] is aux["slopes"] and got["ids"] is aux["ids"]


def test_prefix_lm_mods_for_peers_capture_no_tensor_and_mask_the_same():
    c = case("prefix_lm")
    spec_mods = bind_mods(c.spec, c.aux)
    peer_mods = constant_mods(c.spec, c.aux)
    assert captured_tensors(spec_mods.mask_mod) == ["prefix_len"]  # what Flex FLASH refused
    assert captured_tensors(peer_mods.mask_mod) == []
    assert bound_constants(c.spec, c.aux) == {"prefix_len": 64}
    assert torch.equal(eval_mask(peer_mods.mask_mod, *grid(300)),
                       eval_mask(spec_mods.mask_mod, *grid(300)))
    assert c.constant_mods().mask_mod is not None


def test_relative_position_keeps_its_table_and_takes_the_offset_as_a_constant():
    c = case("relative_position")
    mods = constant_mods(c.spec, c.aux)
    assert captured_tensors(mods.score_mod) == ["rel_table"]
    assert bound_constants(c.spec, c.aux) == {"rel_offset": 255}
    s = torch.randn(1, 4, 40, 40)
    assert torch.equal(mods.score_mod(s, *grid()), bind_mods(c.spec, c.aux).score_mod(s, *grid()))
    assert flex_note(c, True, mods) == "BlockMask; rel_offset=255; captures rel_table"


def test_per_position_data_stays_captured():
    c = case("document_causal")
    assert captured_tensors(constant_mods(c.spec, c.aux).mask_mod) == ["kv_doc", "q_doc"]
    assert bound_constants(c.spec, c.aux) == {}


def test_a_mod_that_needs_its_zero_d_aux_as_a_tensor_keeps_it():
    spec = make_spec("odd", lambda b, h, q, k, *, n: (q >= k) | (k < n.to(torch.int32)))
    aux = {"n": torch.tensor(3)}
    mods = constant_mods(spec, aux)
    assert captured_tensors(mods.mask_mod) == ["n"]
    assert bool(mods.mask_mod(*grid(8))[0, 0, 0, 2])


@pytest.mark.parametrize("name,seq_len,flags", [
    ("full", 256, FA4Flags(causal=False)),
    ("causal", 256, FA4Flags(causal=True)),
    ("sliding_window_1024", 2048, FA4Flags(causal=True, window_size=(1023, 0))),
    # At S = 1024 a window of 1024 keys is the causal mask itself.
    ("sliding_window_1024", 1024, FA4Flags(causal=True)),
    ("softcap_causal", 256, FA4Flags(causal=True, softcap=30.0)),
])
def test_fa4_flags_express_causal_windows_and_softcap(name, seq_len, flags):
    c = case(name, seq_len)
    got = fa4_flags(c.spec, c.shape, c.structure, c.band, c.constant_mods().score_mod)
    assert got == flags
    assert got.kwargs() == {"causal": flags.causal, "window_size": flags.window_size,
                            "softcap": flags.softcap}


def band_case(lo: int, hi: int, seq_len: int = 256):
    """The benchmark's case of a mask that is exactly the band lo <= q - k <= hi."""
    spec = make_spec(f"band_{lo}_{hi}", lambda b, h, q, k: (q - k >= lo) & (q - k <= hi))
    return build_case(spec, SMALL, seq_len,
                      BenchConfig(seq_lens=(seq_len,), tokens=seq_len, device="cpu"))


def test_fa4_flags_express_a_band_around_the_diagonal_as_a_local_window():
    c = band_case(-40, 63)
    assert (c.structure, c.band) == ("band", (-40, 63))
    got = fa4_flags(c.spec, c.shape, c.structure, c.band, None)
    assert got == FA4Flags(causal=False, window_size=(63, 40))
    assert got.note == "window_size=(63, 40)"
    # FA4's window keeps keys q - left ... q + right: the same pairs as the band
    q, k = torch.arange(256)[:, None], torch.arange(256)[None, :]
    left, right = got.window_size
    assert torch.equal((k >= q - left) & (k <= q + right), (q - k >= -40) & (q - k <= 63))


def test_fa4_flags_refuse_a_band_off_the_diagonal_or_at_sq_ne_sk():
    c = band_case(8, 63)  # keys 8 ... 63 positions back: no query sees itself
    with pytest.raises(Unsupported, match="mask is band"):
        fa4_flags(c.spec, c.shape, c.structure, c.band, None)
    with pytest.raises(Unsupported, match="bottom right"):
        fa4_flags(c.spec, Shape(1, 4, 2, 128, 256, 16), "band", (-40, 63), None)


def test_fa4_flags_refuse_what_they_cannot_say_and_say_why():
    c = case("causal")
    wide = Shape(1, 4, 2, 128, 256, 16)
    with pytest.raises(Unsupported, match="bottom right"):
        fa4_flags(c.spec, wide, "causal", None, None)
    with pytest.raises(Unsupported, match="structure is unknown"):
        fa4_flags(c.spec, c.shape, None, None, None)


TEMPERATURE = torch.tensor([0.5, 1.5, 2.0, 0.25])  # one per head of SMALL
Q_SHAPE = Shape(2, 4, 2, 300, 300, 16)


def test_a_per_head_temperature_is_q_scaled_per_head():
    form = query_scaled(lambda s, b, h, q, k: s * TEMPERATURE[h], Q_SHAPE)
    assert form is not None and form.rest is None and form.varies == "per head"
    assert form.factor.shape == (1, 4, 1, 1)
    assert torch.equal(form.factor.flatten(), TEMPERATURE)
    q = torch.randn(2, 4, 300, 16, dtype=torch.bfloat16)
    assert torch.equal(form.scale(q), (q.float() * TEMPERATURE.view(1, 4, 1, 1)).bfloat16())
    assert form.note == "Q scaled per head (once, untimed)"


def test_a_length_dependent_row_scale_with_a_bias_keeps_the_bias_as_the_rest():
    slopes = torch.tensor([0.5, 0.25, 0.125, 0.0625])

    def mod(s, b, h, q, k):  # SSMax's factor, and ALiBi
        return s * (TEMPERATURE[h] * torch.log(q + 1.0)) + slopes[h] * (k - q)

    form = query_scaled(mod, Q_SHAPE)
    assert form is not None and form.varies == "per head and query row"
    assert form.factor.shape == (1, 4, 300, 1)
    assert float(form.factor[0, 2, 99, 0]) == pytest.approx(2.0 * math.log(100.0))
    b, h, q, k = grid(40)
    s = torch.randn(1, 4, 40, 40, dtype=torch.float64)
    assert torch.allclose(form.rest(s, b, h, q, k), s + slopes[h] * (k - q))


@pytest.mark.parametrize("mod", [
    lambda s, b, h, q, k: s + 0.5 * (k - q),  # additive: the bias paths take it as it is
    lambda s, b, h, q, k: 30.0 * torch.tanh(s / 30.0),  # not linear in s
    lambda s, b, h, q, k: s * (1.0 + k / 100.0),  # the factor changes with the key
    lambda s, b, h, q, k: s * torch.where(q == 150, 2.0, 1.0) * (1.0 + (k == 7) * (q == 150)),
    lambda s, b, h, q, k: s * torch.log(q + 0.0),  # -inf on row 0
], ids=["additive", "softcap", "per-key", "per-key-in-a-middle-row", "non-finite"])
def test_what_is_not_q_scaled_is_refused(mod):
    assert query_scaled(mod, Q_SHAPE) is None


@pytest.mark.parametrize("peer", [pytest.param("sdpa", marks=pytest.mark.slow),
                                  pytest.param("flex_triton", marks=pytest.mark.slow),
                                  "flex_flash", "fa4"])
@pytest.mark.parametrize("name", BENCHMARK_VARIANTS)
def test_every_gap_is_one_the_coverage_table_expects(peer, name):
    """A peer refuses exactly the variants the table lists, with its reason;
    the rest get past the peer's own analysis (FA4 and Flex FLASH then need
    flash-attn-4, absent here: their check stops at the flags and normaliser).
    FA4 at S = 2048: the benchmark's shortest length where a 1024-key window is
    no longer the causal mask itself."""
    c = case(name, 2048 if peer == "fa4" else 256)
    expected = EXPECTED_UNSUPPORTED[peer].get(name)
    if peer == "fa4":
        run = lambda: fa4_flags(c.spec, c.shape, c.structure, c.band,  # noqa: E731
                                c.constant_mods().score_mod)
    elif peer == "flex_flash":
        run = lambda: PEERS["flex_triton"].check(c.spec) and _raise(  # noqa: E731
            PEERS["flex_triton"].check(c.spec))
    else:
        run = lambda: PEERS[peer].prepare(c)  # noqa: E731
    if expected is None:
        run()
        return
    with pytest.raises(Unsupported, match=re.escape(expected)):
        run()


def _raise(why: str) -> None:
    raise Unsupported(why)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize("name", ["prefix_lm", "relative_position"])
def test_flex_with_constants_verifies(name):
    """FlexAttention's eager path (CPU) with the constants-bound mods gives the
    spec's answer: the form the FLASH backend gets is right."""
    from cubridge.bench.check import check_output, tolerance_for
    from cubridge.bench.oracle import float64_reference
    from cubridge.verify.peers import make_flex_preparer

    c = build_case(SPECS[name], TINY, 128, BenchConfig(seq_lens=(128,), tokens=128,
                                                       device="cpu"))
    prepared = make_flex_preparer("TRITON", compiled=False)(c)
    ref = float64_reference(c.spec, c.q, c.k, c.v, c.aux, c.mods, True).out
    check = check_output(prepared.to_standard(prepared.run()), ref, c.v,
                         tolerance_for(c.spec, c.dtype))
    assert check.ok, check.reason
    assert "BlockMask" in prepared.note


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_flex_reads_t5_buckets_from_a_distance_table_and_verifies():
    """T5's bucketed bias, which Flex runs slowly inline and its FLASH backend does
    not compile, reaches the Flex peers as a table read built once per shape (what
    cubridge's launcher builds): same answer as the spec's reference."""
    from pathlib import Path

    from cubridge.bench.check import check_output, tolerance_for
    from cubridge.bench.distance_mods import distance_table_mods
    from cubridge.bench.oracle import float64_reference
    from cubridge.spec import load
    from cubridge.verify.peers import make_flex_preparer

    spec = load(Path(__file__).resolve().parents[2] / "examples" / "specs" /
                "t5_relative_bias.py")
    c = build_case(spec, TINY, 160, BenchConfig(seq_lens=(160,), tokens=160, device="cpu"))
    tabled = distance_table_mods(spec, c.aux, c.shape, c.device)
    assert tabled is not None and distance_table_mods(SPECS["relative_position"], {}, c.shape,
                                                      c.device) is None
    b, h, q, k = grid(40)
    score = torch.zeros(1, 1, 1, 1)
    assert torch.equal(tabled(score, b, h, q, k), c.mods.score_mod(score, b, h, q, k))
    prepared = make_flex_preparer("TRITON", compiled=False)(c)
    assert "score term of (h, q - k) as a table" in prepared.note
    assert "__distance_table" not in prepared.note
    assert c.precomputed_score_mod is not None
    ref = float64_reference(c.spec, c.q, c.k, c.v, c.aux, c.mods, True).out
    check = check_output(prepared.to_standard(prepared.run()), ref, c.v,
                         tolerance_for(c.spec, c.dtype))
    assert check.ok, check.reason
