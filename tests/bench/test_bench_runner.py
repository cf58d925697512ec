"""The benchmark loop on CPU: verification before timing, failures recorded,
the run going on. (Wall-clock timing stands in for do_bench: test only.)"""

from __future__ import annotations

import pytest
import torch
from bench_specs import make_spec

from cubridge.bench.peers import Impl, Prepared, peer_impls
from cubridge.bench.runner import BenchConfig, run_bench
from cubridge.bench.timing import wallclock_timer

CPU = BenchConfig(seq_lens=(32, 64), configs=("tiny", "tiny_mha"), tokens=128, device="cpu")


class CountingTimer:
    """Wall-clock timer that remembers which impls it timed."""

    def __init__(self) -> None:
        self.timed: list[str] = []
        self.inner = wallclock_timer(repeats=2)

    def for_impl(self, name: str, prepare):
        def wrapped(case):
            prepared = prepare(case)
            run = prepared.run

            def timed_run():
                return run()

            timed_run.impl = name
            prepared.run = timed_run
            return prepared

        return Impl(name, wrapped)

    def __call__(self, fn):
        self.timed.append(fn.impl)
        return self.inner(fn)


def off_by_one_causal(case) -> Prepared:
    """q > k instead of q >= k: a plausible kernel bug."""
    q, k, v = case.q, case.k, case.v
    s = case.shape
    mask = torch.ones(s.sq, s.sk, dtype=torch.bool).tril(-1)
    mask[0, 0] = True  # keep row 0 defined so only the bug, not a NaN, is caught

    def run():
        return torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, scale=case.scale, enable_gqa=True)

    return Prepared(run)


@pytest.mark.slow
def test_wrong_impl_is_flagged_and_never_timed(specs):
    timer = CountingTimer()
    impls = [timer.for_impl("sdpa", peer_impls(["sdpa"])[0].prepare),
             timer.for_impl("buggy", off_by_one_causal)]
    results = run_bench([specs["causal"]], impls, CPU, timer, progress=lambda _: None)
    assert len(results) == 4  # 2 configs x 2 lengths
    for r in results:
        by = {i.impl: i for i in r.impls}
        assert by["sdpa"].status == "ok" and by["sdpa"].tflops > 0
        assert by["buggy"].status == "wrong"
        assert by["buggy"].time_ms is None and by["buggy"].tflops is None
        assert "failed verification" in by["buggy"].reason
        assert by["buggy"].rel_err > 1e-2
    assert timer.timed == ["sdpa"] * 4


def test_results_carry_counts_and_tflops(specs):
    results = run_bench([specs["document_causal"]], peer_impls(["eager", "sdpa"]),
                        BenchConfig(seq_lens=(64,), configs=("tiny",), tokens=128,
                                    device="cpu"), wallclock_timer(2), progress=lambda _: None)
    (r,) = results
    assert r.batch == 2 and r.hq == 4 and r.hk == 2 and r.structure == "general"
    assert 0 < r.allowed_pairs < r.batch * r.hq * 64 * 64
    assert r.flops == 4 * r.allowed_pairs * r.d
    for i in r.impls:
        assert i.status == "ok"
        assert i.tflops == pytest.approx(r.flops / (i.time_ms * 1e-3) / 1e12)
    assert r.reference.startswith("mods, float64")


def test_failures_are_recorded_and_the_run_goes_on(specs):
    def raises(case):
        raise RuntimeError("kernel launch failed\nsecond line")

    def oom(case):
        def run():
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 40 GiB")
        return Prepared(run)

    impls = [Impl("raises", raises), Impl("oom", oom), *peer_impls(["sdpa", "fa4"])]
    results = run_bench([specs["sigmoid_causal"], specs["causal"]], impls,
                        BenchConfig(seq_lens=(32,), configs=("tiny",), tokens=64, device="cpu"),
                        wallclock_timer(2), progress=lambda _: None)
    assert [r.variant for r in results] == ["sigmoid_causal", "causal"]
    for r in results:
        by = {i.impl: i for i in r.impls}
        assert by["raises"].status == "error"
        assert by["raises"].reason == "RuntimeError: kernel launch failed / second line"
        assert by["oom"].status == "oom"
        assert by["fa4"].status == "unsupported"
    assert {i.impl: i.status for i in results[0].impls}["sdpa"] == "unsupported"
    assert {i.impl: i.status for i in results[1].impls}["sdpa"] == "ok"


