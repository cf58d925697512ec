"""Executor semantics on small purpose-built kernels: barrier phases, named
barriers, async groups, policies, ownership and error locations."""

from __future__ import annotations

import inspect

import pytest
import torch

from cubridge.ir import (
    GMEM,
    POLICIES,
    RMEM,
    SMEM,
    DeadlockError,
    HazardError,
    KernelBase,
    PipelineState,
    ProgramError,
    StaticCheckError,
    SyncError,
    execute,
)
from cubridge.ir import tile_math as tm


def _line(fn, text: str) -> str:
    lines, start = inspect.getsourcelines(fn)
    hits = [start + i for i, line in enumerate(lines) if text in line]
    assert len(hits) == 1, text
    return f"test_executor.py:{hits[0]}"


def _inputs(sq: int = 64, sk: int = 64, d: int = 64) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(0)
    return (torch.randn(1, 1, sq, d, generator=gen).bfloat16(),
            torch.randn(1, 1, sk, d, generator=gen).bfloat16(),
            torch.randn(1, 1, sk, d, generator=gen).bfloat16())


class CopyThrough(KernelBase):
    """A producer TMA-loads V into SMEM; a consumer stores it to O. The shape
    of every pipeline; subclasses break one thing each."""

    arch = "sm90"
    block_n = 64

    def grid(self):
        return (1,)

    def run(self, _):
        self.buf = self.alloc(SMEM, (64, self.head_dim), self.dtype)
        self.full = self.barrier(1)
        self.bind(self.producer, warpgroup=0)
        self.bind(self.consumer, warpgroup=1)

    def producer(self):
        self.full.arrive_expect_tx(self.buf.nbytes)
        self.copy_async(self.buf, self.v.tile(0, 0, start=0, rows=64), self.full)

    def consumer(self):
        self.full.wait(0)
        self.copy(self.o.tile(0, 0, start=0, rows=64), self.load(self.buf))


@pytest.mark.parametrize("policy", POLICIES)
def test_tma_pipeline_delivers_the_data(policy: str) -> None:
    q, k, v = _inputs()
    out, _ = execute(CopyThrough(), q, k, v, policy=policy)
    assert torch.equal(out, v)


def test_wait_for_the_other_parity_returns_at_once_on_a_fresh_barrier() -> None:
    class WrongParity(CopyThrough):
        def consumer(self):
            self.full.wait(1)  # returns at once: parity 1 "completed" before phase 0
            self.copy(self.o.tile(0, 0, start=0, rows=64), self.load(self.buf))

    with pytest.raises(HazardError) as info:
        execute(WrongParity(), *_inputs(), policy="delayed")
    assert _line(WrongParity.consumer, "self.load(self.buf)") in str(info.value)
    assert "worker consumer" in str(info.value)


def test_a_phase_completed_before_anyone_waited_for_the_one_before_is_a_sync_error() -> None:
    class Lapping(CopyThrough):
        def producer(self):
            self.full.arrive()
            self.full.arrive()  # phase 1, before the consumer saw phase 0

        def consumer(self):
            self.full.wait(0)
            self.full.wait(1)

    # eager runs the producer to its end first: it laps the consumer, whose wait for
    # parity 0 would then find phase 2's parity and block (or take a later phase)
    with pytest.raises(SyncError, match="phase 1 completes while nobody has waited for "
                                        "phase 0") as info:
        execute(Lapping(), *_inputs(), policy="eager")
    assert _line(Lapping.producer, "# phase 1") in str(info.value)
    # with the consumer woken between the arrivals (delayed: a switch at every point)
    # each phase is seen before the next completes
    execute(Lapping(), *_inputs(), policy="delayed")


def test_named_barrier_overflow_and_leftover_arrivals_are_sync_errors() -> None:
    class Leftover(CopyThrough):
        def run(self, _):
            super().run(_)
            self.turn = self.named_barrier(256, "turn")

        def producer(self):
            super().producer()
            self.turn.arrive()  # nobody else ever arrives

    with pytest.raises(SyncError, match="named barrier turn ends the CTA mid-phase: 128 of 256"):
        execute(Leftover(), *_inputs())


def test_unwaited_async_group_at_worker_exit_is_a_static_check_error() -> None:
    class NoWait(KernelBase):
        arch = "sm90"

        def grid(self):
            return (1,)

        def run(self, _):
            self.kt = self.alloc(SMEM, (64, self.head_dim), self.dtype)
            self.bind(self.mma, warpgroup=0)

        def mma(self):
            self.copy(self.kt, self.k.tile(0, 0, start=0, rows=64))
            self.sync_threads()  # per-thread stores are visible to the warpgroup after a sync
            acc = self.alloc(RMEM, (64, 64), torch.float32)
            self.gemm_async(self.kt, self.kt, acc, trans_b=True, accumulate=False)
            self.commit()

    with pytest.raises(StaticCheckError) as info:
        execute(NoWait(), *_inputs())
    msg = str(info.value)
    assert "never waited" in msg and "worker mma" in msg
    assert _line(NoWait.mma, "self.gemm_async(") in msg


