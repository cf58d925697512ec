"""The two reference programs against a float64 reference, on fresh random
cases each run, under every scheduling policy (policy="all" runs each policy
and requires bit-identical results)."""

from __future__ import annotations

import random
import time

import pytest
import torch
from cuir_reference import attention_f64, rel_error

from cubridge.ir import POLICIES, BlockKind, attention_fn, execute
from cubridge.kernels.fa_sm80.cuir import FaSm80
from cubridge.kernels.fa_sm90.cuir import FaSm90

# bf16 P rounding bounds the relative error near 2^-8; fp16 is ~8x tighter.
REL_TOL = {torch.bfloat16: 1.5e-2, torch.float16: 2e-3}
LSE_TOL = 1e-3

HEADS = [(8, 2), (4, 1), (2, 2), (6, 3)]
CASES_PER_KERNEL = 16  # x 2 kernels = 32 fresh cases per run, each under every policy


def _random_cases(kernel: str, n: int, rng: random.Random) -> list[dict]:
    cases = []
    for i in range(n):
        hq, hk = HEADS[i % len(HEADS)]
        cfg = {}
        if kernel == "sm80" and rng.random() < 0.4:
            cfg = rng.choice([{"block_m": 64, "block_n": 32}, {"stages": 3}])
        if kernel == "sm90" and rng.random() < 0.3:
            cfg = {"block_n": 64, "stages": 3}
        cases.append(dict(
            b=rng.randint(1, 3), hq=hq, hk=hk,
            sq=rng.choice([1, 37, 64, 129, 200, 256]), sk=rng.choice([1, 50, 128, 191, 300]),
            d=rng.choice([64, 128]), causal=i % 2 == 1,
            dtype=rng.choice([torch.bfloat16, torch.float16]), cfg=cfg,
        ))
    return cases


def _inputs(c: dict, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen).to(c["dtype"])

    return r(c["b"], c["hq"], c["sq"], c["d"]), r(c["b"], c["hk"], c["sk"], c["d"]), \
        r(c["b"], c["hk"], c["sk"], c["d"])


@pytest.mark.slow
@pytest.mark.parametrize("kernel", ["sm80", "sm90"])
def test_matches_float64_reference_on_fresh_random_cases(kernel: str) -> None:
    seed = random.SystemRandom().randrange(2**31)
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    cls = FaSm80 if kernel == "sm80" else FaSm90
    for c in _random_cases(kernel, CASES_PER_KERNEL, rng):
        q, k, v = _inputs(c, gen)
        fn = attention_fn(cls, policy="all", causal=c["causal"], **c["cfg"])
        out, lse = fn(q, k, v)
        ref, ref_lse = attention_f64(q, k, v, causal=c["causal"])
        where = f"seed {seed}, case {c}"
        assert out.dtype == q.dtype and lse.dtype == torch.float32, where
        assert out.shape == ref.shape and lse.shape == ref_lse.shape, where
        assert not out.isnan().any() and not lse.isnan().any(), where
        err = rel_error(out, ref)
        assert err < REL_TOL[c["dtype"]], f"rel error {err:.3g}: {where}"
        # far better than a trivial output (the mean of V per row is ~ the softmax of noise)
        assert err < 0.1 * rel_error(torch.zeros_like(out), ref), where
        assert float((lse.double() - ref_lse).abs().max()) < LSE_TOL, where


@pytest.mark.parametrize("cls", [FaSm80, FaSm90])
def test_rows_without_allowed_keys_give_zero_and_minus_inf(cls: type) -> None:
    class EveryThirdRowEmpty(cls):  # type: ignore[misc, valid-type]
        def mask_mod(self, b, h, q_idx, kv_idx):
            return (q_idx % 3 != 0) & (kv_idx <= q_idx)

    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, n, 64, generator=gen).bfloat16() for n in (70, 90, 90))
    k, v = k[:, :1], v[:, :1]
    out, lse = attention_fn(EveryThirdRowEmpty)(q, k, v)
    ref, ref_lse = attention_f64(q, k, v, mask=lambda qi, ki: (qi % 3 != 0) & (ki <= qi))
    empty = torch.arange(70) % 3 == 0
    assert torch.equal(out[:, :, empty], torch.zeros_like(out[:, :, empty]))
    assert torch.isneginf(lse[:, :, empty]).all()
    assert rel_error(out, ref) < REL_TOL[torch.bfloat16]
    assert torch.allclose(lse[:, :, ~empty].double(), ref_lse[:, :, ~empty], atol=LSE_TOL)


