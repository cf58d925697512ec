"""Deliberately broken programs must be rejected, each with a message naming
the IR line and the worker.

Most are mutants of the reference programs: one line of fa_sm90/cuir.py or
fa_sm80/cuir.py is changed, the mutant is written to a file and imported, so
the line the error must name is a real line of a real file.
"""

from __future__ import annotations

import importlib.util
import inspect
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from cubridge.ir import (
    POLICIES,
    CuIRError,
    DeadlockError,
    HazardError,
    RaceError,
    StaticCheckError,
    SyncError,
    attention_fn,
    check,
)
from cubridge.kernels.fa_sm80 import cuir as sm80_module
from cubridge.kernels.fa_sm80.cuir import FaSm80
from cubridge.kernels.fa_sm90 import cuir as sm90_module
from cubridge.kernels.fa_sm90.cuir import FaSm90

SM90 = Path(sm90_module.__file__)
SM80 = Path(sm80_module.__file__)


@dataclass(frozen=True)
class Expect:
    """One acceptable rejection: error type, the line (by its text) and the worker."""

    error: type[CuIRError]
    line: str
    worker: str


@dataclass(frozen=True)
class Mutant:
    name: str
    source: Path
    old: str
    new: str
    expect: tuple[Expect, ...]


# What a wait on the ring looks like from the producer, for deadlock reports.
PRODUCER_K_EMPTY = Expect(DeadlockError, "self.k_empty[i].wait(slot.phase)", "producer")
QK_GEMM = "self.gemm_async(q, self.k_s[slot.index]"

MUTANTS = [
    Mutant("missing_wait_on_full_barrier", SM90,
           "            self.k_full[slot.index].wait(slot.phase)\n", "",
           (Expect(HazardError, QK_GEMM, "consumer0"), Expect(HazardError, QK_GEMM, "consumer1"),
            # the BlockInfo word is read before the S product: caught there first
            Expect(HazardError, "self.load(self.info_s[slot.index])", "consumer0"),
            Expect(HazardError, "self.load(self.info_s[slot.index])", "consumer1"))),
    Mutant("wrong_phase", SM90,
           "self.k_full[slot.index].wait(slot.phase)",
           "self.k_full[slot.index].wait(slot.phase ^ 1)",
           (Expect(HazardError, QK_GEMM, "consumer0"), Expect(HazardError, QK_GEMM, "consumer1"),
            Expect(HazardError, "self.load(self.info_s[slot.index])", "consumer0"),
            Expect(HazardError, "self.load(self.info_s[slot.index])", "consumer1"),
            Expect(DeadlockError, "self.k_full[slot.index].wait(slot.phase ^ 1)", "consumer0"))),
    Mutant("stage_overwritten_before_release", SM90,
           "            self.k_empty[i].wait(slot.phase)\n", "",
           (Expect(HazardError, "self.copy_async(self.k_s[i]", "producer"),
            # the producer's BlockInfo word shares K's slot: its store is caught first
            Expect(HazardError, "self.store(self.info_s[i]", "producer"),
            # (eager: the producer a whole phase of k_full ahead of its waiters)
            Expect(SyncError, "self.copy_async(self.k_s[i]", "producer"))),
    Mutant("missing_arrive_deadlock", SM90,
           "            self.k_empty[slot.index].arrive()\n", "", (PRODUCER_K_EMPTY,)),
    Mutant("expect_tx_too_few_bytes", SM90,
           "self.k_full[i].arrive_expect_tx(self.k_s[i].nbytes)",
           "self.k_full[i].arrive_expect_tx(self.k_s[i].nbytes // 2)",
           (Expect(SyncError, "self.copy_async(self.k_s[i]", "producer"),)),
    Mutant("expect_tx_too_many_bytes", SM90,
           "self.k_full[i].arrive_expect_tx(self.k_s[i].nbytes)",
           "self.k_full[i].arrive_expect_tx(self.k_s[i].nbytes * 2)", (PRODUCER_K_EMPTY,)),
    Mutant("read_of_pending_async_copy", SM80,
           "self.copy_wait(in_flight)  # K(n_i)", "self.copy_wait(in_flight + 1)  # K(n_i)",
           (Expect(HazardError, "self.gemm(self.q_s, self.k_s[slot]", "attention"),)),
    Mutant("missing_wait_group", SM90,
           "            self.wait_group(1 if prev is not None else 0)  # S(n) ready; PV may be in "
           "flight\n", "",
           (Expect(HazardError, "s, allowed = self.scores(s_acc", "consumer0"),)),
    Mutant("release_before_wait_group", SM90,
           "                self.wait_group(0)  # PV of the previous block retired: release its "
           "V slot\n                self.v_empty[prev.index].arrive()\n",
           "                self.v_empty[prev.index].arrive()\n"
           "                self.wait_group(0)\n",
           (Expect(HazardError, "self.copy_async(self.v_s[i]", "v_loader"),)),
    Mutant("missing_sync_threads_before_reuse", SM80,
           "                self.sync_threads()  # ... and every warp is done reading K(n_i)'s "
           "slot\n", "",
           (Expect(HazardError, "self.copy_async(self.k_s[slot], src)", "attention"),)),
    Mutant("missing_sync_threads_after_copy_wait", SM80,
           "                self.sync_threads()\n                load_v(i + ahead",
           "                load_v(i + ahead",
           (Expect(HazardError, "self.gemm(self.q_s, self.k_s[slot]", "attention"),)),
    Mutant("extra_arrive", SM90,
           "            self.k_empty[slot.index].arrive()\n",
           "            self.k_empty[slot.index].arrive()\n" * 2,
           (Expect(HazardError, "self.copy_async(self.k_s[i]", "producer"),
            Expect(HazardError, "self.store(self.info_s[i]", "producer"), PRODUCER_K_EMPTY)),
]