def test_deadlock_names_each_worker_and_its_line() -> None:
    class NeverArrives(CopyThrough):
        def producer(self):
            pass

    with pytest.raises(DeadlockError) as info:
        execute(NeverArrives(), *_inputs())
    msg = str(info.value)
    assert "producer: finished" in msg
    assert "consumer: waiting on barrier full for the phase of parity 0" in msg
    assert _line(CopyThrough.consumer, "self.full.wait(0)") in msg


def test_registers_are_private_and_memory_spaces_are_checked() -> None:
    class SharesRegisters(CopyThrough):
        def producer(self):
            self.acc = self.alloc(RMEM, (64, 64), torch.float32)
            self.store(self.acc, tm.full((64, 64), 1.0))
            self.full.arrive_expect_tx(self.buf.nbytes)
            self.copy_async(self.buf, self.v.tile(0, 0, start=0, rows=64), self.full)

        def consumer(self):
            self.full.wait(0)
            self.load(self.acc)

    with pytest.raises(ProgramError, match="in registers of producer; consumer cannot touch it"):
        execute(SharesRegisters(), *_inputs(), policy="eager")

    class GlobalAlloc(CopyThrough):
        def run(self, _):
            self.alloc(GMEM, (4, 4), torch.float32)

    with pytest.raises(ProgramError, match="GMEM is not allocated by kernels"):
        execute(GlobalAlloc(), *_inputs())


def test_python_errors_in_kernel_code_name_the_ir_line() -> None:
    class Typo(CopyThrough):
        def consumer(self):
            self.full.wait(0)
            x = self.load(self.buf)
            self.copy(self.o.tile(0, 0, start=0, rows=64), x @ x)  # 64x64 @ 64x64: shape ok
            self.no_such_primitive()

    with pytest.raises(ProgramError) as info:
        execute(Typo(), *_inputs())
    msg = str(info.value)
    assert "AttributeError" in msg and _line(Typo.consumer, "self.no_such_primitive()") in msg


def test_policies_interleave_differently() -> None:
    order: list[str] = []

    class Chatty(CopyThrough):
        def run(self, _):
            self.buf = self.alloc(SMEM, (64, self.head_dim), self.dtype)
            self.full = self.barrier(1)
            for i in range(3):
                self.bind(self.talker, i, warps=1, name=f"w{i}")

        def talker(self, i):
            for _ in range(3):
                order.append(f"w{i}")
                self.sync_threads()

    traces = {}
    for policy in POLICIES:
        order.clear()
        execute(Chatty(), *_inputs(), policy=policy)
        traces[policy] = list(order)
        assert sorted(order) == sorted([f"w{i}" for i in range(3)] * 3)
    assert len({tuple(t) for t in traces.values()}) >= 3, traces


def test_copy_async_zero_fills_rows_past_the_end_and_counts_their_bytes() -> None:
    q, k, v = _inputs(sk=40)
    out, _ = execute(CopyThrough(), torch.cat([q] * 1, 2), k, v, policy="delayed")
    # v has 40 rows: the 64-row box lands 40 real rows and 24 zero rows, all 64 counted
    assert torch.equal(out[0, 0, :40], v[0, 0])
    assert torch.equal(out[0, 0, 40:64], torch.zeros(24, 64, dtype=v.dtype))


def test_pipeline_state_flips_phase_when_the_ring_wraps() -> None:
    st = PipelineState(3, phase=1)
    seen = []
    for _ in range(7):
        seen.append((st.index, st.phase))
        st.advance()
    assert seen == [(0, 1), (1, 1), (2, 1), (0, 0), (1, 0), (2, 0), (0, 1)]


def test_bad_inputs_get_clear_errors() -> None:
    q, k, v = _inputs()
    with pytest.raises(ValueError, match="float16 or bfloat16"):
        execute(CopyThrough(), q.float(), k.float(), v.float())
    with pytest.raises(ValueError, match="Hq=3 is not a multiple of Hk=2"):
        execute(CopyThrough(), q.expand(1, 3, 64, 64), k.expand(1, 2, 64, 64),
                v.expand(1, 2, 64, 64))
    with pytest.raises(ValueError, match="unknown scheduling policy 'lazy'"):
        execute(CopyThrough(), q, k, v, policy="lazy")
    with pytest.raises(ValueError, match="unexpected \\['bias'\\]"):
        execute(CopyThrough(), q, k, v, aux={"bias": q})


def test_counts_no_bound_worker_can_reach_are_static_check_errors() -> None:
    class TooManyThreads(CopyThrough):
        def run(self, _):
            super().run(_)
            self.turn = self.named_barrier(512, "turn")  # two warpgroups bound: 256 threads

    with pytest.raises(StaticCheckError) as info:
        execute(TooManyThreads(), *_inputs())
    assert "named barrier turn waits for 512 threads but the CTA binds only 256" in str(info.value)
    assert _line(TooManyThreads.run, "self.named_barrier(512") in str(info.value)


