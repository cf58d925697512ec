"""The CuIR of fa_sm90 (kernels/fa_sm90/cuir.py) on the CPU: the persistent
schedule of fa_sm90.cu, the consumers' order of gemms, commits, waits and
barrier operations as the CUDA issues them, and results under every scheduling
policy against the float64 reference and the library's spec (full, causal, GQA,
Sq != Sk, tails, several tiles per CTA, hook variants, the lazy rescale)."""

from __future__ import annotations

import math

import pytest
import torch
from kernel_helpers import reference_attention, rel_error, tolerance

from cubridge.ir import POLICIES, BlockKind, attention_fn, execute
from cubridge.ir.scheduler import current_worker
from cubridge.kernels import KERNELS_DIR, get_kernel
from cubridge.kernels.fa_sm90.cuir import RESCALE_THRESHOLD, BlockInfo, FaSm90
from cubridge.kernels.fa_sm90.launch import schedule_section

LSE_TOL = 1e-3


def _qkv(b: int, hq: int, hk: int, sq: int, sk: int, d: int = 64,
         dtype: torch.dtype = torch.bfloat16, seed: int = 0, spread: float = 1.0):
    gen = torch.Generator().manual_seed(seed)
    q = (torch.randn(b, hq, sq, d, generator=gen) * spread).to(dtype)
    k = (torch.randn(b, hk, sk, d, generator=gen) * spread).to(dtype)
    v = torch.randn(b, hk, sk, d, generator=gen).to(dtype)
    return q, k, v


def _check(out, lse, ref, ref_lse, dtype):
    assert not out.isnan().any()
    assert rel_error(out, ref) < tolerance(dtype)
    if ref_lse is not None:
        assert not lse.isnan().any()
        finite = ~torch.isinf(ref_lse)
        assert torch.isinf(lse[~finite]).all()
        assert float((lse[finite].double() - ref_lse[finite]).abs().max()) < LSE_TOL


# -- the library entry -------------------------------------------------------------------


def test_metadata_configs_build_the_cuir_program():
    entry = get_kernel("fa_sm90")
    assert entry.cuir_class() is FaSm90
    program = FaSm90()  # the defaults are the config the CUDA kernel is built with
    for d in entry.metadata.head_dims:
        kwargs = entry.cuir_config(d)
        if d <= 128:  # (D = 256 takes 64-key blocks and one Q buffer, below)
            assert {name: getattr(program, name) for name in kwargs} == kwargs
        FaSm90(**kwargs)
        unmasked = entry.default_config(d, masked=False)
        assert FaSm90(**unmasked.cuir_kwargs()).consumers == unmasked.consumer_warpgroups
    assert entry.default_config(64, masked=False).consumer_warpgroups == 3  # unmasked D=64
    assert entry.default_config(64, masked=True) == entry.config(64)
    assert program.num_sms == 132 and program.consumers == 2
    with pytest.raises(ValueError, match="2 or 3 consumer warpgroups"):
        FaSm90(block_m=256)
    with pytest.raises(ValueError, match="stages must be >= 2"):
        FaSm90(stages=1)
    with pytest.raises(ValueError, match="q_buffers must be 1 or 2"):
        FaSm90(q_buffers=3)
    assert entry.cuir_config(256)["q_buffers"] == 1  # D = 256: O staged in the Q buffer


def test_matches_the_library_spec():
    from cubridge.spec.loader import load
    spec = load(KERNELS_DIR / "common" / "standard_attention_spec.py")
    q, k, v = _qkv(1, 4, 2, 200, 333, seed=1)
    out, lse = attention_fn(FaSm90, policy="all", num_sms=3)(q, k, v)
    ref, ref_lse = spec.reference(q.double(), k.double(), v.double())
    _check(out, lse, ref, ref_lse, q.dtype)


# -- the persistent schedule -------------------------------------------------------------


def _bind(kernel: FaSm90, b: int, hq: int, hk: int, sq: int, sk: int, d: int = 64) -> FaSm90:
    kernel.batch, kernel.heads_q, kernel.heads_kv = b, hq, hk
    kernel.seqlen_q, kernel.seqlen_k, kernel.head_dim, kernel.head_dim_v = sq, sk, d, d
    kernel.dtype = torch.bfloat16
    return kernel


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [(2, 4, 2, 300, 500, 3), (1, 8, 1, 1000, 64, 5),
                                   (3, 2, 2, 129, 10, 132)])
