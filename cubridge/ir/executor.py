"""Running a CuIR attention kernel on CPU tensors, and what running it checks.

`execute` runs every CTA of the grid, one after another (CTAs share nothing
but global memory, and attention CTAs write disjoint outputs), each under the
chosen scheduling policy; `policy="all"` runs every policy and requires
bit-identical results, naming the writers of the first differing element if
not. `attention_fn` wraps a kernel class as an ordinary attention function
with the layouts of cubridge.attention. Outputs start as NaN, so anything the
kernel does not write shows.

What a run rejects (each error names the IR line and the worker):

- HazardError: reading an SMEM tile whose copy has not landed or whose
  cp.async group was not waited; reading data written by another worker
  without waiting on the barrier that orders it (a missing or wrong-phase
  wait); reading SMEM nothing wrote; overwriting a stage a reader has not
  released (its empty barrier) or that an in-flight gemm_async still reads;
  reading an accumulator before wait_group retired its gemm_async; a
  multi-warp role reading its own per-thread stores, or overwriting what it
  read, with no sync_threads in between;
- DeadlockError: every unfinished worker blocked, with each one's position;
- SyncError: more transaction bytes landed than expect_tx announced; a
  named barrier over-arrived; a barrier left mid-phase when the CTA ends;
- StaticCheckError: shared memory over the target's limit (at the alloc),
  an illegal mma.sync / wgmma shape or an instruction the target lacks (at
  the gemm), a worker ending with async groups never waited, a barrier count
  no set of bound threads can reach, too many named barriers;
- RaceError (policy "all"): results that differ between policies;
- ProgramError: a primitive misused (spaces, shapes, dtypes, ownership) or
  a Python error in the kernel's code.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any

import torch

from cubridge.attention import default_scale
from cubridge.empty_rows import fill_empty_rows
from cubridge.ir.errors import CuIRError, ProgramError, RaceError, StaticCheckError, SyncError
from cubridge.ir.kernel import Cta, KernelBase
from cubridge.ir.limits import check_arch
from cubridge.ir.memory import Global
from cubridge.ir.scheduler import (
    POLICIES,
    Policy,
    Worker,
    _ir_frame,
    make_policy,
    set_current_worker,
)

AttentionFn = Callable[..., tuple[torch.Tensor, torch.Tensor | None]]


def execute(kernel: KernelBase, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *,
            scale: float | None = None, aux: Mapping[str, torch.Tensor] | None = None,
            policy: str | Policy = "eager", arch: str | None = None,
            ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Run `kernel` on q [B, Hq, Sq, D], k [B, Hk, Sk, D], v [B, Hk, Sk, Dv]
    (fp16 or bf16, any device: computed on CPU). Returns (out [B, Hq, Sq, Dv] in
    q's dtype, lse [B, Hq, Sq] fp32) or (out, None) for an elementwise
    normaliser. `policy`: "eager", "delayed", "random[:SEED]", or "all" to run
    every policy and check they agree. `arch` overrides the kernel's target.
    A head dim that is not a multiple of 16 reaches the program zero-filled to
    the next one (tensor-core products take K in 16-column steps; the library's
    kernels copy it so), the scale and the output staying the problem's.
    Raises a CuIRError subclass naming the IR line and worker on any hazard,
    deadlock or static-check failure."""
    if policy == "all":
        return _execute_all(kernel, q, k, v, scale=scale, aux=aux, arch=arch)
    out, lse, _ = _execute(kernel, q, k, v, scale, aux, make_policy(policy), arch)
    return out, lse


def attention_fn(kernel_cls: type[KernelBase], *, policy: str = "eager",
                 **config: Any) -> AttentionFn:
    """An attention function `fn(q, k, v, scale=None, **aux) -> (out, lse)` that
    runs `kernel_cls(**config)` with the executor (see `execute`); lse is None
    for elementwise normalisers."""
    kernel_cls(**config)  # bad config fails here, not at the first call
    if policy != "all":
        make_policy(policy)

    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None = None,
           **aux: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        return execute(kernel_cls(**config), q, k, v, scale=scale, aux=aux, policy=policy)

    fn.__name__ = fn.__qualname__ = f"cuir_{kernel_cls.__name__}"
    return fn