@pytest.mark.parametrize("policy", POLICIES)
def test_polling_with_try_wait_lets_the_others_run(policy: str) -> None:
    class Polls(CopyThrough):
        def consumer(self):
            while not self.full.try_wait(0):
                pass
            self.copy(self.o.tile(0, 0, start=0, rows=64), self.load(self.buf))

    q, k, v = _inputs()
    out, _ = execute(Polls(), q, k, v, policy=policy)
    assert torch.equal(out, v)

    class PollsForever(Polls):
        def producer(self):
            pass

    with pytest.raises(DeadlockError, match="polling barrier full with try_wait\\(0\\)"):
        execute(PollsForever(), q, k, v, policy=policy)


def test_errors_from_tile_views_name_the_line_and_worker() -> None:
    class BadStage(CopyThrough):
        def consumer(self):
            self.full.wait(0)
            self.load(self.buf[1])  # buf has no stages

    with pytest.raises(ProgramError) as info:
        execute(BadStage(), *_inputs())
    msg = str(info.value)
    assert "has no stages" in msg and "worker consumer" in msg
    assert _line(BadStage.consumer, "self.load(self.buf[1])") in msg


def test_column_view_of_a_tile_splits_the_head_dim():
    """Tile.cols: a gemm over half of D is the product of the halves (what
    differential attention and MLA's rotary part read)."""
    import torch

    from cubridge.ir import RMEM, SMEM, KernelBase, execute
    from cubridge.ir import tile_math as tm

    class HalfScores(KernelBase):
        def grid(self):
            return (1, 1, 1)

        def run(self, *_):
            self.q_s = self.alloc(SMEM, (16, 32), self.dtype)
            self.k_s = self.alloc(SMEM, (16, 32), self.dtype)
            self.bind(self.work, warps=1)

        def work(self):
            self.copy(self.q_s, self.q.tile(0, 0, start=0, rows=16))
            self.copy(self.k_s, self.k.tile(0, 0, start=0, rows=16))
            self.sync_threads()
            s = self.alloc(RMEM, (16, 16), torch.float32)
            self.gemm(self.q_s.cols(16, 16), self.k_s.cols(16, 16), s, trans_b=True,
                      accumulate=False)
            assert self.q_s.cols(16, 16).shape == (16, 16)
            o = self.alloc(RMEM, (16, 32), torch.float32)
            self.store(o, tm.full((16, 32), 0.0))
            out = torch.zeros(16, 32)
            out[:, :16] = self.load(s)
            self.copy(self.o.tile(0, 0, start=0, rows=16), tm.convert(out, self.dtype))
            self.copy(self.lse.tile(0, 0, start=0, rows=16), tm.full((16,), 0.0))

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, 16, 32, generator=g).to(torch.bfloat16) for _ in range(3))
    out, _ = execute(HalfScores(), q, k, v)
    want = q[0, 0, :, 16:].float() @ k[0, 0, :, 16:].float().T
    assert torch.allclose(out[0, 0, :, :16].float(), want.to(torch.bfloat16).float())

    class OutOfRange(HalfScores):
        def work(self):
            self.q_s.cols(24, 16)

    import pytest

    from cubridge.ir.errors import ProgramError
    with pytest.raises(ProgramError, match=r"cols\(24, 16\) out of range .* with 32 columns"):
        execute(OutOfRange(), q, k, v)


class ClaimedRows(CopyThrough):
    """Four CTAs' worth of 16-row pieces of V copied to O by two CTAs: each CTA's
    first piece is its own index, later ones claimed from a launch counter."""

    def grid(self):
        return (2,)

    def run(self, cta):
        self.counter = self.launch_counter("pieces")
        self.bind(self.worker, cta, warpgroup=0)

    def worker(self, cta):
        piece = cta
        while piece < 4:
            self.copy(self.o.tile(0, 0, start=16 * piece, rows=16),
                      self.v.tile(0, 0, start=16 * piece, rows=16).read())
            piece = 2 + self.atomic_add(self.counter, 0, 1)


def test_launch_counters_are_shared_by_ctas_and_zero_at_each_launch() -> None:
    q, k, v = _inputs()
    kernel = ClaimedRows()
    for _ in range(2):  # a second launch starts from zero again: every piece once more
        out, _ = execute(kernel, q, k, v)
        assert torch.equal(out[0, 0], v[0, 0])
        # two claims past the first wave, then one past the end per CTA
        assert int(kernel._launch_counters["pieces"]._data[0]) == 4


def test_atomics_only_reach_launch_counters() -> None:
    class Stray(ClaimedRows):
        def worker(self, cta):
            self.atomic_add(self.v, 0, 1)

    q, k, v = _inputs()
    with pytest.raises(ProgramError, match="not a launch counter"):
        execute(Stray(), q, k, v)

    class OutOfRange(ClaimedRows):
        def worker(self, cta):
            self.atomic_add(self.counter, 3, 1)

    with pytest.raises(ProgramError, match="index 3 out of range"):
        execute(OutOfRange(), q, k, v)