def test_ctas_walk_the_tile_schedule(shape, causal):
    b, hq, hk, sq, sk, sms = shape
    kernel = _bind(FaSm90(num_sms=sms, causal=causal), b, hq, hk, sq, sk)
    m_blocks = math.ceil(sq / 128)
    tiles = b * hq * m_blocks
    assert kernel.grid() == (min(tiles, sms), 1, 1)
    section = schedule_section(hq, hk, sk, 64, 2, m_blocks, kernel.grid()[0])
    assert kernel.section() == section
    order = [kernel.tile_at(t) for t in range(tiles)]
    assert sorted(order) == sorted((bb, h, m) for bb in range(b) for h in range(hq)
                                   for m in range(m_blocks))  # every tile once
    # sections of `section` (batch, head) pairs; query blocks last-first inside one
    for start in range(0, b * hq, section):
        pairs = min(section, b * hq - start)
        chunk = order[start * m_blocks:(start + pairs) * m_blocks]
        assert {bb * hq + h for bb, h, _ in chunk} == set(range(start, start + pairs))
        assert [m for _, _, m in chunk] == sorted((m for _, _, m in chunk), reverse=True)


def test_section_is_the_launchers():
    import itertools

    from cubridge.kernels.fa_sm90 import cuir, launch
    assert (cuir.ROWS_PER_CONSUMER, cuir.L2_SECTION_BYTES, cuir.SECTION_WAVES) == (
        launch.ROWS_PER_CONSUMER, launch.L2_SECTION_BYTES, launch.SECTION_WAVES)
    for (hq, hk), sk, sq, d, sms, causal, dtype in itertools.product(
            [(32, 32), (64, 8), (8, 1), (3, 3)], [64, 4096, 60000], [100, 4096], [64, 128],
            [2, 132], [False, True], [torch.bfloat16, torch.float16]):
        kernel = _bind(FaSm90(num_sms=sms, causal=causal), 2, hq, hk, sq, sk, d)
        kernel.dtype = dtype
        m_blocks = math.ceil(sq / 128)
        assert kernel.section() == schedule_section(hq, hk, sk, d, 2, m_blocks, kernel.grid()[0])


def test_key_walk_skips_blocks_empty_for_every_consumer():
    # a 128-row query block whose rows each see keys up to 16 past themselves:
    # with 64-key blocks rows 0..63 see blocks 0-1, rows 64..127 blocks 1-2; the
    # blocks from 3 on are EMPTY for both and never visited
    kernel = _bind(FaSm90(block_n=64), 1, 1, 1, 128, 512)
    kernel.kv_block_range = lambda b, h, q_start, q_end: (0, 8)
    kernel.block_kind = lambda b, h, q0, q1, k0, k1: (
        BlockKind.EMPTY if k0 > q1 - 1 + 16 or k1 - 1 < q0 else BlockKind.PARTIAL)
    assert [(n, kinds) for n, kinds in kernel.key_walk(0, 0, 0)] == [
        (2, [BlockKind.EMPTY, BlockKind.PARTIAL]), (1, [BlockKind.PARTIAL, BlockKind.PARTIAL]),
        (0, [BlockKind.PARTIAL, BlockKind.EMPTY])]


def test_key_walk_runs_from_the_diagonal_down_and_skips_empty_blocks():
    kernel = _bind(FaSm90(causal=True, block_n=64), 1, 1, 1, 512, 512)
    assert [n for n, _ in kernel.key_walk(0, 0, 2)] == [5, 4, 3, 2, 1, 0]
    # each block with its kind for each consumer's 64 rows: block 5 (keys 320..383)
    # is EMPTY for rows 256..319 and PARTIAL for rows 320..383
    assert kernel.key_walk(0, 0, 2)[0][1] == [BlockKind.EMPTY, BlockKind.PARTIAL]
    assert kernel.key_walk(0, 0, 2)[-1][1] == [BlockKind.FULL, BlockKind.FULL]
    # per consumer (the producer classifies, the consumer masks by it): block 5 is
    # EMPTY for consumer 0's rows 256..319 (keys 320..383)
    def consumer_view(row0, n):
        info = BlockInfo(n, False, kernel.consumer_kind(0, 0, row0, n))
        return kernel.consumer_block(row0, info)

    assert kernel.consumer_kind(0, 0, 256, 5) is BlockKind.EMPTY
    assert consumer_view(256, 5) == (BlockKind.PARTIAL, True)
    assert consumer_view(320, 5) == (BlockKind.PARTIAL, False)
    assert consumer_view(320, 2) == (BlockKind.FULL, False)
    assert kernel.consumer_kind(0, 0, 576, 0) is BlockKind.EMPTY  # rows past Sq


