"""`KernelBase` and the stateful CuIR primitives: memory, compute, sync and control.

A kernel is a class deriving from `KernelBase`. Its `grid()` gives the CTAs;
`run(*cta)` is the per-CTA prologue: it allocates shared memory and barriers
and binds worker methods to warp roles. After `run()` returns, the bound
workers run concurrently under the executor's scheduler. Every primitive call
is a scheduling point and is checked; errors name the IR line and the worker.
"""

from __future__ import annotations

import linecache
import re
from collections.abc import Callable
from typing import Any, ClassVar

import torch

from cubridge.ir import limits
from cubridge.ir.errors import ProgramError, SourceLoc, StaticCheckError, caller_loc
from cubridge.ir.hooks import BlockKind, HookDefaults
from cubridge.ir.memory import (
    GMEM,
    RMEM,
    SMEM,
    Buffer,
    Global,
    GlobalTile,
    Space,
    Tile,
    check_owner,
    check_read,
    check_write,
    clear_pending,
    mark_pending,
    record_read,
    record_write,
)
from cubridge.ir.scheduler import AsyncOp, Policy, Scheduler, Worker, current_worker
from cubridge.ir.sync import Barrier, NamedBarrier

Operand = Tile | torch.Tensor


class Cta:
    """The state of one CTA while it runs: its scheduler, shared memory and barriers."""

    def __init__(self, kernel: KernelBase, coords: tuple[int, ...], policy: Policy, arch: str):
        self.kernel = kernel
        self.coords = coords
        self.arch = arch
        self.sched = Scheduler(policy, str(coords))
        self.prologue = Worker(self.sched, "run()", kernel.run, coords, warps=1, loc=None)
        self.smem_bytes = 0
        self.buffers: list[Buffer] = []
        self.barriers: list[Barrier] = []
        self.named: list[NamedBarrier] = []
        self.cta_barrier: NamedBarrier | None = None
        self.in_prologue = True
        self.gemms: list[tuple[str, int, int, int, str]] = []  # (kind, M, N, K, worker) seen


class _CopyOp(AsyncOp):
    def __init__(self, w: Worker, loc: SourceLoc, dst: Tile, data: torch.Tensor,
                 barrier: Barrier | None):
        super().__init__(w, loc, "copy_async" + (f" signalling {barrier.name}" if barrier else ""))
        self.dst, self.data, self.barrier = dst, data, barrier

    def _complete(self) -> None:
        self.dst.view().copy_(self.data)
        if self.barrier is not None:
            clear_pending(self.dst, self)
            self.barrier.complete_tx(self.dst.nbytes, self)
        # a cp.async copy stays unreadable until copy_wait retires its group, even
        # if it has landed: the thread has no guarantee before the wait


class _GemmOp(AsyncOp):
    def __init__(self, w: Worker, loc: SourceLoc, a: Operand, b: Tile, acc: Tile, trans_b: bool,
                 accumulate: bool):
        super().__init__(w, loc, "gemm_async")
        self.a, self.b, self.acc = a, b, acc
        self.trans_b, self.accumulate = trans_b, accumulate
        self.seq = 0

    def _complete(self) -> None:
        # wgmma ops of one warpgroup complete in issue order
        for op in list(self.worker.sched.pending):
            if isinstance(op, _GemmOp) and op.worker is self.worker and op is not self:
                if op.seq < self.seq:
                    op.land()
        _mma(self.a, self.b, self.acc, self.trans_b, self.accumulate)


def _value(x: Operand) -> torch.Tensor:
    return x.view() if isinstance(x, Tile) else x


def _mma(a: Operand, b: Operand, acc: Tile, trans_b: bool, accumulate: bool) -> None:
    """acc (fp32) += a @ b with fp16/bf16 operands: products are exact in fp32."""
    av, bv = _value(a).float(), _value(b).float()
    prod = av @ (bv.t() if trans_b else bv)
    out = acc.view()
    if accumulate:
        out.add_(prod)
    else:
        out.copy_(prod)


