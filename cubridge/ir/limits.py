"""Target limits the executor enforces: shared memory per CTA and legal
matrix-instruction shapes."""

from __future__ import annotations

from cubridge.ir.errors import SourceLoc, StaticCheckError

SMEM_LIMIT = {"sm80": 163 * 1024, "sm90": 227 * 1024}
"""Usable shared memory per CTA in bytes (opt-in maximum of the architecture)."""

SMEM_ALIGN = 128
"""Every SMEM buffer is placed at a 128-byte boundary (TMA and swizzle need it)."""

BARRIER_BYTES = 8
MAX_WARPS = 32  # 1024 threads per CTA
MAX_NAMED_BARRIERS = 15  # hardware has 16; id 0 is __syncthreads

OPERAND_DTYPES = ("torch.float16", "torch.bfloat16")


def check_arch(arch: str) -> None:
    if arch not in SMEM_LIMIT:
        raise ValueError(f"unknown architecture {arch!r}: use one of {sorted(SMEM_LIMIT)}")


def check_mma_sync_shape(m: int, n: int, k: int, warps: int, loc: SourceLoc, worker: str) -> None:
    """mma.sync.m16n8k16: the role's warps split M, each warp covers whole
    16-row slabs; N is made of n8 pieces and K of k16 steps."""
    problems = []
    if m % (16 * warps):
        problems.append(f"M={m} is not a multiple of 16 x {warps} warps")
    if n % 8:
        problems.append(f"N={n} is not a multiple of 8")
    if k % 16:
        problems.append(f"K={k} is not a multiple of 16")
    if problems:
        raise StaticCheckError(f"illegal mma.sync m16n8k16 gemm {m}x{n}x{k}: "
                               + "; ".join(problems), loc=loc, worker=worker)


def check_wgmma_shape(m: int, n: int, k: int, warps: int, loc: SourceLoc, worker: str) -> None:
    """wgmma.m64nNk16: issued by whole warpgroups (4 warps), each covering
    64-row slabs; 8 <= N <= 256 with N % 8 == 0; K in k16 steps."""
    problems = []
    if warps % 4:
        problems.append(f"the issuing role has {warps} warps, not whole warpgroups")
    elif m % (64 * (warps // 4)):
        problems.append(f"M={m} is not a multiple of 64 x {warps // 4} warpgroup(s)")
    if n % 8 or not 8 <= n <= 256:
        problems.append(f"N={n} must be a multiple of 8 in [8, 256]")
    if k % 16:
        problems.append(f"K={k} is not a multiple of 16")
    if problems:
        raise StaticCheckError(f"illegal wgmma m64nNk16 shape {m}x{n}x{k}: " + "; ".join(problems),
                               loc=loc, worker=worker)