def test_no_reference_means_nothing_is_timed(specs):
    def broken_reference(q, k, v):
        raise ValueError("reference exploded")

    spec = make_spec("broken", reference=broken_reference)
    timer = CountingTimer()
    results = run_bench([spec], [timer.for_impl("sdpa", peer_impls(["sdpa"])[0].prepare)],
                        BenchConfig(seq_lens=(32,), configs=("tiny",), tokens=64, device="cpu"),
                        timer, progress=lambda _: None)
    (r,) = results
    assert r.reference.startswith("unavailable")
    assert r.impls[0].status == "skipped" and timer.timed == []


def test_broken_case_is_recorded(specs):
    def bad_aux(shape, generator, device):
        raise KeyError("doc lengths")

    spec = make_spec("bad_aux", make_aux=bad_aux)
    results = run_bench([spec], peer_impls(["sdpa"]),
                        BenchConfig(seq_lens=(32,), configs=("tiny",), tokens=64, device="cpu"),
                        wallclock_timer(2), progress=lambda _: None)
    assert results[0].reference.startswith("case failed: SpecError")
    assert "make_aux raised" in results[0].reference and "doc lengths" in results[0].reference
    assert results[0].impls[0].status == "skipped"


def test_unknown_head_config_is_a_clear_error(specs):
    with pytest.raises(ValueError, match="unknown head config 'nope'"):
        run_bench([specs["causal"]], [], BenchConfig(configs=("nope",), device="cpu"),
                  wallclock_timer(2))


def test_impl_writing_to_its_inputs_fails_and_the_next_impl_gets_them_back(specs):
    def scribbles(case) -> Prepared:
        def run():
            out = torch.nn.functional.scaled_dot_product_attention(
                case.q, case.k, case.v, is_causal=True, enable_gqa=True)
            case.k.mul_(2)  # after computing a right answer: only the write is wrong
            return out
        return Prepared(run)

    results = run_bench([specs["causal"]], [Impl("scribbles", scribbles), *peer_impls(["sdpa"])],
                        BenchConfig(seq_lens=(32,), configs=("tiny",), tokens=64, device="cpu"),
                        wallclock_timer(2), progress=lambda _: None)
    by = {i.impl: i for i in results[0].impls}
    assert by["scribbles"].status == "wrong" and by["scribbles"].reason == "modified its inputs"
    assert by["sdpa"].status == "ok"


