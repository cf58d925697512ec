"""`check`: the static checks of a kernel for a target, before any real run.

It runs every CTA of a small synthetic problem (two query blocks, a key range
that wraps the pipeline ring and ends in a partial block, GQA 2:1) under the
delayed policy, and reports what the target must hold: shared memory per CTA,
every matrix-op shape against its instruction, barrier arrival counts at the
end of each CTA, and every async group waited by its worker. Any violation
raises the CuIRError that names the IR line and worker.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from cubridge.ir.executor import _bind_problem, _validate, run_cta
from cubridge.ir.kernel import KernelBase
from cubridge.ir.limits import SMEM_LIMIT, check_arch
from cubridge.ir.scheduler import make_policy

# aux(b, hq, hk, sq, sk, head_dim) -> {name: tensor} for the synthetic problem
AuxMaker = Callable[[int, int, int, int, int, int], dict[str, torch.Tensor]]


@dataclass
class CheckReport:
    kernel: str
    arch: str
    smem_bytes: int
    smem_limit: int
    workers: list[tuple[str, int]] = field(default_factory=list)  # (name, warps)
    gemms: list[tuple[str, int, int, int]] = field(default_factory=list)  # (instr, M, N, K)
    barriers: list[tuple[str, int]] = field(default_factory=list)  # (name, count)

    def __str__(self) -> str:
        lines = [f"{self.kernel} on {self.arch}: OK",
                 f"  shared memory: {self.smem_bytes} B ({self.smem_bytes / 1024:.1f} KB) of "
                 f"{self.smem_limit // 1024} KB",
                 "  workers: " + ", ".join(f"{n} ({w} warps)" for n, w in self.workers)]
        for instr, m, n, k in self.gemms:
            lines.append(f"  gemm {instr} {m}x{n}x{k}")
        if self.barriers:
            lines.append("  barriers: " + ", ".join(f"{n}({c})" for n, c in self.barriers))
        return "\n".join(lines)


def check(kernel: KernelBase | type[KernelBase], arch: str | None = None, *,
          head_dim: int = 128, dtype: torch.dtype = torch.bfloat16,
          aux: dict[str, torch.Tensor] | AuxMaker | None = None, **config: Any) -> CheckReport:
    """Static checks of `kernel` (an instance, or a class built with `config`)
    for `arch` ("sm80" or "sm90"; default: the kernel's own). Returns a
    CheckReport, or raises the first violation as a CuIRError. Kernels with
    aux tensors need `aux` for the synthetic problem (sizes for Sq = 2 *
    block_m + 5 queries, Sk = (stages + 1) * block_n + 3 keys, B=1, Hq=2),
    or a function aux(b, hq, hk, sq, sk, head_dim) that makes them."""
    if isinstance(kernel, type):
        kernel = kernel(**config)
    elif config:
        raise ValueError("check: config keywords only apply when a kernel class is given")
    arch = arch or kernel.arch
    check_arch(arch)
    bm = int(getattr(kernel, "block_m", 64))
    bn = int(getattr(kernel, "block_n", 64))
    stages = int(getattr(kernel, "stages", 2))
    sq, sk = 2 * bm + 5, (stages + 1) * bn + 3
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, 2, sq, head_dim, generator=gen).to(dtype)
    k = torch.randn(1, 1, sk, head_dim, generator=gen).to(dtype)
    v = torch.randn(1, 1, sk, head_dim, generator=gen).to(dtype)
    if callable(aux):
        aux = aux(1, 2, 1, sq, sk, head_dim)
    _validate(kernel, q, k, v, aux or {})
    _bind_problem(kernel, q, k, v, None, aux or {})
    policy = make_policy("delayed")
    report = CheckReport(type(kernel).__name__, arch, 0, SMEM_LIMIT[arch])
    seen = set()
    for coords in itertools.product(*(range(n) for n in kernel.grid())):
        cta = run_cta(kernel, tuple(coords), policy, arch)
        report.smem_bytes = max(report.smem_bytes, cta.smem_bytes)
        if not report.workers:
            report.workers = [(w.name, w.warps) for w in cta.sched.workers]
            report.barriers = [(b.name, b.count) for b in cta.barriers]
        for instr, m, n, kk, _w in cta.gemms:
            if (instr, m, n, kk) not in seen:
                seen.add((instr, m, n, kk))
                report.gemms.append((instr, m, n, kk))
    return report