# -- the order of operations -------------------------------------------------------------


class _Logged:
    """A barrier that records its waits and arrivals, then does them."""

    def __init__(self, bar, name: str, log: list):
        self._bar, self._name, self._log = bar, name, log

    def _rec(self, what: str) -> None:
        self._log.append((current_worker().name, what))

    def wait(self, parity: int) -> None:
        self._rec(f"wait {self._name} {parity}")
        self._bar.wait(parity)

    def arrive(self) -> None:
        self._rec(f"arrive {self._name}")
        self._bar.arrive()

    def arrive_expect_tx(self, nbytes: int) -> None:
        self._rec(f"expect_tx {self._name}")
        self._bar.arrive_expect_tx(nbytes)

    def sync(self) -> None:
        self._rec(f"sync {self._name}")
        self._bar.sync()

    def __getattr__(self, name: str):
        return getattr(self._bar, name)


class Traced(FaSm90):
    log: list

    def run(self, cta, y, z):
        super().run(cta, y, z)
        for name in ("q_full", "q_empty", "k_full", "k_empty", "v_full", "v_empty",
                     "mma_token"):
            setattr(self, name, [_Logged(bar, f"{name}{i}", self.log)
                                 for i, bar in enumerate(getattr(self, name))])

    def _rec(self, what: str) -> None:
        self.log.append((current_worker().name, what))

    def gemm_async(self, a, b, acc, *, trans_b=False, accumulate=True):
        self._rec("S=QK" if trans_b else ("O+=PV" if accumulate else "O=PV"))
        super().gemm_async(a, b, acc, trans_b=trans_b, accumulate=accumulate)

    def commit(self):
        self._rec("commit")
        super().commit()

    def claim_tile(self):
        t = super().claim_tile()
        self._rec(f"claim {t}")
        return t

    def wait_group(self, n):
        self._rec(f"wait_group {n}")
        super().wait_group(n)

    def epilogue(self, *args):
        self._rec("epilogue")
        super().epilogue(*args)


def _trace(policy: str, **config) -> list:
    Traced.log = []
    q, k, v = _qkv(1, 1, 1, 256, 256)  # two tiles of two key blocks, one CTA
    out, lse = execute(Traced(num_sms=1, **config), q, k, v, policy=policy)
    ref, ref_lse = reference_attention(q, k, v)
    _check(out, lse, ref, ref_lse, q.dtype)
    return Traced.log


# consumer 0 as fa_sm90.cu issues it: tile 1 (first of the CTA), then tile 2 (last)
FIRST_BLOCK = ["wait k_full0 0", "sync mma_token0", "S=QK", "commit", "arrive mma_token1",
               "wait_group 0"]


def _steady(pv_index: int, pv_phase: int, first_pv: bool) -> list:
    return ["wait k_full1 0", "sync mma_token0", "S=QK", "commit",
            f"wait v_full{pv_index} {pv_phase}", "O=PV" if first_pv else "O+=PV", "commit",
            "arrive mma_token1", "wait_group 1", "arrive k_empty1", "wait_group 0",
            f"arrive v_empty{pv_index}"]


CONSUMER0 = [
    "wait q_full0 0", *FIRST_BLOCK,
    "arrive k_empty0", *_steady(0, 0, True),
    "arrive q_empty0", "wait q_full1 0",
    # the look-ahead: the last PV with the next tile's first S, one token hold
    "wait v_full1 0", "wait k_full0 1", "sync mma_token0", "O+=PV", "commit", "S=QK", "commit",
    "arrive mma_token1", "wait_group 1", "arrive v_empty1", "epilogue", "wait_group 0",
    "arrive k_empty0", "wait k_full1 1", "sync mma_token0", "S=QK", "commit",
    "wait v_full0 1", "O=PV", "commit", "arrive mma_token1", "wait_group 1", "arrive k_empty1",
    "wait_group 0", "arrive v_empty0",
    "arrive q_empty1", "wait q_full0 1",  # (the producer's word: no more tiles)
    # the CTA's last tile: the last PV alone
    "wait v_full1 1", "sync mma_token0", "O+=PV", "commit", "arrive mma_token1", "wait_group 0",
    "arrive v_empty1", "epilogue",
]