_ASSIGN = re.compile(r"^\s*(?:self\.)?([A-Za-z_]\w*)\s*(?::[^=]+)?=[^=]")


def _assigned_name(loc: SourceLoc, fallback: str) -> str:
    m = _ASSIGN.match(linecache.getline(loc.file, loc.line))
    return m.group(1) if m else f"{fallback}@{loc.line}"


class KernelBase(HookDefaults):
    """Base class of CuIR kernels. Subclasses define `grid()`, `run()`, worker
    methods and, optionally, hook overrides (score_mod, mask_mod, activation,
    kv_block_range, block_kind, normalizer, aux_names, empty_row_score).

    The executor sets these problem attributes before running CTAs:
    `q`, `k`, `v`, `o` (Global, [B, H, S, D] layouts of cubridge.attention),
    `lse` (Global [B, Hq, Sq] fp32), `scale` (float), `batch`, `heads_q`,
    `heads_kv`, `seqlen_q`, `seqlen_k`, `head_dim`, `head_dim_v`, `dtype`
    (operand dtype) and `aux` (dict of the aux tensors named in `aux_names`,
    read as `self.aux[name]`: by hooks, and by workers where a variant needs
    one outside the scores, e.g. a per-head logit scale or sink logit).
    Scores out of the QK^T gemm are unscaled: multiply them by `scale` (or
    fold it into the exp2 argument) before the hooks and the normaliser.
    """

    arch: ClassVar[str] = "sm80"
    """Target architecture ("sm80" or "sm90"): sets the shared-memory limit and
    which matrix instructions exist."""

    q: Global
    k: Global
    v: Global
    o: Global
    lse: Global
    scale: float
    batch: int
    heads_q: int
    heads_kv: int
    head_dim: int
    head_dim_v: int
    dtype: torch.dtype
    _cta: Cta

    def grid(self) -> tuple[int, ...]:
        """CTA coordinates' extents; `run` is called once per coordinate tuple."""
        raise NotImplementedError(f"{type(self).__name__} must define grid()")

    def run(self, *cta: int) -> None:
        """The per-CTA prologue: allocate SMEM, create barriers, bind workers."""
        raise NotImplementedError(f"{type(self).__name__} must define run()")

    def config(self) -> dict[str, Any]:
        """The kernel's configuration (tile sizes, stages...): its public attributes
        set in __init__."""
        return {k: v for k, v in vars(self).items() if not k.startswith("_")
                and isinstance(v, int | float | bool | str)}

    # -- context ------------------------------------------------------------------------

    def _enter(self, what: str, *, prologue: bool | None = None) -> tuple[Worker, SourceLoc]:
        w = current_worker()
        loc = caller_loc()
        cta = self._cta
        if prologue is True and not cta.in_prologue:
            raise ProgramError(f"{what} belongs in run() (the CTA prologue), not in a worker",
                               loc=loc, worker=w.name)
        if prologue is False and cta.in_prologue:
            raise ProgramError(f"{what} must be called from a bound worker, not from run()",
                               loc=loc, worker=w.name)
        cta.sched.point(w, loc)
        return w, loc

    # -- memory -------------------------------------------------------------------------

    def alloc(self, space: Space, shape: tuple[int, ...], dtype: torch.dtype, *,
              stages: int | None = None, name: str | None = None) -> Tile:
        """Allocate a tile of `shape` and `dtype` in `space` (SMEM or RMEM);
        with `stages=n`, n copies indexed `tile[s]` (a pipeline ring).

        SMEM: only in `run()`; shared by all workers of the CTA; counts (rounded
        up to 128 bytes) against the target's per-CTA limit (sm80 163 KB, sm90
        227 KB): going over raises a static-check error here. RMEM: only in a
        worker; private to it (an accumulator or register fragment). Contents
        start as NaN: reading what was never written poisons the result.
        Returns the whole-buffer Tile."""
        w, loc = self._enter("alloc")
        cta = self._cta
        if space is GMEM:
            raise ProgramError("GMEM is not allocated by kernels: use the problem's Globals "
                               "(self.q, self.o...)", loc=loc, worker=w.name)
        if space is SMEM and not cta.in_prologue:
            raise ProgramError("SMEM is allocated in run(), before workers start", loc=loc,
                               worker=w.name)
        if space is RMEM and cta.in_prologue:
            raise ProgramError("RMEM belongs to a worker: allocate it inside the worker",
                               loc=loc, worker=w.name)
        shape = tuple(int(s) for s in shape)
        if not shape or any(s <= 0 for s in shape):
            raise ProgramError(f"alloc: shape {shape} must be non-empty and positive", loc=loc,
                               worker=w.name)
        if stages is not None and (not isinstance(stages, int) or stages < 1):
            raise ProgramError(f"alloc: stages must be a positive int, got {stages!r}", loc=loc,
                               worker=w.name)
        buf = Buffer(name or _assigned_name(loc, space.value), space, shape, dtype, stages,
                     w if space is RMEM else None, loc)
        if space is SMEM:
            cta.smem_bytes += -(-buf.nbytes // limits.SMEM_ALIGN) * limits.SMEM_ALIGN
            self._check_smem(loc, w)
            cta.buffers.append(buf)
        return buf.tile()

    def launch_counter(self, name: str, size: int = 1) -> Global:
        """An int32 array in global memory shared by every CTA of the launch and
        zero at its start (a work counter the CTAs claim tiles from, for
        instance); reached only through `atomic_add`. The same name gives the same
        array for the rest of the launch."""
        w, loc = self._enter("launch_counter")
        counters = self.__dict__.setdefault("_launch_counters", {})
        g = counters.get(name)
        if g is None:
            if not isinstance(size, int) or size <= 0:
                raise ProgramError(f"launch_counter: size must be a positive int, got {size!r}",
                                   loc=loc, worker=w.name)
            g = counters[name] = Global(name, torch.zeros(size, dtype=torch.int32))
        elif g.shape != (size,):
            raise ProgramError(f"launch_counter {name!r} has {g.shape[0]} elements, asked "
                               f"for {size}", loc=loc, worker=w.name)
        return g

    def atomic_add(self, counter: Global, index: int, value: int) -> int:
        """Fetch-and-add on element `index` of a launch counter (atomicAdd):
        returns the value before the add. Atomic across every worker and CTA."""
        w, loc = self._enter("atomic_add", prologue=False)
        if counter is not self.__dict__.get("_launch_counters", {}).get(counter.name):
            raise ProgramError(f"atomic_add: {counter.name!r} is not a launch counter of "
                               "this kernel (see launch_counter)", loc=loc, worker=w.name)
        if not 0 <= int(index) < counter.shape[0]:
            raise ProgramError(f"atomic_add: index {index} out of range for {counter.name!r} "
                               f"of {counter.shape[0]}", loc=loc, worker=w.name)
        old = int(counter._data[index])
        counter._data[index] = old + int(value)
        return old

    def _check_smem(self, loc: SourceLoc, w: Worker) -> None:
        cta = self._cta
        limit = limits.SMEM_LIMIT[cta.arch]
        if cta.smem_bytes > limit:
            raise StaticCheckError(
                f"shared memory over budget: {cta.smem_bytes} bytes allocated so far "
                f"({cta.smem_bytes / 1024:.1f} KB) > {limit // 1024} KB per CTA on {cta.arch}",
                loc=loc, worker=w.name)

    def copy(self, dst: Tile | GlobalTile, src: Tile | GlobalTile | torch.Tensor) -> None:
        """Synchronous copy of a tile: GMEM box -> SMEM/RMEM tile, SMEM/RMEM tile
        or register tensor -> GMEM box, or between SMEM and RMEM. Shapes and
        dtypes must match exactly (convert first with tile_math.convert).
        Stores are per-thread: by a multi-warp role, SMEM written this way is
        visible to the role's other warps only after a sync_threads / bar.sync.
        GMEM rows past the tensor's end read as zeros and are not written."""
        w, loc = self._enter("copy", prologue=False)
        data = self._read_operand(src, w, loc, "copy")
        self._check_same(dst, data, loc, w, "copy")
        if isinstance(dst, GlobalTile):
            dst.write(data, w.name, loc)
            return
        check_write(dst, w, loc, "copy")
        dst.view().copy_(data)
        record_write(dst, w, loc, needs_sync=True)

    def copy_async(self, dst: Tile, src: GlobalTile, barrier: Barrier | None = None) -> None:
        """Asynchronous GMEM -> SMEM copy of a box (TMA-like with a barrier,
        cp.async-like without).

        With `barrier`: when the copy lands (at a time the scheduler picks) it
        completes `dst.nbytes` transaction bytes on the barrier's current phase;
        announce them first with `barrier.arrive_expect_tx(nbytes)`. Rows past
        the tensor's end land as zeros and still count (as TMA does).
        Without: the copy joins the worker's open cp.async group; close it with
        `copy_commit()` and wait with `copy_wait(n)`; other warps of the role see
        the data after a following `sync_threads()`.
        Until it lands, `dst` is unreadable (a hazard) and must not be
        overwritten."""
        w, loc = self._enter("copy_async", prologue=False)
        if not isinstance(dst, Tile) or dst.space is not SMEM:
            raise ProgramError(f"copy_async: destination must be an SMEM tile, got {dst!r}",
                               loc=loc, worker=w.name)
        if not isinstance(src, GlobalTile):
            raise ProgramError(f"copy_async: source must be a GMEM box (Global.tile), got {src!r}",
                               loc=loc, worker=w.name)
        self._check_same(dst, src, loc, w, "copy_async")
        check_write(dst, w, loc, "copy_async")
        record_write(dst, w, loc, needs_sync=barrier is None)
        op = _CopyOp(w, loc, dst, src.read(), barrier)
        mark_pending(dst, op)
        w.sched.add_pending(op)
        if barrier is None:
            w.open_copies.append(op)

    def copy_commit(self) -> None:
        """Close the worker's open cp.async group (cp.async.commit_group)."""
        w, _ = self._enter("copy_commit", prologue=False)
        w.copy_groups.append(w.open_copies)
        w.open_copies = []

    def copy_wait(self, n: int) -> None:
        """Wait until at most `n` of the worker's committed cp.async groups are
        still in flight (cp.async.wait_group n); older groups have landed."""
        w, loc = self._enter("copy_wait", prologue=False)
        _check_count(n, loc, w, "copy_wait")
        keep = len(w.copy_groups) - n
        for group in w.copy_groups[:max(keep, 0)]:
            for op in group:
                assert isinstance(op, _CopyOp)
                op.land()
                clear_pending(op.dst, op)
        w.copy_groups = w.copy_groups[max(keep, 0):]

    def load(self, tile: Tile) -> torch.Tensor:
        """Read a tile into registers: SMEM -> registers (ldmatrix / ld.shared) or
        the current value of an RMEM tile. Returns a new tensor of the tile's
        shape and dtype. Reading data still in flight, or not ordered after its
        write, is a hazard."""
        w, loc = self._enter("load", prologue=False)
        check_read(tile, w, loc, "load")
        record_read(tile, w, loc)
        return tile.view().clone()

    def store(self, tile: Tile, value: torch.Tensor) -> None:
        """Write a register tensor of the same shape and dtype into an RMEM or
        SMEM tile (st.shared / register move); same rules as `copy`."""
        self.copy(tile, value)

    def _read_operand(self, src: Any, w: Worker, loc: SourceLoc, what: str) -> torch.Tensor:
        if isinstance(src, GlobalTile):
            return src.read()
        if isinstance(src, Tile):
            check_read(src, w, loc, what)
            record_read(src, w, loc)
            return src.view()
        if isinstance(src, torch.Tensor):
            return src
        raise ProgramError(f"{what}: source must be a tile, a GMEM box or a register tensor, "
                           f"got {type(src).__name__}", loc=loc, worker=w.name)

    @staticmethod
    def _check_same(dst: Any, src: Any, loc: SourceLoc, w: Worker, what: str) -> None:
        if not isinstance(dst, Tile | GlobalTile):
            raise ProgramError(f"{what}: destination must be a tile or a GMEM box, got "
                               f"{type(dst).__name__}", loc=loc, worker=w.name)
        if tuple(src.shape) != tuple(dst.shape):
            raise ProgramError(f"{what}: shape {tuple(src.shape)} does not match destination "
                               f"{dst} of shape {tuple(dst.shape)}", loc=loc, worker=w.name)
        if src.dtype != dst.dtype:
            raise ProgramError(f"{what}: dtype {src.dtype} does not match destination {dst} "
                               f"({dst.dtype}); convert first", loc=loc, worker=w.name)

    # -- compute ------------------------------------------------------------------------

    def gemm(self, a: Tile | torch.Tensor, b: Tile | torch.Tensor, acc: Tile, *,
             trans_b: bool = False, accumulate: bool = True) -> None:
        """Synchronous matrix product on the worker's warps (mma.sync m16n8k16):
        acc[M, N] (+)= a[M, K] @ b[K, N], or a @ b[N, K]^T with `trans_b`.

        a, b: fp16/bf16 (the same), SMEM tiles (read through ldmatrix) or
        register tensors; acc: an fp32 RMEM tile, overwritten when
        `accumulate=False`. Accumulation is fp32. Shapes must tile into
        m16n8k16 instructions with the role's warps splitting M (M % (16 *
        warps) == 0, N % 8 == 0, K % 16 == 0): a static-check error otherwise."""
        w, loc = self._enter("gemm", prologue=False)
        m, n, k = self._gemm_shapes(a, b, acc, trans_b, loc, w, "gemm")
        limits.check_mma_sync_shape(m, n, k, w.warps, loc, w.name)
        self._cta.gemms.append(("mma.sync", m, n, k, w.name))
        for x in (a, b):
            if isinstance(x, Tile):
                check_read(x, w, loc, "gemm")
                record_read(x, w, loc)
        check_write(acc, w, loc, "gemm")
        _mma(a, b, acc, trans_b, accumulate)

    def gemm_async(self, a: Tile | torch.Tensor, b: Tile, acc: Tile, *, trans_b: bool = False,
                   accumulate: bool = True) -> None:
        """Asynchronous warpgroup matrix product (wgmma.mma_async m64nNk16, sm90):
        acc[M, N] (+)= a[M, K] @ b[K, N] (or b[N, K]^T with `trans_b`).

        a: an SMEM tile or a register tensor; b: an SMEM tile; fp16/bf16; acc:
        fp32 RMEM. The op joins the worker's open group: `commit()` closes it,
        `wait_group(n)` waits for it. Until then `acc` is unreadable and the
        SMEM operands must not be overwritten (so release their stage only
        after the wait). Ops of one worker complete in issue order. Legal
        shapes: whole warpgroups, M % (64 * warpgroups) == 0, 8 <= N <= 256
        with N % 8 == 0, K % 16 == 0; a static-check error otherwise."""
        w, loc = self._enter("gemm_async", prologue=False)
        if self._cta.arch != "sm90":
            raise StaticCheckError(f"gemm_async (wgmma) does not exist on {self._cta.arch}",
                                   loc=loc, worker=w.name)
        if not isinstance(b, Tile) or b.space is not SMEM:
            raise ProgramError("gemm_async: operand b must be an SMEM tile", loc=loc, worker=w.name)
        if isinstance(a, Tile) and a.space is not SMEM:
            raise ProgramError("gemm_async: operand a must be an SMEM tile or a register tensor",
                               loc=loc, worker=w.name)
        m, n, k = self._gemm_shapes(a, b, acc, trans_b, loc, w, "gemm_async")
        limits.check_wgmma_shape(m, n, k, w.warps, loc, w.name)
        self._cta.gemms.append(("wgmma", m, n, k, w.name))
        for x in (a, b):
            if isinstance(x, Tile):
                check_read(x, w, loc, "gemm_async")
        check_owner(acc, w, loc)
        op = _GemmOp(w, loc, a.clone() if isinstance(a, torch.Tensor) else a, b, acc, trans_b,
                     accumulate)
        w.issued += 1
        op.seq = w.issued
        mark_pending(acc, op)
        for x in (a, b):
            if isinstance(x, Tile):
                mark_pending(x, op, reading=True)
        w.open_gemms.append(op)
        w.sched.add_pending(op)

    def commit(self) -> None:
        """Close the worker's open group of gemm_async ops (wgmma.commit_group)."""
        w, _ = self._enter("commit", prologue=False)
        w.gemm_groups.append(w.open_gemms)
        w.open_gemms = []

    def wait_group(self, n: int) -> None:
        """Wait until at most `n` of the worker's committed gemm_async groups are
        in flight (wgmma.wait_group n). Retired ops' accumulators become
        readable and their SMEM operands are free to be released."""
        w, loc = self._enter("wait_group", prologue=False)
        _check_count(n, loc, w, "wait_group")
        keep = max(len(w.gemm_groups) - n, 0)
        for group in w.gemm_groups[:keep]:
            for op in group:
                assert isinstance(op, _GemmOp)
                op.land()
                clear_pending(op.acc, op)
                for x in (op.a, op.b):
                    if isinstance(x, Tile):
                        clear_pending(x, op, reading=True)
                        record_read(x, w, op.loc)
        w.gemm_groups = w.gemm_groups[keep:]

    def _gemm_shapes(self, a: Operand, b: Operand, acc: Tile, trans_b: bool, loc: SourceLoc,
                     w: Worker, what: str) -> tuple[int, int, int]:
        for name, x in (("a", a), ("b", b)):
            if not isinstance(x, Tile | torch.Tensor) or len(x.shape) != 2:
                raise ProgramError(f"{what}: operand {name} must be a 2-d tile or tensor",
                                   loc=loc, worker=w.name)
            if str(x.dtype) not in limits.OPERAND_DTYPES:
                raise ProgramError(f"{what}: operand {name} is {x.dtype}; MMA operands are "
                                   "float16 or bfloat16 (convert first)", loc=loc, worker=w.name)
        if a.dtype != b.dtype:
            raise ProgramError(f"{what}: operand dtypes differ ({a.dtype} vs {b.dtype})", loc=loc,
                               worker=w.name)
        if not isinstance(acc, Tile) or acc.space is not RMEM or acc.dtype != torch.float32:
            raise ProgramError(f"{what}: the accumulator must be an fp32 RMEM tile", loc=loc,
                               worker=w.name)
        m, k = a.shape
        n, kb = (b.shape[0], b.shape[1]) if trans_b else (b.shape[1], b.shape[0])
        if k != kb or tuple(acc.shape) != (m, n):
            raise ProgramError(f"{what}: shapes do not chain: a {tuple(a.shape)}, b "
                               f"{tuple(b.shape)}{' (transposed)' if trans_b else ''}, acc "
                               f"{tuple(acc.shape)}", loc=loc, worker=w.name)
        return m, n, k

    # -- sync ---------------------------------------------------------------------------

    def barrier(self, count: int, name: str | None = None) -> Barrier:
        """Create an mbarrier (see Barrier) expecting `count` arrivals per phase.
        Only in run(); uses 8 bytes of SMEM."""
        w, loc = self._enter("barrier", prologue=True)
        bar = Barrier(count, name or _assigned_name(loc, "barrier"), loc)
        self._cta.barriers.append(bar)
        self._cta.smem_bytes += limits.BARRIER_BYTES
        self._check_smem(loc, w)
        return bar

    def barriers(self, n: int, count: int, name: str | None = None) -> list[Barrier]:
        """`n` mbarriers (one per pipeline stage), named name[0]..name[n-1]."""
        w, loc = self._enter("barriers", prologue=True)
        base = name or _assigned_name(loc, "barrier")
        out = [Barrier(count, f"{base}[{i}]", loc) for i in range(n)]
        self._cta.barriers.extend(out)
        self._cta.smem_bytes += limits.BARRIER_BYTES * n
        self._check_smem(loc, w)
        return out

    def named_barrier(self, threads: int, name: str | None = None, *,
                      open_at_exit: bool = False) -> NamedBarrier:
        """Create a named barrier for `threads` threads (see NamedBarrier). Only in run().
        `open_at_exit=True`: the CTA may end with this barrier mid-phase, as a
        token passed round robin with `arrive` ends (its last pass is never
        taken; hardware needs no matching sync before the CTA exits)."""
        w, loc = self._enter("named_barrier", prologue=True)
        if len(self._cta.named) >= limits.MAX_NAMED_BARRIERS:
            raise StaticCheckError(f"more than {limits.MAX_NAMED_BARRIERS} named barriers "
                                   "(id 0 is sync_threads)", loc=loc, worker=w.name)
        bar = NamedBarrier(threads, name or _assigned_name(loc, "named_barrier"), loc)
        bar.open_at_exit = bool(open_at_exit)
        self._cta.named.append(bar)
        return bar

    def sync_threads(self) -> None:
        """CTA-wide barrier (__syncthreads): every bound worker's threads arrive
        and wait. Makes per-thread SMEM writes (cp.async after copy_wait, copy,
        store) visible to the other warps."""
        w, loc = self._enter("sync_threads", prologue=False)
        cta = self._cta
        if cta.cta_barrier is None:
            total = sum(x.threads for x in cta.sched.workers)
            cta.cta_barrier = NamedBarrier(total, "sync_threads", loc)
            cta.named.append(cta.cta_barrier)
        cta.cta_barrier.sync()

    # -- control ------------------------------------------------------------------------

    def bind(self, worker: Callable[..., None], *args: Any, warpgroup: int | None = None,
             warps: int | None = None, name: str | None = None) -> None:
        """Bind a worker method to a warp role; only in run(). `warpgroup=i`
        gives it warpgroup i (4 warps); `warps=n` gives it n warps. It runs as
        `worker(*args)` once run() returns, concurrently with the other roles.
        Its name (default: the method's name, plus an index if taken) appears
        in every error it causes."""
        w, loc = self._enter("bind", prologue=True)
        if (warpgroup is None) == (warps is None):
            raise ProgramError("bind: give exactly one of warpgroup= or warps=", loc=loc,
                               worker=w.name)
        nwarps = 4 if warpgroup is not None else int(warps or 0)
        if nwarps < 1:
            raise ProgramError(f"bind: warps must be >= 1, got {warps}", loc=loc, worker=w.name)
        sched = self._cta.sched
        if sum(x.warps for x in sched.workers) + nwarps > limits.MAX_WARPS:
            raise StaticCheckError(f"bind: more than {limits.MAX_WARPS} warps per CTA", loc=loc,
                                   worker=w.name)
        label = name or getattr(worker, "__name__", "worker")
        if any(x.name == label for x in sched.workers):
            if name is not None:
                raise ProgramError(f"bind: two workers named {label!r}", loc=loc, worker=w.name)
            label += str(warpgroup if warpgroup is not None else len(sched.workers))
        nw = Worker(sched, label, worker, args, nwarps, loc)
        nw.vc.update({k: t for k, t in w.vc.items()})
        nw.vc[label] = 1
        sched.workers.append(nw)

    # -- hooks --------------------------------------------------------------------------

    def kv_blocks(self, b: int, h: int, q_start: int, q_end: int) -> list[tuple[int, BlockKind]]:
        """The key blocks query rows [q_start, q_end) visit, with their kinds:
        kv_block_range (q_end clipped to Sq) clamped to the existing blocks,
        then block_kind of each (ends clipped to Sq / Sk), EMPTY blocks dropped. Every role of a CTA
        computes the same list, as the CUDA kernel's roles each do."""
        loc = caller_loc()
        n_blocks = -(-self.seqlen_k // self.block_n)
        q_end = min(q_end, self.seqlen_q)  # as the CUDA kernels pass it
        lo, hi = self.kv_block_range(b, h, q_start, q_end)
        lo, hi = max(int(lo), 0), min(int(hi), n_blocks)
        out = []
        for j in range(lo, hi):
            k_start = j * self.block_n
            kind = self.block_kind(b, h, q_start, q_end, k_start,
                                   min(k_start + self.block_n, self.seqlen_k))
            if not isinstance(kind, BlockKind):
                raise ProgramError(f"block_kind returned {kind!r}, not a BlockKind", loc=loc)
            if kind is not BlockKind.EMPTY:
                out.append((j, kind))
        return out

    def apply_score_hooks(self, s: torch.Tensor, b: int, h: int, q_idx: torch.Tensor,
                          kv_idx: torch.Tensor, kind: BlockKind,
                          ) -> tuple[torch.Tensor, torch.Tensor]:
        """Apply the hooks to a scaled fp32 score tile s [M, N] of block kind
        `kind`, with q_idx [M, 1] and kv_idx [1, N] absolute positions. Returns
        (s, allowed): s after score_mod (when overridden), and the bool [M, N]
        tile of pairs that take part: the tail masks kv_idx < Sk and q_idx < Sq
        always, and mask_mod on PARTIAL blocks. The hooks see indices clamped
        to Sq - 1 / Sk - 1, so they never index aux tensors out of bounds.
        `b` and `h` reach score_mod / mask_mod as 0-d int64 tensors."""
        loc = caller_loc()
        bt, ht = torch.tensor(b), torch.tensor(h)
        # Rows past Sq and keys past Sk are discarded; clamp so hooks never index
        # aux tensors out of bounds (as the CUDA kernels do).
        q_in = q_idx.clamp(max=self.seqlen_q - 1)
        kv_in = kv_idx.clamp(max=self.seqlen_k - 1)
        if self.has_score_mod:
            s2 = self.score_mod(s, bt, ht, q_in, kv_in)
            if not isinstance(s2, torch.Tensor) or s2.shape != s.shape:
                raise ProgramError(f"score_mod returned {getattr(s2, 'shape', type(s2))}, "
                                   f"expected a tensor of shape {tuple(s.shape)}", loc=loc)
            s = s2.to(torch.float32)
        allowed = ((kv_idx < self.seqlen_k) & (q_idx < self.seqlen_q)).expand(s.shape)
        if kind is BlockKind.PARTIAL and self.has_mask_mod:
            m = self.mask_mod(bt, ht, q_in, kv_in)
            if not isinstance(m, torch.Tensor) or m.dtype != torch.bool:
                raise ProgramError("mask_mod must return a bool tensor", loc=loc)
            allowed = allowed & m
        return s, allowed


def _check_count(n: int, loc: SourceLoc, w: Worker, what: str) -> None:
    if not isinstance(n, int) or n < 0:
        raise ProgramError(f"{what}: n must be a non-negative int, got {n!r}", loc=loc,
                           worker=w.name)