def _validate(kernel: KernelBase, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              aux: Mapping[str, torch.Tensor]) -> None:
    name = type(kernel).__name__
    for n, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise ValueError(f"{name}: {n} must be a 4-d tensor [B, H, S, D], got "
                             f"{getattr(t, 'shape', type(t))}")
        if t.dtype not in (torch.float16, torch.bfloat16):
            raise ValueError(f"{name}: {n} is {t.dtype}; CuIR attention kernels take float16 "
                             "or bfloat16 operands")
    if not q.dtype == k.dtype == v.dtype:
        raise ValueError(f"{name}: q, k, v dtypes differ ({q.dtype}, {k.dtype}, {v.dtype})")
    if not q.shape[0] == k.shape[0] == v.shape[0]:
        raise ValueError(f"{name}: batch sizes differ: q {q.shape[0]}, k {k.shape[0]}, "
                         f"v {v.shape[0]}")
    if k.shape[1] != v.shape[1] or k.shape[2] != v.shape[2]:
        raise ValueError(f"{name}: k {tuple(k.shape)} and v {tuple(v.shape)} disagree on heads "
                         "or length")
    if q.shape[3] != k.shape[3]:
        raise ValueError(f"{name}: q head dim {q.shape[3]} != k head dim {k.shape[3]}")
    if q.shape[1] % k.shape[1]:
        raise ValueError(f"{name}: Hq={q.shape[1]} is not a multiple of Hk={k.shape[1]}")
    want, got = set(kernel.aux_names), set(aux)
    if want != got:
        missing, extra = sorted(want - got), sorted(got - want)
        raise ValueError(f"{name}: aux tensors must be exactly {sorted(want)}"
                         + (f"; missing {missing}" if missing else "")
                         + (f"; unexpected {extra}" if extra else ""))


# Tensor-core products take K in 16-column steps (mma.sync m16n8k16, wgmma k16), so a
# head dim between them runs with its columns zero-filled to the next step, as the
# library's kernels do (cp.async copies, TMA boxes): the program sees
# operands that wide (zero columns add nothing to Q K^T; V's give O columns no one
# reads), and the scale stays the problem's.
K_STEP = 16


def _to_k_step(t: torch.Tensor) -> torch.Tensor:
    pad = -t.shape[-1] % K_STEP
    return torch.nn.functional.pad(t, (0, pad)) if pad else t


def _bind_problem(kernel: KernelBase, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  scale: float | None, aux: Mapping[str, torch.Tensor]) -> tuple[Global, Global]:
    scale = float(scale) if scale is not None else default_scale(q.shape[3])
    q, k, v = (_to_k_step(t.detach().cpu()) for t in (q, k, v))
    b, hq, sq, d = q.shape
    _, hk, sk, dv = v.shape
    out = torch.full((b, hq, sq, dv), float("nan"), dtype=q.dtype)
    lse = torch.full((b, hq, sq), float("nan"), dtype=torch.float32)
    kernel.q = Global("q", q.contiguous())
    kernel.k = Global("k", k.contiguous())
    kernel.v = Global("v", v.contiguous())
    kernel.o = Global("o", out)
    kernel.lse = Global("lse", lse)
    kernel.scale = scale
    kernel.batch, kernel.heads_q, kernel.heads_kv = b, hq, hk
    kernel.seqlen_q, kernel.seqlen_k, kernel.head_dim, kernel.head_dim_v = sq, sk, d, dv
    kernel.dtype = q.dtype
    kernel.aux = {n: t.detach().cpu() for n, t in aux.items()}
    kernel._launch_counters = {}  # (launch_counter: zero at every launch)
    return kernel.o, kernel.lse


def _execute(kernel: KernelBase, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             scale: float | None, aux: Mapping[str, torch.Tensor] | None, policy: Policy,
             arch: str | None) -> tuple[torch.Tensor, torch.Tensor | None, list[Global]]:
    aux = dict(aux or {})
    _validate(kernel, q, k, v, aux)
    arch = arch or kernel.arch
    check_arch(arch)
    if kernel.normalizer not in ("softmax", "elementwise"):
        raise ValueError(f"{type(kernel).__name__}.normalizer must be 'softmax' or "
                         f"'elementwise', got {kernel.normalizer!r}")
    o, lse = _bind_problem(kernel, q, k, v, scale, aux)
    grid = kernel.grid()
    for coords in itertools.product(*(range(n) for n in grid)):
        run_cta(kernel, tuple(coords), policy, arch)
    out = o._data[..., :v.shape[3]].to(q.device)  # (the problem's columns)
    lse_out = lse._data.to(q.device) if kernel.normalizer == "softmax" else None
    if lse_out is not None and kernel.empty_row_score is not None:
        # the pass after the kernel of a floor mask (HookDefaults.empty_row_score)
        out, lse_out = fill_empty_rows(out, lse_out, v, kernel.empty_row_score)
    return out, lse_out, [o, lse]