# one CTA: tile 0 is its own, tile 1 it claims with tile 0's last block, and the
# claim with tile 1's last (2, past the schedule) ends it: index -1 in Q buffer 0,
# then the V loader's end in the next ring slot (a plain arrival on its k_full).
# (Q goes out before the walk; the tile's liveness is q_full's second arrival)
PRODUCER = ["expect_tx q_full0", "arrive q_full0",
            "wait k_empty0 1", "expect_tx k_full0",
            "claim 1",
            "wait k_empty1 1", "expect_tx k_full1",
            "expect_tx q_full1", "arrive q_full1",
            "wait k_empty0 0", "expect_tx k_full0",
            "claim 2",
            "wait k_empty1 0", "expect_tx k_full1",
            "wait q_empty0 0", "arrive q_full0", "arrive q_full0",
            "wait k_empty0 1", "arrive k_full0"]


def _v_loads(index: int, phase: int) -> list:
    """The V loader's turn at one ring position: the block's K landed, its words
    read (k_empty), its V once the slot is free."""
    return [f"wait k_full{index} {phase}", f"arrive k_empty{index}",
            f"wait v_empty{index} {phase ^ 1}", f"expect_tx v_full{index}"]


# each block's V as soon as its K landed and its slot freed, whatever the producer
# walks meanwhile; the end word after the last
V_LOADER = [*_v_loads(0, 0), *_v_loads(1, 0), *_v_loads(0, 1), *_v_loads(1, 1),
            "wait k_full0 0"]


@pytest.mark.parametrize("policy", POLICIES)
def test_consumers_issue_in_the_order_of_the_cuda(policy):
    log = _trace(policy)
    ops = {w: [op for who, op in log if who == w]
           for w in ("producer", "v_loader", "consumer0", "consumer1")}
    assert ops["consumer0"] == CONSUMER0
    # consumer 1: the same walk, after handing the first token to consumer 0
    other = [op.replace("mma_token0", "T").replace("mma_token1", "mma_token0")
             .replace("T", "mma_token1") for op in CONSUMER0]
    assert ops["consumer1"] == ["arrive mma_token0", *other]
    assert ops["producer"] == PRODUCER
    assert ops["v_loader"] == V_LOADER


# with one Q buffer (D = 256's config): the last PV alone, O stored and the consumer's
# Q rows released, then its rows of the next tile awaited and its first S alone
ONE_Q_LAST_PV = ["sync mma_token0", "O+=PV", "commit", "arrive mma_token1", "wait_group 0"]
CONSUMER0_ONE_Q = [
    "wait q_full0 0", *FIRST_BLOCK,
    "arrive k_empty0", *_steady(0, 0, True),
    "wait v_full1 0", *ONE_Q_LAST_PV, "arrive v_empty1", "epilogue", "arrive q_empty0",
    "wait q_full0 1", "wait k_full0 1", "sync mma_token0", "S=QK", "commit",
    "arrive mma_token1", "wait_group 0",
    "arrive k_empty0", "wait k_full1 1", "sync mma_token0", "S=QK", "commit",
    "wait v_full0 1", "O=PV", "commit", "arrive mma_token1", "wait_group 1", "arrive k_empty1",
    "wait_group 0", "arrive v_empty0",
    "wait v_full1 1", *ONE_Q_LAST_PV, "arrive v_empty1", "epilogue", "arrive q_empty0",
    "wait q_full0 0",  # (the producer's word: no more tiles)
]


@pytest.mark.parametrize("policy", POLICIES)
def test_one_q_buffer_stores_a_tile_before_the_next_q_loads(policy):
    log = _trace(policy, q_buffers=1)
    assert [op for who, op in log if who == "consumer0"] == CONSUMER0_ONE_Q
    # each consumer's rows of the one buffer are reloaded once that consumer released
    # them (its own Q slot), after the tile's first K
    assert [op for who, op in log if who == "producer"] == [
        "wait k_empty0 1", "expect_tx k_full0",
        "expect_tx q_full0", "arrive q_full0", "expect_tx q_full1", "arrive q_full1",
        "claim 1", "wait k_empty1 1", "expect_tx k_full1",
        "wait k_empty0 0", "expect_tx k_full0",  # the next tile's first K, then its rows
        "wait q_empty0 0", "expect_tx q_full0", "arrive q_full0",
        "wait q_empty1 0", "expect_tx q_full1", "arrive q_full1",
        "claim 2", "wait k_empty1 0", "expect_tx k_full1",
        "wait q_empty0 1", "arrive q_full0", "arrive q_full0",  # no more tiles, per slot
        "wait q_empty1 1", "arrive q_full1", "arrive q_full1",
        "wait k_empty0 1", "arrive k_full0"]


