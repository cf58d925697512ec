"""Counting the work of specs without a mask_mod: the allowed pairs are read from
the reference (cubridge.bench.probe), FLOPs may be declared by the spec, and every
result says how it was counted (cubridge.bench.work)."""

from __future__ import annotations

import json

import pytest
import torch
from bench_specs import causal_mask, make_spec

from cubridge.attention import Shape
from cubridge.bench.flops import count_allowed_pairs
from cubridge.bench.peers import peer_impls
from cubridge.bench.probe import ProbeError, allowed_pairs_of_reference, probe_allowed_pairs
from cubridge.bench.report import render_markdown, write_json
from cubridge.bench.runner import BenchConfig, run_bench
from cubridge.bench.timing import wallclock_timer
from cubridge.bench.work import count_work
from cubridge.spec import load
from cubridge.spec.errors import SpecError
from cubridge.spec.mods import bind_mods

CAUSAL_SPEC = '''"""Causal attention{title}."""
from cubridge.attention import HeadConfig
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "{name}"
CONFIGS = [HeadConfig("tiny", 4, 2, 16)]
SEQ_LENS = [64]
DTYPES = ["bf16"]


def reference(q, k, v):
    q_idx, kv_idx = positions(q, k)
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), q_idx >= kv_idx, v)
'''
WITH_MASK = '''

def mask_mod(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx
'''


def _spec_files(tmp_path):
    bare = tmp_path / "causal_bare.py"
    bare.write_text(CAUSAL_SPEC.format(title=", no mods", name="causal_bare"))
    masked = tmp_path / "causal_masked.py"
    masked.write_text(CAUSAL_SPEC.format(title="", name="causal_masked") + WITH_MASK)
    return load(bare), load(masked)


def _use_short_probes(monkeypatch):
    """Probe lengths of 130 and 167 (the default, past 1100, costs seconds per spec)."""
    monkeypatch.setattr("cubridge.bench.probe.probe_lengths", lambda spec: (130, 167))


@pytest.fixture
def short_probes(monkeypatch):
    _use_short_probes(monkeypatch)


def _work(spec, shape, seed=0):
    aux = {}
    return count_work(spec, bind_mods(spec, aux), shape, "cpu", seed=seed)


@pytest.mark.parametrize("seq_len,default_lengths", [
    (1024, False), pytest.param(1024, True, marks=pytest.mark.slow),
    pytest.param(8192, True, marks=pytest.mark.slow)])
