"""Synchronisation: mbarrier-like `Barrier`s and named (bar.sync) barriers.

Both carry vector clocks: whatever a worker did before it arrived is ordered
before whatever a waiter does after the phase it waited for completed. The
memory hazard checks rely on that ordering.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cubridge.ir.errors import ProgramError, SourceLoc, SyncError, caller_loc
from cubridge.ir.scheduler import current_worker

if TYPE_CHECKING:
    from cubridge.ir.scheduler import AsyncOp, Worker


def _join(into: dict[str, int], vc: dict[str, int]) -> None:
    for k, t in vc.items():
        if into.get(k, 0) < t:
            into[k] = t


class Barrier:
    """An mbarrier in shared memory (8 bytes): a phase completes when `count`
    arrivals have happened and every expected transaction byte has landed.

    Create it in `run()` with `self.barrier(count, name)` (or
    `self.barriers(n, count, name)` for one per pipeline stage). Phases are
    numbered 0, 1, 2...; `wait(parity)` takes the parity (0 or 1) of the phase
    to wait for, as `mbarrier.try_wait.parity` does: it returns once the
    barrier's current phase has a parity different from `parity`, so on a
    fresh barrier `wait(0)` blocks until phase 0 completes and `wait(1)`
    returns at once (the producer's first wait on an "empty" barrier). So a
    phase that completes while nobody has waited for the one before it is a
    SyncError: a wait made after that could not tell the two apart (a role a
    whole ring ahead of the barrier's waiter).
    """

    def __init__(self, count: int, name: str, loc: SourceLoc):
        if not isinstance(count, int) or count < 1:
            raise ProgramError(f"barrier {name}: arrival count must be a positive int, "
                               f"got {count!r}", loc=loc)
        self.count = count
        self.name = name
        self.loc = loc
        self.phase = 0  # phases completed so far; the current phase's parity is phase % 2
        self.pending = count  # arrivals the current phase still needs
        self.tx = 0  # transaction bytes the current phase still expects
        self.vc: dict[str, int] = {}
        self.completed_vc: dict[str, int] = {}
        self.arrivals: list[tuple[str, SourceLoc]] = []  # of the current phase
        self.expects: list[SourceLoc] = []
        self.observed = -1  # the latest completed phase some wait has returned for

    def arrive(self) -> None:
        """Arrive once on the current phase (one elected thread of the calling
        worker arrives; `count` counts such arrivals). Everything the worker
        did before is visible to workers that wait for this phase."""
        w, loc = _point()
        self._arrive(w, loc)

    def arrive_expect_tx(self, nbytes: int) -> None:
        """Add `nbytes` to the bytes the current phase expects, then arrive once.
        The phase cannot complete until copy_async operations signalling this
        barrier have landed exactly that many bytes."""
        w, loc = _point()
        self.expect_tx_bytes(nbytes, w, loc)
        self._arrive(w, loc)

    def expect_tx(self, nbytes: int) -> None:
        """Add `nbytes` to the bytes the current phase expects, without arriving."""
        w, loc = _point()
        self.expect_tx_bytes(nbytes, w, loc)

    def wait(self, phase: int) -> None:
        """Block until the phase of parity `phase` (0 or 1) has completed, i.e.
        until the barrier's current phase parity differs from `phase`."""
        w, loc = _point()
        if phase not in (0, 1):
            raise ProgramError(f"barrier {self.name}: wait takes a phase parity 0 or 1, "
                               f"got {phase!r}", loc=loc, worker=w.name)
        w.sched.block(w, lambda: self.phase % 2 != phase, lambda: self._describe(phase))
        self.observed = max(self.observed, self.phase - 1)
        w.acquire(self.completed_vc)

    def try_wait(self, phase: int) -> bool:
        """True if the phase of parity `phase` has completed; never blocks. A
        False lets other workers run before the caller polls again."""
        w, loc = _point()
        done = self.phase % 2 != phase
        if done:
            self.observed = max(self.observed, self.phase - 1)
            w.acquire(self.completed_vc)
        elif w.sched is not None:
            w.sched.spin(w, lambda: f"polling barrier {self.name} with try_wait({phase})")
        return done

    # -- executor side ----------------------------------------------------------------

    def expect_tx_bytes(self, nbytes: int, w: Worker, loc: SourceLoc) -> None:
        if not isinstance(nbytes, int) or nbytes <= 0:
            raise ProgramError(f"barrier {self.name}: expect_tx bytes must be a positive int, "
                               f"got {nbytes!r}", loc=loc, worker=w.name)
        self.tx += nbytes
        self.expects.append(loc)

    def _arrive(self, w: Worker, loc: SourceLoc) -> None:
        _join(self.vc, w.vc)
        w.release()
        self.pending -= 1
        self.arrivals.append((w.name, loc))
        self._maybe_complete(loc, w.name)

    def complete_tx(self, nbytes: int, op: AsyncOp) -> None:
        """A copy signalling this barrier landed `nbytes`."""
        self.tx -= nbytes
        _join(self.vc, op.vc)
        self._maybe_complete(op.loc, op.worker.name)

    def _maybe_complete(self, loc: SourceLoc, worker: str) -> None:
        if self.pending > 0:
            return
        if self.tx < 0:
            exp = self.expects[-1] if self.expects else None
            raise SyncError(
                f"barrier {self.name}: {-self.tx} more transaction bytes landed in phase "
                f"{self.phase} than arrive_expect_tx announced"
                + (f" (last expect_tx at {exp})" if exp else "")
                + ": expect_tx byte count does not match the copies", loc=loc, worker=worker)
        if self.tx > 0:
            return
        if self.phase > 0 and self.observed < self.phase - 1:
            # A wait goes by parity: one for the phase before, made after this one
            # completes, would take this phase for it (or block for the next).
            raise SyncError(
                f"barrier {self.name}: phase {self.phase} completes while nobody has waited "
                f"for phase {self.phase - 1}, so a wait for parity {(self.phase - 1) % 2} can "
                "no longer find it: whoever completes this phase ran a whole phase ahead of "
                "that barrier's waiter (a missing wait on the barrier that should hold it "
                "back)", loc=loc, worker=worker)
        self.phase += 1
        self.pending = self.count
        self.completed_vc = self.vc
        self.vc = {}
        self.arrivals = []
        self.expects = []

    def _describe(self, parity: int) -> str:
        state = f"{self.count - self.pending} of {self.count} arrivals"
        if self.tx > 0:
            state += f", {self.tx} transaction bytes not landed"
        return (f"waiting on barrier {self.name} for the phase of parity {parity} "
                f"(current phase {self.phase}: {state})")

    def end_of_cta_problem(self) -> str | None:
        if self.pending != self.count or self.tx != 0:
            who = ", ".join(f"{n} at {loc}" for n, loc in self.arrivals) or "none"
            return (f"barrier {self.name} (created at {self.loc}) ends the CTA mid-phase: "
                    f"{self.count - self.pending} of {self.count} arrivals ({who}), "
                    f"{self.tx} transaction bytes outstanding: arrival counts are inconsistent")
        return None

    def __repr__(self) -> str:
        return f"Barrier({self.name}, count={self.count})"


class NamedBarrier:
    """A hardware named barrier (`bar.sync id, threads` / `bar.arrive`): a phase
    completes when `threads` threads have arrived. `sync()` arrives and waits;
    `arrive()` arrives without waiting (the producer side of warpgroup
    ordering). A worker arrives with all its threads (32 per warp). Create it
    in `run()` with `self.named_barrier(threads, name)`."""

    def __init__(self, threads: int, name: str, loc: SourceLoc):
        if not isinstance(threads, int) or threads < 32 or threads % 32:
            raise ProgramError(f"named barrier {name}: thread count must be a positive multiple "
                               f"of 32, got {threads!r}", loc=loc)
        self.threads = threads
        self.name = name
        self.loc = loc
        self.phase = 0
        self.arrived = 0
        self.vc: dict[str, int] = {}
        self.completed_vc: dict[str, int] = {}
        self.arrivals: list[tuple[str, SourceLoc]] = []
        self.open_at_exit = False  # may end the CTA mid-phase (a token's last pass)

    def sync(self) -> None:
        """Arrive with the worker's threads and wait until the phase completes."""
        w, loc = _point()
        target = self.phase + 1
        self._arrive(w, loc)
        w.sched.block(w, lambda: self.phase >= target,
                      lambda: (f"in sync on named barrier {self.name} ({self.arrived} of "
                               f"{self.threads} threads arrived)"))
        w.acquire(self.completed_vc)
        w.sync_epoch += 1

    def arrive(self) -> None:
        """Arrive with the worker's threads without waiting."""
        w, loc = _point()
        self._arrive(w, loc)

    def _arrive(self, w: Worker, loc: SourceLoc) -> None:
        if self.arrived + w.threads > self.threads:
            raise SyncError(f"named barrier {self.name}: {w.name} brings {w.threads} threads to a "
                            f"phase that already has {self.arrived} of {self.threads}",
                            loc=loc, worker=w.name)
        _join(self.vc, w.vc)
        w.release()
        self.arrived += w.threads
        self.arrivals.append((w.name, loc))
        if self.arrived == self.threads:
            self.phase += 1
            self.arrived = 0
            self.completed_vc = self.vc
            self.vc = {}
            self.arrivals = []

    def end_of_cta_problem(self) -> str | None:
        if self.arrived and not self.open_at_exit:
            who = ", ".join(f"{n} at {loc}" for n, loc in self.arrivals)
            return (f"named barrier {self.name} ends the CTA mid-phase: {self.arrived} of "
                    f"{self.threads} threads arrived ({who})")
        return None


def _point() -> tuple[Worker, SourceLoc]:
    w = current_worker()
    loc = caller_loc()
    if w.sched is not None:
        w.sched.point(w, loc)
    return w, loc