def test_three_consumers_pass_the_token_round_robin():
    log = _trace("delayed", block_m=192)
    for c in range(3):
        ops = [op for who, op in log if who == f"consumer{c}" and "mma_token" in op]
        take, give = f"sync mma_token{c}", f"arrive mma_token{(c + 1) % 3}"
        first = [give] if c == 2 else []
        assert ops == first + [take, give] * (len(ops) // 2), c


# -- results under every policy ----------------------------------------------------------

CASES = [
    # b, hq, hk, sq, sk, d, causal, num_sms, config, dtype
    (1, 2, 2, 256, 256, 64, False, 2, {}, torch.bfloat16),
    (1, 2, 2, 256, 256, 64, True, 2, {}, torch.bfloat16),
    (2, 4, 1, 200, 333, 64, True, 3, {}, torch.float16),        # GQA 4:1, tails
    (1, 4, 2, 333, 77, 128, False, 3, {}, torch.bfloat16),      # Sq > Sk, D=128
    (1, 2, 1, 100, 400, 64, True, 2, {"block_n": 64, "stages": 3}, torch.float16),
    (1, 3, 3, 37, 200, 64, False, 2, {"block_m": 192}, torch.bfloat16),  # 3 consumers
    (2, 2, 2, 400, 400, 64, True, 3, {"block_m": 192, "block_n": 64}, torch.bfloat16),
    # D = 256's config: one Q buffer (O staged in it), several tiles per CTA
    (2, 4, 2, 300, 260, 256, True, 2, {"block_n": 64, "q_buffers": 1}, torch.bfloat16),
    (1, 3, 1, 129, 200, 256, False, 2, {"block_n": 64, "q_buffers": 1}, torch.float16),
]


@pytest.mark.parametrize("case", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_matches_float64_reference_under_every_policy(case):
    b, hq, hk, sq, sk, d, causal, sms, cfg, dtype = case
    q, k, v = _qkv(b, hq, hk, sq, sk, d, dtype, seed=sq + sk)
    out, lse = attention_fn(FaSm90, policy="all", causal=causal, num_sms=sms, **cfg)(q, k, v)
    mask = (lambda qi, ki, hi: qi >= ki) if causal else None
    ref, ref_lse = reference_attention(q, k, v, mask=mask)
    _check(out, lse, ref, ref_lse, dtype)


class WindowAlibi(FaSm90):
    """tests/kernels/hooks/window_alibi.cuh: a causal window of 100 keys and an
    ALiBi bias from a per-head slope table."""

    aux_names = ("slopes",)
    window = 100

    def score_mod(self, s, b, h, q_idx, kv_idx):
        return s + self.aux["slopes"][h] * (kv_idx - q_idx).float()

    def mask_mod(self, b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx < self.window)

    def kv_block_range(self, b, h, q_start, q_end):
        return max(q_start - self.window + 1, 0) // self.block_n, -(-q_end // self.block_n)

    def block_kind(self, b, h, q_start, q_end, k_start, k_end):
        if k_start > q_end - 1 or k_end - 1 <= q_start - self.window:
            return BlockKind.EMPTY
        if k_end - 1 <= q_start and k_start > q_end - 1 - self.window:
            return BlockKind.FULL
        return BlockKind.PARTIAL


def test_hook_variant_with_blocks_empty_for_one_consumer():
    q, k, v = _qkv(1, 2, 1, 400, 400, seed=7)
    slopes = torch.tensor([0.25, 0.0625])
    kernel = _bind(WindowAlibi(block_n=64), 1, 2, 1, 400, 400)
    # the CTA of rows 128..255 visits key block 0, EMPTY for its second consumer's rows
    assert 0 in [n for n, _ in kernel.key_walk(0, 0, 1)]
    assert kernel.consumer_kind(0, 0, 192, 0) is BlockKind.EMPTY
    out, lse = attention_fn(WindowAlibi, policy="all", block_n=64, num_sms=2)(q, k, v,
                                                                             slopes=slopes)
    ref, ref_lse = reference_attention(
        q, k, v, mask=lambda qi, ki, hi: (qi >= ki) & (qi - ki < 100),
        score_mod=lambda s, qi, ki, hi: s + slopes.double()[hi] * (ki - qi))
    _check(out, lse, ref, ref_lse, q.dtype)


class SigmoidNothingFirst(FaSm90):
    """An elementwise normaliser where the first query block of each head visits
    no key block: a CTA's stale O must not leak into that tile's output."""

    normalizer = "elementwise"

    def activation(self, s):
        return torch.sigmoid(s)

    def mask_mod(self, b, h, q_idx, kv_idx):
        return q_idx >= self.block_m

    def kv_block_range(self, b, h, q_start, q_end):
        return (0, 0) if q_start == 0 else (0, -(-self.seqlen_k // self.block_n))


def test_tiles_without_key_blocks_write_zeros_between_live_tiles():
    q, k, v = _qkv(1, 4, 4, 300, 200, seed=8)
    kernel = _bind(SigmoidNothingFirst(num_sms=1), 1, 4, 4, 300, 200)
    # one CTA runs every tile, in schedule order
    live = [kernel.tile_at(t)[2] > 0 for t in range(kernel.num_tiles())]
    pairs = list(zip(live[:-1], live[1:], strict=True))
    # a live tile then one without blocks, and one without blocks then a live one
    assert (True, False) in pairs and (False, True) in pairs
    out, lse = attention_fn(SigmoidNothingFirst, policy="all", num_sms=1)(q, k, v)
    assert lse is None
    assert torch.equal(out[:, :, :128], torch.zeros_like(out[:, :, :128]))
    ref, _ = reference_attention(q, k, v, mask=lambda qi, ki, hi: qi >= 128,
                                 activation=torch.sigmoid)
    assert rel_error(out[:, :, 128:], ref[:, :, 128:]) < tolerance(q.dtype)


# -- the lazy rescale --------------------------------------------------------------------


def test_row_max_moves_only_past_the_threshold():
    kernel = _bind(FaSm90(), 1, 1, 1, 64, 64)
    kernel.scale = 1.0
    state = kernel.softmax_state(2, RESCALE_THRESHOLD)
    allowed = torch.ones(2, 4, dtype=torch.bool)
    to_nat = 1 / state.to_log2  # one log2 unit in score units
    kernel.normalize(state, torch.tensor([[0.0, 1.0, 0.0, 0.0]] * 2), allowed)
    assert state.moved and state.row_max.tolist() == [1.0, 1.0]  # from -inf
    below, past = RESCALE_THRESHOLD - 0.1, RESCALE_THRESHOLD + 0.1
    rise = torch.tensor([[1.0 + below * to_nat] * 4, [1.0 + past * to_nat] * 4])
    p, rescale = kernel.normalize(state, rise, allowed)
    assert state.moved  # the second row moved, the first kept its max
    assert state.row_max[0] == 1.0 and rescale[0] == 1.0
    # exponentials below 2^threshold
    assert math.isclose(float(p[0, 0]), 2 ** below, rel_tol=1e-5)
    assert float(state.row_max[1]) == float(rise[1, 0])
    assert rescale[1] < 2 ** -RESCALE_THRESHOLD
    kernel.normalize(state, torch.zeros(2, 4), allowed)
    assert not state.moved
    eager = kernel.softmax_state(1)  # threshold 0: the max follows every rise
    kernel.normalize(eager, torch.tensor([[0.0, 1.0]]), allowed[:1, :2])
    kernel.normalize(eager, torch.tensor([[1.5, 0.0]]), allowed[:1, :2])
    assert eager.moved and eager.row_max.tolist() == [1.5]


def test_large_score_ranges_stay_exact_with_the_lazy_rescale():
    # scores spread over hundreds of log2 units: the max moves in most blocks
    q, k, v = _qkv(1, 2, 2, 256, 640, seed=9, spread=6.0)
    out, lse = attention_fn(FaSm90, policy="all", num_sms=2)(q, k, v)
    ref, ref_lse = reference_attention(q, k, v)
    _check(out, lse, ref, ref_lse, q.dtype)


def test_the_threshold_is_the_cuda_default():
    source = (KERNELS_DIR / "fa_sm90" / "fa_sm90.cu").read_text()
    define = "#define CUBRIDGE_RESCALE_THRESHOLD "
    line = next(x for x in source.splitlines() if x.startswith(define))
    assert float(line.split()[-1]) == RESCALE_THRESHOLD


def _steady_sums_failures(threshold: float, tiles: int = 24, s: int = 4096) -> int:
    """Warp-blocks whose test on the sums of P fails (fa_sm90.cu, exps_at_current_max)
    over a causal walk on normal inputs: 128-row tiles, the diagonal block first, warps
    of 16 rows, each thread's partial row sums over its 32 columns; a failed warp's rows
    move their max by the threshold rule."""
    gen = torch.Generator().manual_seed(0)
    failed = 0
    for t in range(tiles):
        m0 = s - 128 * (t + 1)
        q, k = torch.randn(128, 128, generator=gen), torch.randn(m0 + 128, 128, generator=gen)
        scores = (q @ k.T) * (128 ** -0.5 * math.log2(math.e))  # log2 units
        rows = torch.arange(m0, m0 + 128)[:, None]
        scores = scores.masked_fill(torch.arange(m0 + 128)[None, :] > rows, float("-inf"))
        blocks = scores.split(128, dim=1)[::-1]
        row_max = blocks[0].max(dim=1).values
        for block in blocks[1:]:
            partial = torch.exp2(block - row_max[:, None]).reshape(128, 16, 4, 2).sum(dim=(1, 3))
            warp_ok = (partial <= 2 ** threshold).all(dim=1).reshape(8, 16).all(dim=1)
            failed += int((~warp_ok).sum())
            block_max = block.max(dim=1).values
            moves = (~warp_ok).repeat_interleave(16) & (block_max - row_max > threshold)
            row_max = torch.where(moves, block_max, row_max)
    return failed


def test_normal_inputs_keep_every_steady_block_at_the_threshold():
    """Each failure of the sums test cost the kernel far more than its instructions
    (bench/results/fa_sm90-ab-2026-11-27-threshold/): at FlashAttention's 8 log2 units
    normal inputs fail it where a row's diagonal block held few keys; at ours, never."""
    assert _steady_sums_failures(8.0) > 0
    assert _steady_sums_failures(RESCALE_THRESHOLD) == 0


def test_a_block_kept_by_the_sums_of_p_is_one_the_threshold_rule_keeps():
    """fa_sm90.cu's steady blocks keep the max, without reducing it, for a warp
    (16 rows) whose rows all have a max and whose threads' partial sums of P (32
    columns each: 8j + 2t + {0, 1}) are at most 2^threshold; the CuIR applies the
    threshold rule alone (cuir.py). Wherever the CUDA's test passes, the rule
    must keep the max too, with the same P and factor 1."""
    kernel = _bind(FaSm90(), 1, 1, 1, 64, 128)
    kernel.scale = 1.0
    gen = torch.Generator().manual_seed(3)
    allowed = torch.ones(64, 128, dtype=torch.bool)
    kept_by_sums = 0
    for trial in range(40):
        state = kernel.softmax_state(64, RESCALE_THRESHOLD)
        kernel.normalize(state, torch.randn(64, 128, generator=gen) * 2, allowed)
        old = state.row_max.clone()
        # per warp a rise of up to 2 log2 units past the threshold, in a few columns or many
        rise = ((torch.rand(4, generator=gen) * (RESCALE_THRESHOLD + 2)).repeat_interleave(16)
                [:, None] / state.to_log2)
        s = old[:, None] + torch.randn(64, 128, generator=gen) * 0.5 / state.to_log2 + rise * (
            torch.rand(64, 128, generator=gen) < 0.05 * (1 + trial % 4))
        at_old = torch.exp2((s - old[:, None]) * state.to_log2)
        partial = at_old.reshape(64, 16, 4, 2).sum(dim=(1, 3))  # [rows, 4 threads]
        warp_kept = ((partial <= 2 ** RESCALE_THRESHOLD).all(dim=1)
                     .reshape(4, 16).all(dim=1).repeat_interleave(16))
        p, rescale = kernel.normalize(state, s, allowed)
        assert torch.equal(state.row_max[warp_kept], old[warp_kept])
        assert torch.equal(rescale[warp_kept], torch.ones(int(warp_kept.sum())))
        assert torch.allclose(p[warp_kept], at_old[warp_kept], rtol=1e-5)
        kept_by_sums += int(warp_kept.sum())
    assert 0 < kept_by_sums < 40 * 64  # both outcomes occurred
