"""Workers as coroutines and the scheduler that interleaves them.

Each bound worker (a warp role) runs its method in its own thread, but only
one thread ever runs at a time: a worker runs until it reaches a scheduling
point (every primitive call is one), where the policy decides who runs next
and which in-flight async operations land. Threads are used only as
coroutines, so a CuIR worker is plain Python with no `yield`.

Policies:
- eager: keep running the current worker until it blocks; async operations
  land at the first scheduling point after they are issued;
- delayed: switch worker at every scheduling point (round robin, starting
  from the last bound worker); async operations land only when every worker
  is blocked, oldest first, or when their issuer waits for them;
- random:SEED: a seeded random worker at every point; each in-flight operation
  lands with probability 1/3 at each point.
"""

from __future__ import annotations

import os
import random
import threading
import traceback
from collections.abc import Callable
from typing import Any

from cubridge.ir import errors
from cubridge.ir.errors import CuIRError, DeadlockError, ProgramError, SourceLoc, caller_loc

_local = threading.local()
_IR_DIR = os.path.dirname(os.path.abspath(__file__))

POLICIES = ("eager", "delayed", "random:0", "random:1")


class _Abort(BaseException):
    """Unwinds a parked worker thread when its CTA is torn down after an error."""


class AsyncOp:
    """An operation in flight (a copy or a gemm_async): it lands when the
    scheduler decides, or at the latest when its issuer waits for it."""

    def __init__(self, worker: Worker, loc: SourceLoc, what: str):
        self.worker = worker
        self.loc = loc
        self.what = what
        self.vc = dict(worker.vc)
        self.landed = False

    def land(self) -> None:
        if self.landed:
            return
        self.landed = True
        self.worker.sched.pending.remove(self)
        self._complete()

    def _complete(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


class Worker:
    """One bound warp role: its method, its warps, its vector clock and its
    async groups."""

    def __init__(self, sched: Scheduler | None, name: str, fn: Callable[..., Any], args: tuple,
                 warps: int, loc: SourceLoc | None):
        self.sched = sched
        self.name = name
        self.fn = fn
        self.args = args
        self.warps = warps
        self.bind_loc = loc
        self.vc: dict[str, int] = {name: 1}
        self.sync_epoch = 0  # bumped by every bar.sync the worker's warps pass
        self.state = "new"  # new | ready | blocked | done
        self.block_cond: Callable[[], bool] | None = None
        self.block_desc: Callable[[], str] | None = None
        self.loc: SourceLoc | None = loc
        self.go = threading.Semaphore(0)
        self.thread: threading.Thread | None = None
        # async groups: open ops, then committed groups oldest first
        self.open_gemms: list[AsyncOp] = []
        self.gemm_groups: list[list[AsyncOp]] = []
        self.open_copies: list[AsyncOp] = []
        self.copy_groups: list[list[AsyncOp]] = []
        self.issued = 0  # gemm_async ops issued, for their in-order completion

    @property
    def threads(self) -> int:
        return self.warps * 32

    @property
    def epoch(self) -> int:
        return self.vc[self.name]

    def release(self) -> None:
        """A release operation (an arrive): later accesses are a new epoch."""
        self.vc[self.name] += 1

    def acquire(self, vc: dict[str, int]) -> None:
        for k, t in vc.items():
            if self.vc.get(k, 0) < t:
                self.vc[k] = t

    def knows(self, other: Worker, epoch: int) -> bool:
        """Is `other`'s access at `epoch` ordered before this worker's present?"""
        return other is self or self.vc.get(other.name, 0) >= epoch

    def __repr__(self) -> str:
        return f"Worker({self.name})"


def current_worker() -> Worker:
    w = getattr(_local, "worker", None)
    if w is None:
        raise ProgramError("a CuIR primitive was called outside a kernel's run() or workers",
                           loc=caller_loc())
    return w


def set_current_worker(w: Worker | None) -> None:
    _local.worker = w


def _current_worker_name() -> str | None:
    w = getattr(_local, "worker", None)
    return w.name if w is not None else None


errors.current_worker_name = _current_worker_name


class Policy:
    name = "policy"

    def land_at_point(self, sched: Scheduler) -> None:
        pass

    def choose(self, sched: Scheduler, current: Worker, runnable: list[Worker]) -> Worker:
        raise NotImplementedError

    def forced(self, pending: list[AsyncOp]) -> AsyncOp:
        return pending[0]

    def first(self, workers: list[Worker]) -> Worker:
        return workers[0]


class Eager(Policy):
    name = "eager"

    def land_at_point(self, sched: Scheduler) -> None:
        while sched.pending:
            sched.pending[0].land()

    def choose(self, sched: Scheduler, current: Worker, runnable: list[Worker]) -> Worker:
        if current in runnable:
            return current
        return _next_in_order(sched.workers, current, runnable)


class Delayed(Policy):
    name = "delayed"

    def choose(self, sched: Scheduler, current: Worker, runnable: list[Worker]) -> Worker:
        return _next_in_order(sched.workers, current, runnable)

    def first(self, workers: list[Worker]) -> Worker:
        return workers[-1]


class Random(Policy):
    def __init__(self, seed: int):
        self.name = f"random:{seed}"
        self.rng = random.Random(seed)

    def land_at_point(self, sched: Scheduler) -> None:
        for op in [op for op in sched.pending if self.rng.random() < 1 / 3]:
            op.land()

    def choose(self, sched: Scheduler, current: Worker, runnable: list[Worker]) -> Worker:
        return self.rng.choice(runnable)

    def forced(self, pending: list[AsyncOp]) -> AsyncOp:
        return self.rng.choice(pending)

    def first(self, workers: list[Worker]) -> Worker:
        return self.rng.choice(workers)


def _next_in_order(order: list[Worker], current: Worker, runnable: list[Worker]) -> Worker:
    i = order.index(current) if current in order else -1
    n = len(order)
    for step in range(1, n + 1):
        w = order[(i + step) % n]
        if w in runnable:
            return w
    return runnable[0]


def make_policy(policy: str | Policy) -> Policy:
    """'eager', 'delayed', 'random' (seed 0) or 'random:SEED'."""
    if isinstance(policy, Policy):
        return policy
    if policy == "eager":
        return Eager()
    if policy == "delayed":
        return Delayed()
    if policy == "random":
        return Random(0)
    if policy.startswith("random:") and policy[7:].isdigit():
        return Random(int(policy[7:]))
    raise ValueError(f"unknown scheduling policy {policy!r}: use 'eager', 'delayed', "
                     "'random' or 'random:SEED' (or 'all' where accepted)")


class Scheduler:
    """Runs the bound workers of one CTA to completion under a policy."""

    def __init__(self, policy: Policy, cta_label: str):
        self.policy = policy
        self.cta_label = cta_label
        self.workers: list[Worker] = []
        self.pending: list[AsyncOp] = []
        self.error: BaseException | None = None
        self.abort = False
        self.done = threading.Event()
        self.started = False

    # -- called by primitives, with the baton held --------------------------------------

    def point(self, w: Worker, loc: SourceLoc) -> None:
        """A scheduling point before a primitive runs."""
        w.loc = loc
        if not self.started:
            return
        self._schedule(w)

    def block(self, w: Worker, cond: Callable[[], bool], desc: Callable[[], str]) -> None:
        """Block `w` until `cond()` holds; other workers and landings run meanwhile."""
        if cond():
            return
        if not self.started:
            raise ProgramError(f"run() would block: {desc()}; only bound workers may wait",
                               loc=w.loc, worker=w.name)
        w.state = "blocked"
        w.block_cond, w.block_desc = cond, desc
        self._schedule(w)

    def spin(self, w: Worker, desc: Callable[[], str]) -> None:
        """A failed poll (try_wait): let another worker or an in-flight op make
        progress, whatever the policy, so that a polling loop cannot starve
        the others; with nothing else able to move, the poll can never succeed."""
        if not self.started:
            return
        others = [x for x in self._runnable() if x is not w]
        if others:
            nxt = _next_in_order(self.workers, w, others)
            nxt.state = "ready"
            nxt.block_cond = nxt.block_desc = None
            nxt.go.release()
            self._park(w)
        elif self.pending:
            self.policy.forced(self.pending).land()
        else:
            w.state, w.block_desc = "blocked", desc
            report = self.deadlock_report()
            w.state, w.block_desc = "ready", None
            raise DeadlockError(report, loc=w.loc, worker=w.name)

    def add_pending(self, op: AsyncOp) -> None:
        self.pending.append(op)

    # -- the baton ------------------------------------------------------------------------

    def _runnable(self) -> list[Worker]:
        out = []
        for x in self.workers:
            if x.state == "ready" or (x.state == "blocked" and x.block_cond is not None
                                      and x.block_cond()):
                out.append(x)
        return out

    def _schedule(self, w: Worker) -> None:
        self.policy.land_at_point(self)
        while True:
            runnable = self._runnable()
            if runnable:
                break
            if self.pending:
                self.policy.forced(self.pending).land()
                continue
            if any(x.state != "done" for x in self.workers):
                self.error = DeadlockError(self.deadlock_report(), loc=w.loc, worker=w.name)
            self.done.set()
            if w.state == "done":
                return
            self._park(w)
            return
        nxt = self.policy.choose(self, w, runnable)
        nxt.state = "ready"
        nxt.block_cond = nxt.block_desc = None
        if nxt is w:
            return
        nxt.go.release()
        if w.state != "done":
            self._park(w)

    def _park(self, w: Worker) -> None:
        w.go.acquire()
        if self.abort:
            raise _Abort()

    def deadlock_report(self) -> str:
        lines = [f"every worker of CTA {self.cta_label} is blocked and nothing is in flight:"]
        for x in self.workers:
            where = f" at {x.loc}" if x.loc else ""
            if x.state == "done":
                lines.append(f"  {x.name}: finished")
            elif x.state == "blocked" and x.block_desc is not None:
                lines.append(f"  {x.name}: {x.block_desc()}{where}")
            else:
                lines.append(f"  {x.name}: not started{where}")
        lines.append("  (a wait no arrival will complete: a missing arrive, a wrong phase parity, "
                     "a count larger than the arrivals, or expect_tx of more bytes than copied)")
        return "\n".join(lines)

    # -- running ---------------------------------------------------------------------------

    def run(self, on_worker_exit: Callable[[Worker], None]) -> None:
        if not self.workers:
            return
        for w in self.workers:
            w.state = "ready"
            w.thread = threading.Thread(target=self._thread_main, args=(w, on_worker_exit),
                                        name=f"cuir-{w.name}", daemon=True)
            w.thread.start()
        self.started = True
        self.policy.first(self.workers).go.release()
        self.done.wait()
        self.abort = True
        for w in self.workers:
            if w.state != "done":
                w.go.release()
        for w in self.workers:
            assert w.thread is not None
            w.thread.join()
        if self.error is not None:
            raise self.error

    def _thread_main(self, w: Worker, on_exit: Callable[[Worker], None]) -> None:
        set_current_worker(w)
        w.go.acquire()
        if self.abort:
            return
        try:
            w.fn(*w.args)
            on_exit(w)
            w.state = "done"
            self._schedule(w)
        except _Abort:
            return
        except CuIRError as e:
            self._fail(e)
        except Exception as e:  # a Python error in the kernel's code: point at its IR line
            self._fail(ProgramError(f"{type(e).__name__}: {e}", loc=_ir_frame(e) or w.loc,
                                    worker=w.name))

    def _fail(self, e: BaseException) -> None:
        if self.error is None:
            self.error = e
        self.done.set()


def _ir_frame(e: BaseException) -> SourceLoc | None:
    """The innermost traceback frame in kernel code (not the executor, not torch)."""
    best = None
    for frame, lineno in traceback.walk_tb(e.__traceback__):
        path = os.path.abspath(frame.f_code.co_filename)
        if os.path.dirname(path) == _IR_DIR or "site-packages" in path or "/torch/" in path:
            continue
        best = SourceLoc(frame.f_code.co_filename, lineno, frame.f_code.co_name)
    return best