@pytest.mark.slow
@pytest.mark.parametrize("cls", [FaSm80, FaSm90])
def test_score_mod_with_aux_and_elementwise_normaliser(cls: type) -> None:
    class AlibiSigmoid(cls):  # type: ignore[misc, valid-type]
        normalizer = "elementwise"
        aux_names = ("slopes",)

        def score_mod(self, s, b, h, q_idx, kv_idx):
            return s + self.aux["slopes"][h] * (kv_idx - q_idx)

        def activation(self, s):
            return torch.sigmoid(s - 2.0)

    gen = torch.Generator().manual_seed(2)
    q = torch.randn(2, 4, 100, 64, generator=gen).half()
    k, v = (torch.randn(2, 2, 150, 64, generator=gen).half() for _ in range(2))
    slopes = torch.tensor([0.5, 0.25, 0.125, 0.0625])
    out, lse = attention_fn(AlibiSigmoid, policy="all", causal=True)(q, k, v, slopes=slopes)
    ref, _ = attention_f64(
        q, k, v, causal=True, activation=lambda s: torch.sigmoid(s - 2.0),
        score_mod=lambda s, h, qi, ki: s + slopes.double()[h] * (ki - qi))
    assert lse is None
    assert rel_error(out, ref) < REL_TOL[torch.float16]
    with pytest.raises(ValueError, match="missing \\['slopes'\\]"):
        attention_fn(AlibiSigmoid)(q, k, v)


def test_block_classification_skips_empty_blocks_and_masks_partial_ones() -> None:
    class Windowed(FaSm90):
        """Sliding window of 64 keys with its closed-form classification."""

        def mask_mod(self, b, h, q_idx, kv_idx):
            return (q_idx >= kv_idx) & (q_idx - kv_idx < 64)

        def kv_block_range(self, b, h, q_start, q_end):
            return max(q_start - 63, 0) // self.block_n, -(-q_end // self.block_n)

        def block_kind(self, b, h, q_start, q_end, k_start, k_end):
            if k_start > q_end - 1 or q_start - (k_end - 1) >= 64:
                return BlockKind.EMPTY
            if k_end - 1 <= q_start and q_end - 1 - k_start < 64:
                return BlockKind.FULL
            return BlockKind.PARTIAL

    kernel = Windowed(block_n=64)
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 1, 400, 64, generator=gen).bfloat16() for _ in range(3))
    out, lse = execute(kernel, q, k, v, policy="random:7")
    assert [j for j, _ in kernel.kv_blocks(0, 0, 256, 384)] == [3, 4, 5]  # 0..2 never loaded
    ref, ref_lse = attention_f64(q, k, v, mask=lambda qi, ki: (qi >= ki) & (qi - ki < 64))
    assert rel_error(out, ref) < REL_TOL[torch.bfloat16]
    assert float((lse.double() - ref_lse).abs().max()) < LSE_TOL


def test_policies_are_the_documented_ones() -> None:
    assert POLICIES == ("eager", "delayed", "random:0", "random:1")


@pytest.mark.parametrize("cls", [FaSm80, FaSm90])
def test_causal_block_classification_is_closed_form(cls: type) -> None:
    kernel = cls(causal=True)
    kernel.seqlen_q, kernel.seqlen_k = 300, 300
    kinds = kernel.kv_blocks(0, 0, 128, 256)
    n = kernel.block_n
    assert kinds[0] == (0, BlockKind.FULL)
    assert max(j for j, _ in kinds) == (255 // n)
    assert all(kind is BlockKind.PARTIAL for j, kind in kinds if j * n + n - 1 > 128)


@pytest.mark.slow
def test_hopper_program_is_fast_enough() -> None:
    """B=1, H=2, S=1024, D=128 must execute in < 10 s on 2 CPU cores."""
    gen = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(1, 2, 1024, 128, generator=gen).bfloat16() for _ in range(3))
    t0 = time.perf_counter()
    out, _ = attention_fn(FaSm90)(q, k, v)
    elapsed = time.perf_counter() - t0
    assert elapsed < 10.0, f"FaSm90 took {elapsed:.1f} s"
    assert rel_error(out, attention_f64(q, k, v)[0]) < REL_TOL[torch.bfloat16]


@pytest.mark.parametrize("cls", [FaSm80, FaSm90])
def test_query_block_with_no_key_blocks_writes_zeros_and_minus_inf(cls: type) -> None:
    class NothingForTheFirstBlock(cls):  # type: ignore[misc, valid-type]
        def mask_mod(self, b, h, q_idx, kv_idx):
            return q_idx >= self.block_m

        def kv_block_range(self, b, h, q_start, q_end):
            return (0, 0) if q_start == 0 else (0, -(-self.seqlen_k // self.block_n))

    gen = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(1, 2, 200, 64, generator=gen).half() for _ in range(3))
    out, lse = attention_fn(NothingForTheFirstBlock, policy="all")(q, k, v)
    bm = cls().block_m
    assert torch.equal(out[:, :, :bm], torch.zeros_like(out[:, :, :bm]))
    assert torch.isneginf(lse[:, :, :bm]).all()
    ref, ref_lse = attention_f64(q[:, :, bm:], k, v)
    assert rel_error(out[:, :, bm:], ref) < REL_TOL[torch.float16]
    assert float((lse[:, :, bm:].double() - ref_lse).abs().max()) < LSE_TOL
