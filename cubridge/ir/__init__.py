"""CuIR: the executable IR of cubridge kernels (docs/cuir.md is its manual).

A CuIR program describes one GPU kernel at tile level: which warp roles exist,
what each moves between global memory (GMEM), shared memory (SMEM) and
registers (RMEM), which matrix instructions it issues and how the roles
synchronise. `execute` / `attention_fn` run it on CPU tensors under a
scheduling policy while checking it; `check` runs the static checks for a
target; `cubridge ir show / diff` print and compare programs.

How a program is written:

- one class deriving from `KernelBase`; configuration in `__init__` (tile
  sizes, stages, `causal`), the CTA grid in `grid()`;
- `run(*cta)`: allocate SMEM tiles (`self.alloc(SMEM, ...)`), create barriers
  (`self.barrier`, `self.barriers`, `self.named_barrier`), and `self.bind` each
  worker method to its warps or warpgroup; nothing else happens in `run`;
- worker methods: allocate their RMEM accumulators, move tiles with
  `copy_async` / `copy` / `load` / `store`, multiply with `gemm` (mma.sync)
  or `gemm_async` + `commit` + `wait_group` (wgmma), synchronise with
  barriers, and compute on register tensors with `tile_math` and plain
  elementwise torch operators;
- global tensors (`self.q`, `self.k`, `self.v`, `self.o`, `self.lse`) are
  reached only as boxes `self.q.tile(b, h, start=row, rows=n)` moved by copy
  primitives; whole-tensor computation describes no kernel;
- variant logic lives only in the hooks (`score_mod`, `mask_mod`,
  `activation`, `kv_block_range`, `block_kind`, `normalizer`, `aux_names`,
  `empty_row_score`), which the workers reach through `kv_blocks` and
  `apply_score_hooks` (and the executor, after the kernel: `empty_row_score`).

Numerics follow the kernels: fp16/bf16 operands, fp32 accumulation, P rounded
to the operand dtype (`tile_math.convert`) before the PV product.
"""

from cubridge.ir import tile_math
from cubridge.ir.checks import CheckReport, check
from cubridge.ir.control import PipelineState, cdiv
from cubridge.ir.errors import (
    CuIRError,
    DeadlockError,
    HazardError,
    ProgramError,
    RaceError,
    SourceLoc,
    StaticCheckError,
    SyncError,
)
from cubridge.ir.executor import attention_fn, execute
from cubridge.ir.hooks import BlockKind
from cubridge.ir.kernel import KernelBase
from cubridge.ir.memory import GMEM, RMEM, SMEM, Global, GlobalTile, Space, Tile
from cubridge.ir.scheduler import POLICIES
from cubridge.ir.sync import Barrier, NamedBarrier

__all__ = [
    "GMEM",
    "POLICIES",
    "RMEM",
    "SMEM",
    "Barrier",
    "BlockKind",
    "CheckReport",
    "CuIRError",
    "DeadlockError",
    "Global",
    "GlobalTile",
    "HazardError",
    "KernelBase",
    "NamedBarrier",
    "PipelineState",
    "ProgramError",
    "RaceError",
    "SourceLoc",
    "Space",
    "StaticCheckError",
    "SyncError",
    "Tile",
    "attention_fn",
    "cdiv",
    "check",
    "execute",
    "tile_math",
]