def test_a_case_of_a_given_shape_with_captured_tensors_and_sq_neq_sk():
    """Mods whose captured tensors fix B, Sq and Sk (cubridge.flex_attention's
    users): the case is built for that shape, verified and timed."""
    from cubridge.attention import HeadConfig, Shape
    from cubridge.bench.report import markdown_table
    from cubridge.bench.runner import run_case
    from cubridge.spec import from_mods

    starts = torch.tensor([0, 10, 30, 40])  # captured: the image each key belongs to starts here

    def mask_mod(b, h, q_idx, kv_idx):
        return q_idx >= starts[kv_idx // 12]

    cfg = HeadConfig("tiny", 4, 2, 16)
    spec = from_mods(None, mask_mod, name="images", configs=[cfg], seq_lens=[48])
    shape = Shape(3, 4, 2, 48, 40, 16)
    (r,) = [run_case(spec, cfg, 48, peer_impls(["eager"]), CPU, wallclock_timer(2),
                     progress=lambda _: None, shape=shape)]
    assert (r.batch, r.seq_len, r.seq_len_k) == (3, 48, 40)
    want = sum(int((torch.arange(48)[:, None] >= starts[torch.arange(40) // 12]).sum())
               for _ in range(3 * 4))
    assert r.allowed_pairs == want
    assert r.impls[0].status == "ok", r.impls[0].reason
    assert "| images | tiny | 48x40 | 3 |" in markdown_table([r])


def test_cubridge_flex_attention_impl_refuses_what_it_cannot_take(specs):
    from cubridge.bench.ours import flex_attention_impl

    results = run_bench([specs["document_causal"]], [flex_attention_impl()],
                        BenchConfig(seq_lens=(64,), configs=("tiny",), tokens=128, device="cpu"),
                        wallclock_timer(2), progress=lambda _: None)
    (i,) = results[0].impls
    assert i.status == "unsupported" and "capture their tensors" in i.reason


class ScriptedTimer:
    """Gives each impl its next scripted time (ms) and records the order of the calls."""

    def __init__(self, times: dict[str, list[float]]) -> None:
        self.times = {name: list(ts) for name, ts in times.items()}
        self.order: list[str] = []

    def __call__(self, fn):
        fn()
        self.order.append(fn.impl)
        return self.times[fn.impl].pop(0)


def _sdpa_named(name: str, wrong_in_calls: tuple[int, ...] = ()) -> Impl:
    """SDPA with a name the timer can see; its output is wrong in the given calls
    of its run (counting every call, verification runs and timed ones)."""
    calls = [0]

    def prepare(case) -> Prepared:
        def run():
            calls[0] += 1
            out = torch.nn.functional.scaled_dot_product_attention(
                case.q, case.k, case.v, is_causal=True, scale=case.scale, enable_gqa=True)
            return out + 1 if calls[0] in wrong_in_calls else out

        run.impl = name
        return Prepared(run)

    return Impl(name, prepare)


ROUNDS = BenchConfig(seq_lens=(32,), configs=("tiny",), tokens=64, device="cpu", rounds=3)


def test_rounds_interleave_the_impls_and_each_keeps_its_median(specs):
    timer = ScriptedTimer({"a": [1.0, 3.0, 2.0], "b": [5.0, 4.0, 9.0]})
    (r,) = run_bench([specs["causal"]], [_sdpa_named("a"), _sdpa_named("b")], ROUNDS, timer,
                     progress=lambda _: None)
    assert timer.order == ["a", "b", "b", "a", "a", "b"]  # each round starts one impl later
    by = {i.impl: i for i in r.impls}
    assert [i.impl for i in r.impls] == ["a", "b"]
    assert by["a"].time_ms == 2.0 and by["b"].time_ms == 5.0
    assert by["a"].tflops == pytest.approx(r.flops / 2e-3 / 1e12)
    assert "median of 3 rounds: 1.000 / 3.000 / 2.000 ms" in by["a"].note


def test_a_failure_in_any_round_stands_and_is_not_retried(specs):
    # b's verification run of round 2 is its third call (round 1: verify, time)
    timer = ScriptedTimer({"a": [1.0, 1.0, 1.0], "b": [1.0, 1.0, 1.0]})
    impls = [_sdpa_named("a"), _sdpa_named("b", wrong_in_calls=(3,))]
    (r,) = run_bench([specs["causal"]], impls, ROUNDS, timer, progress=lambda _: None)
    by = {i.impl: i for i in r.impls}
    assert by["a"].status == "ok"
    assert by["b"].status == "wrong" and by["b"].time_ms is None
    assert by["b"].reason.startswith("round 2 of 3: failed verification")
    assert timer.order.count("b") == 1  # timed in round 1 only
    assert timer.order.count("a") == 3


def test_rounds_must_be_positive():
    with pytest.raises(ValueError, match="rounds must be at least 1"):
        BenchConfig(rounds=0)


def test_with_rounds_an_impl_that_cannot_express_the_variant_keeps_its_reason(specs):
    (r,) = run_bench([specs["sigmoid_causal"]], peer_impls(["sdpa", "eager"]), ROUNDS,
                     wallclock_timer(2), progress=lambda _: None)
    by = {i.impl: i for i in r.impls}
    assert by["sdpa"].status == "unsupported" and not by["sdpa"].reason.startswith("round")
    assert by["eager"].status == "ok" and "median of 3 rounds" in by["eager"].note


def test_rounds_without_impls_still_record_the_case(specs):
    (r,) = run_bench([specs["causal"]], [], ROUNDS, wallclock_timer(2), progress=lambda _: None)
    assert r.impls == [] and r.allowed_pairs > 0


def test_each_impl_keeps_its_own_results_by_position(specs):
    """Results belong to the implementation's place in the list, not its name."""
    def wrong(case) -> Prepared:
        return Prepared(lambda: torch.zeros_like(case.q))

    impls = [_sdpa_named("a"), Impl("a", wrong)]
    one_round = BenchConfig(seq_lens=(32,), configs=("tiny",), tokens=64, device="cpu")
    for config in (one_round, ROUNDS):
        (r,) = run_bench([specs["causal"]], impls, config, ScriptedTimer({"a": [1.0] * 3}),
                         progress=lambda _: None)
        assert [i.status for i in r.impls] == ["ok", "wrong"], config.rounds