def _load_mutant(m: Mutant, tmp_path: Path) -> tuple[type, Path]:
    src = m.source.read_text()
    assert src.count(m.old) == 1, f"{m.name}: the mutated text must occur once in {m.source}"
    path = tmp_path / f"mutant_{m.name}.py"
    path.write_text(src.replace(m.old, m.new))
    spec = importlib.util.spec_from_file_location(f"mutant_{m.name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cls = getattr(module, "FaSm90", None) or module.FaSm80
    return cls, path


def _line(path: Path, text: str) -> int:
    hits = [i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line]
    assert len(hits) == 1, f"{text!r} occurs {len(hits)} times in {path}"
    return hits[0]


def _matches(err: CuIRError, expect: Expect, path: Path) -> bool:
    msg = str(err)
    return (isinstance(err, expect.error) and f"{path.name}:{_line(path, expect.line)}" in msg
            and f"{expect.worker}" in msg)


def _problem() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, 2, 256, 64, generator=gen).bfloat16()
    k, v = (torch.randn(1, 1, 600, 64, generator=gen).bfloat16() for _ in range(2))
    return q, k, v


@pytest.mark.slow
@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_mutant_is_rejected_under_every_policy(mutant: Mutant, tmp_path: Path) -> None:
    cls, path = _load_mutant(mutant, tmp_path)
    for policy in POLICIES:
        with pytest.raises(CuIRError) as info:
            attention_fn(cls, policy=policy)(*_problem())
        err = info.value
        assert err.loc is not None and err.worker is not None
        assert any(_matches(err, e, path) for e in mutant.expect), (
            f"{mutant.name} under {policy}: unexpected rejection:\n{err}")


def test_deadlock_report_shows_every_worker_position(tmp_path: Path) -> None:
    cls, path = _load_mutant(MUTANTS[3], tmp_path)  # missing arrive
    with pytest.raises(DeadlockError) as info:
        attention_fn(cls, policy="delayed")(*_problem())
    msg = str(info.value)
    assert "producer: waiting on barrier k_empty[0]" in msg
    assert f"{path.name}:{_line(path, 'self.k_empty[i].wait(slot.phase)')}" in msg
    for consumer in ("consumer0", "consumer1"):
        assert f"{consumer}: waiting on barrier k_full" in msg


@pytest.mark.slow
def test_race_that_shows_under_one_policy_only_is_caught_by_comparing_policies(
        tmp_path: Path) -> None:
    # consumer1 computes its row offset wrongly and stores over consumer0's rows:
    # which value survives depends on who stores last.
    m = Mutant("overlapping_stores", SM90, "row0 = m_block * self.block_m + wg * rows",
               "row0 = m_block * self.block_m + wg * rows * (1 - wg)", ())
    cls, path = _load_mutant(m, tmp_path)
    # The mma token usually orders consumer0's epilogue first: a problem on which
    # one of the policies lets consumer1 store first (one CTA walking 4 tiles;
    # found by trying small problems, again when the V loader changed the schedule).
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, 1, 512, 64, generator=gen).bfloat16()
    k, v = (torch.randn(1, 1, 300, 64, generator=gen).bfloat16() for _ in range(2))
    for policy in POLICIES:  # no single run can see it
        attention_fn(cls, policy=policy, num_sms=1)(q, k, v)
    with pytest.raises(RaceError) as info:
        attention_fn(cls, policy="all", num_sms=1)(q, k, v)
    msg = str(info.value)
    assert "depends on the scheduling policy" in msg
    # (the epilogue's call of the two-Q-buffer boundary: the one these tiles take)
    stores = [i for i, line in enumerate(path.read_text().splitlines(), 1)
              if "self.epilogue(softmax, o_acc, b, h, row0, rows)" in line]
    assert len(stores) == 2 and f"{path.name}:{stores[1]}" in msg
    assert "consumer0" in msg and "consumer1" in msg


def _run_line(cls: type, text: str) -> int:
    lines, start = inspect.getsourcelines(cls)
    hits = [start + i for i, line in enumerate(lines) if text in line]
    assert len(hits) == 1
    return hits[0]


def test_shared_memory_over_budget_names_the_alloc() -> None:
    q = torch.randn(1, 1, 128, 128).bfloat16()
    with pytest.raises(StaticCheckError) as info:
        attention_fn(FaSm90, stages=4)(q, q, q)  # Q 32 KB + K, V 4 x 32 KB each > 227 KB
    msg = str(info.value)
    assert "over budget" in msg and "227 KB" in msg and "worker run()" in msg
    assert f"cuir.py:{_run_line(FaSm90, 'self.v_s = self.alloc(')}" in msg
    with pytest.raises(StaticCheckError, match="163 KB per CTA on sm80"):
        check(FaSm80, block_n=256)


def test_illegal_wgmma_shape_names_the_gemm() -> None:
    q = torch.randn(1, 1, 128, 64).bfloat16()
    with pytest.raises(StaticCheckError) as info:
        attention_fn(FaSm90, block_n=100)(q, q, q)
    msg = str(info.value)
    assert "illegal wgmma" in msg and "N=100" in msg and "worker consumer" in msg
    assert f"cuir.py:{_run_line(FaSm90, QK_GEMM)}" in msg


def test_illegal_mma_sync_shape_and_missing_instruction() -> None:
    with pytest.raises(StaticCheckError, match="M=96 is not a multiple of 16 x 4 warps"):
        check(FaSm80, block_m=96)
    with pytest.raises(StaticCheckError, match="gemm_async \\(wgmma\\) does not exist on sm80"):
        check(FaSm90, arch="sm80", head_dim=64)  # D=128 is over sm80's shared memory