def test_causal_reference_without_mods_counts_as_mask_mod_causal(tmp_path, monkeypatch,
                                                                 seq_len, default_lengths):
    if not default_lengths:
        _use_short_probes(monkeypatch)
    bare, masked = _spec_files(tmp_path)
    assert not bare.mods_describe_reference  # the loader saw the reference does more
    shape = Shape(16384 // seq_len, 4, 2, seq_len, seq_len, 16)
    got, want = _work(bare, shape), _work(masked, shape)
    assert got.stats.allowed_pairs == want.stats.allowed_pairs == \
        shape.b * shape.hq * seq_len * (seq_len + 1) // 2
    assert got.flops == want.flops
    assert got.stats.structure == want.stats.structure == "causal"
    assert "mask_mod evaluated on every pair" in want.counting
    assert "read from the reference's weights" in got.counting
    assert "q >= k (causal)" in got.counting


def test_a_mask_written_in_score_mod_counts_the_pairs_it_leaves(tmp_path):
    # FlexAttention's example form: our kernel skips the -inf pairs (the plan lifts
    # the condition into the mask), so they must not count as work done
    path = tmp_path / "causal_in_score_mod.py"
    path.write_text(CAUSAL_SPEC.format(title=", masked in score_mod", name="causal_in_score_mod")
                    + "\n\nimport torch\n\n\ndef score_mod(score, b, h, q_idx, kv_idx):\n"
                    "    return torch.where(q_idx >= kv_idx, torch.log(score), -float('inf'))\n")
    spec = load(path)
    shape = Shape(2, 4, 2, 64, 64, 16)
    got = _work(spec, shape)
    assert got.stats.allowed_pairs == shape.b * shape.hq * 64 * 65 // 2  # (log(0) is -inf)
    assert "those score_mod does not set to -inf" in got.counting
    # a -inf on a condition of the score is not a mask: every pair counts
    data = make_spec("relu_like", None, lambda s, b, h, q, k: torch.where(s > 0, s, -float("inf")))
    assert _work(data, shape).stats.allowed_pairs == shape.b * shape.hq * 64 * 64


def test_window_and_relu_references_are_read_as_their_band():
    window = lambda b, h, q, k: (q >= k) & (q - k < 40)
    for normalizer in ("softmax", "relu"):  # relu: a negative score would hide a pair
        spec = make_spec("win", reference=make_spec("m", window, normalizer=normalizer).reference)
        spec = type(spec)(**{**spec.__dict__, "mods_describe_reference": False,
                             "normalizer": normalizer})
        shape = Shape(2, 4, 2, 3000, 3000, 16)
        probe = probe_allowed_pairs(spec, shape, "cpu", lengths=(100, 137))
        want = count_allowed_pairs(window, shape, "cpu")
        assert probe.stats.allowed_pairs == want.allowed_pairs
        assert probe.stats.structure == "window40"
        assert "0 <= q - k <= 39" in probe.counting


def test_general_structure_is_read_at_the_benchmark_shape():
    prefix = lambda b, h, q, k: (q >= k) | (k < q.new_tensor(5))
    spec = make_spec("prefix", reference=make_spec("m", prefix).reference)
    spec = type(spec)(**{**spec.__dict__, "mods_describe_reference": False})
    shape = Shape(3, 4, 2, 70, 70, 16)
    probe = probe_allowed_pairs(spec, shape, "cpu", lengths=(40, 77))
    assert probe.stats.allowed_pairs == count_allowed_pairs(prefix, shape, "cpu").allowed_pairs
    assert probe.stats.structure == "general"
    assert "at the benchmark shape" in probe.counting


def test_weights_read_are_exactly_the_allowed_pairs():
    per_head = lambda b, h, q, k: (q >= k) & (q - k <= 3 * h)
    spec = make_spec("per_head", reference=make_spec("m", per_head).reference)
    shape = Shape(2, 4, 2, 37, 41, 16)
    allowed = allowed_pairs_of_reference(spec, shape, "cpu")
    b, h, q, k = torch.meshgrid(*(torch.arange(n) for n in (2, 4, 37, 41)), indexing="ij")
    assert torch.equal(allowed, per_head(b, h, q, k))


def test_a_reference_not_linear_in_v_counts_every_pair_and_says_why(short_probes):
    base = make_spec("m", causal_mask).reference

    def normed(q, k, v):  # a norm of the output (a sub-layer norm) breaks out = W v
        out = base(q, k, v)
        return out - out.mean(dim=-1, keepdim=True)

    spec = make_spec("normed", reference=normed)
    spec = type(spec)(**{**spec.__dict__, "mods_describe_reference": False})
    with pytest.raises(ProbeError, match="not linear in v"):
        probe_allowed_pairs(spec, Shape(1, 2, 1, 64, 64, 16), "cpu", lengths=(40, 77))
    work = _work(spec, Shape(1, 2, 1, 64, 64, 16))
    assert work.stats.allowed_pairs == 2 * 64 * 64
    assert "upper bound" in work.counting and "not linear in v" in work.counting
    assert "declare `flops`" in work.counting


def test_a_spec_declares_its_flops(tmp_path):
    path = tmp_path / "diff_like.py"
    path.write_text(CAUSAL_SPEC.format(title="", name="diff_like") + WITH_MASK + '''

def flops(shape, allowed_pairs):
    return 2.0 * allowed_pairs * (shape.d + 2 * shape.head_dim_v)
''')
    spec = load(path)
    shape = Shape(2, 4, 2, 100, 100, 16)
    work = _work(spec, shape)
    assert work.flops == pytest.approx(1.5 * work.stats.flops)
    assert "the spec's flops(shape, allowed_pairs)" in work.counting


def test_declared_flops_are_checked(tmp_path, short_probes):
    path = tmp_path / "bad_flops.py"
    path.write_text(CAUSAL_SPEC.format(title="", name="bad_flops") + '''

def flops(shape, allowed_pairs):
    return "lots"
''')
    spec = load(path)
    with pytest.raises(SpecError, match="returned 'lots'") as err:
        _work(spec, Shape(1, 4, 2, 64, 64, 16))
    assert "bad_flops.py" in str(err.value)
    path.write_text(CAUSAL_SPEC.format(title="", name="bad_flops") + '''

def flops(shape):
    return 1.0
''')
    with pytest.raises(SpecError, match=r"flops\(shape\) takes 1 positional"):
        load(path)


def test_reports_state_the_counting(tmp_path, short_probes):
    bare, masked = _spec_files(tmp_path)
    config = BenchConfig(seq_lens=(128,), configs=("tiny",), tokens=256, device="cpu")
    results = run_bench([bare, masked], peer_impls(["eager"]), config,
                        wallclock_timer(repeats=1), progress=lambda _: None)
    by_name = {r.variant: r for r in results}
    assert by_name["causal_bare"].allowed_pairs == by_name["causal_masked"].allowed_pairs
    assert by_name["causal_bare"].structure == "causal"
    text = render_markdown({"device": "cpu", "date": "d", "commit": "c", "command": "x",
                            "torch": "t", "cuda": "none", "triton": "-", "flash_attn_4": "-",
                            "python": "3", "timing": "wall"}, results)
    assert "## Counting" in text
    assert "causal_bare: pairs: read from the reference's weights" in text
    assert "causal_masked: pairs: the spec's mask_mod evaluated on every pair" in text
    write_json(tmp_path / "r.json", {}, results)
    saved = json.loads((tmp_path / "r.json").read_text())["results"]
    assert all(r["counting"].startswith("pairs: ") for r in saved)


def test_a_band_seen_short_of_the_specs_constants_is_not_extrapolated(tmp_path):
    """Window 200 probed at lengths 100 and 137 looks causal there; the spec's
    constant 200 says those lengths prove nothing, so the pairs are read at the
    benchmark shape instead."""
    path = tmp_path / "window200.py"
    path.write_text(CAUSAL_SPEC.format(title="", name="window200").replace(
        "q_idx >= kv_idx, v)", "(q_idx >= kv_idx) & (q_idx - kv_idx < 200), v)"))
    spec = load(path)
    shape = Shape(1, 4, 2, 500, 500, 16)
    probe = probe_allowed_pairs(spec, shape, "cpu", lengths=(100, 137))
    window = lambda b, h, q, k: (q >= k) & (q - k < 200)
    assert probe.stats.allowed_pairs == count_allowed_pairs(window, shape, "cpu").allowed_pairs
    assert probe.stats.structure == "window200" and "at the benchmark shape" in probe.counting


RESULTS = __import__("pathlib").Path(__file__).resolve().parents[2] / "bench" / "results"


def test_a_floor_mask_counts_the_pairs_above_the_floor_and_gives_flex_its_block_mask():
    """Hugging Face's finfo.min mask (transfer.score_masks.split_floor_mask) counts the
    pairs it leaves above the floor, like a -inf mask; where every row keeps a key the
    Flex peers get its BlockMask (the same output on every row) and the band shows."""
    spec = load(RESULTS / "prepared-trace-ops" / "specs" / "finfo_min_causal.py")
    shape = Shape(1, 4, 4, 200, 200, 64)
    aux = spec.make_aux(shape, torch.Generator().manual_seed(0), torch.device("cpu"))
    work = count_work(spec, bind_mods(spec, aux), shape, "cpu")
    causal = count_allowed_pairs(lambda b, h, q, k: q >= k, shape, "cpu")
    assert work.stats.allowed_pairs == causal.allowed_pairs < shape.b * shape.hq * 200 * 200
    assert work.stats.structure == "causal" and work.stats.empty_rows == 0
    assert "floor value" in work.counting and work.score_mask_mod is not None


def test_a_floor_mask_that_leaves_rows_no_key_keeps_its_score_mod_for_the_peers():
    """Rows past Sk + 15 keep no key and weigh every key alike: no BlockMask (it would
    give them 0) and no band, but the pairs counted are still those above the floor."""
    spec = load(RESULTS / "prepared-next-device" / "specs" / "finfo_window_empty_rows.py")
    shape = Shape(1, 2, 2, 300, 200, 64)
    work = count_work(spec, bind_mods(spec, {}), shape, "cpu")
    window = count_allowed_pairs(lambda b, h, q, k: (q - k >= 0) & (q - k < 16), shape, "cpu")
    assert work.stats.allowed_pairs == window.allowed_pairs
    assert work.stats.empty_rows == window.empty_rows == 2 * 85  # (rows 215 .. 299)
    assert work.stats.band is None and work.score_mask_mod is None
    assert "170 rows keep no key" in work.counting


F32_MIN = torch.finfo(torch.float32).min


def test_under_sigmoid_a_floor_mask_counts_as_a_mask_beside_a_mask_mod_too():
    """Under sigmoid a pair at finfo.min weighs nothing, as at -inf, and cubridge lifts
    the condition (beside a mask_mod too): the pairs counted are those above the floor
    that the mask_mod allows, else the kernel would be credited with pairs it skips.
    Under softmax beside a mask_mod the floor is not lifted and counts as written."""
    shape = Shape(1, 2, 2, 128, 128, 64)
    window = lambda s, b, h, q, k: torch.where(q - k < 16, s, F32_MIN)  # noqa: E731
    causal = lambda b, h, q, k: q >= k  # noqa: E731
    band = count_allowed_pairs(lambda b, h, q, k: (q >= k) & (q - k < 16), shape, "cpu")
    alone = make_spec("floor_sigmoid", None, lambda s, b, h, q, k: torch.where(
        (q >= k) & (q - k < 16), s, F32_MIN), "sigmoid")
    work = count_work(alone, bind_mods(alone, {}), shape, "cpu")
    assert work.stats.allowed_pairs == band.allowed_pairs and "under sigmoid" in work.counting
    beside = make_spec("floor_sigmoid_beside", causal, window, "sigmoid")
    work = count_work(beside, bind_mods(beside, {}), shape, "cpu")
    assert work.stats.allowed_pairs == band.allowed_pairs
    assert "mask_mod allows and its score_mod does not set to its floor" in work.counting
    minus_inf = make_spec("inf_beside", causal, lambda s, b, h, q, k: torch.where(
        q - k < 16, s, -float("inf")))
    work = count_work(minus_inf, bind_mods(minus_inf, {}), shape, "cpu")
    assert work.stats.allowed_pairs == band.allowed_pairs and "-inf" in work.counting
    softmax = make_spec("floor_softmax_beside", causal, window)
    work = count_work(softmax, bind_mods(softmax, {}), shape, "cpu")
    assert work.stats.allowed_pairs == count_allowed_pairs(causal, shape, "cpu").allowed_pairs