def run_cta(kernel: KernelBase, coords: tuple[int, ...], policy: Policy, arch: str) -> Cta:
    """Run one CTA: the prologue `run(*coords)`, then its workers to completion,
    then the end-of-CTA barrier checks."""
    cta = Cta(kernel, coords, policy, arch)
    kernel._cta = cta
    set_current_worker(cta.prologue)
    try:
        kernel.run(*coords)
    except CuIRError:
        raise
    except Exception as e:
        raise ProgramError(f"{type(e).__name__}: {e}", loc=_ir_frame(e), worker="run()") from e
    finally:
        set_current_worker(None)
    cta.in_prologue = False
    _check_counts(cta)
    cta.sched.run(_worker_exit_checks)
    for bar in [*cta.barriers, *cta.named]:
        problem = bar.end_of_cta_problem()
        if problem:
            last = bar.arrivals[-1] if bar.arrivals else (None, bar.loc)
            raise SyncError(problem, loc=last[1], worker=last[0])
    return cta


def _check_counts(cta: Cta) -> None:
    """Arrival counts that no set of bound workers can ever reach."""
    workers = cta.sched.workers
    threads = sum(w.threads for w in workers)
    for nb in cta.named:
        if nb.threads > threads:
            raise StaticCheckError(
                f"named barrier {nb.name} waits for {nb.threads} threads but the CTA binds "
                f"only {threads}", loc=nb.loc, worker="run()")
    if not workers:
        return
    for bar in cta.barriers:
        if bar.count > threads:
            raise StaticCheckError(
                f"barrier {bar.name} expects {bar.count} arrivals per phase, more than the "
                f"CTA's {threads} threads could make", loc=bar.loc, worker="run()")


def _worker_exit_checks(w: Worker) -> None:
    """Every async group a worker opened must be waited before it ends."""
    for kind, open_ops, groups, how in (
        ("gemm_async", w.open_gemms, w.gemm_groups, "commit() + wait_group(0)"),
        ("copy_async", w.open_copies, w.copy_groups, "copy_commit() + copy_wait(0)"),
    ):
        left = open_ops + [op for g in groups for op in g]
        if left:
            raise StaticCheckError(
                f"the worker ends with {len(left)} {kind} op(s) never waited (first issued at "
                f"{left[0].loc}): every async group must be retired by {how}",
                loc=left[0].loc, worker=w.name)


def _same(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a == b) | (a.isnan() & b.isnan())


def _execute_all(kernel: KernelBase, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *,
                 scale: float | None, aux: Mapping[str, torch.Tensor] | None,
                 arch: str | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    runs = [(p, _execute(kernel, q, k, v, scale, aux, make_policy(p), arch)) for p in POLICIES]
    base_name, (out0, lse0, g0) = runs[0]
    for name, (out, lse, g) in runs[1:]:
        for gi, (x0, x) in enumerate(((out0, out), (lse0, lse))):
            if x0 is None or x is None:
                continue
            same = _same(x0, x)
            if bool(same.all()):
                continue
            idx = tuple(int(i) for i in (~same).nonzero()[0])
            w0, w1 = _last_writer(g0[gi], idx), _last_writer(g[gi], idx)
            label = g0[gi].name
            raise RaceError(
                f"the result depends on the scheduling policy: {label}{list(idx)} is "
                f"{x0[idx].item():.6g} under {base_name} but {x[idx].item():.6g} under {name}; "
                f"last written by {w0[0]} at {w0[1]} under {base_name} and by {w1[0]} at "
                f"{w1[1]} under {name}: unsynchronised accesses (a race)",
                loc=w1[1] if w1[1] != "?" else None, worker=w1[0])
    return out0, lse0


def _last_writer(g: Global, idx: tuple[int, ...]) -> tuple[str, Any]:
    nlead = None
    for index, lo, hi, worker, loc in reversed(g.writes):
        nlead = len(index)
        if tuple(idx[:nlead]) == index and lo <= idx[nlead] < hi:
            return worker, loc
    return "?", "?"
