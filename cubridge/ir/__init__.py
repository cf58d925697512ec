"""CuIR: the executable IR of cubridge kernels (docs/cuir.md is its manual).

A kernel is a `KernelBase` subclass; `execute` / `attention_fn` run it on CPU
tensors under a scheduling policy while checking it; `check` runs the static
checks for a target; `cubridge.ir.structure` prints and diffs programs.
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
