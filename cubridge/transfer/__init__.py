"""Transfer: source CuIR + spec -> target CuIR.

The rule-based path (this package) handles variants whose difference stays
inside the hook points: trace the spec's mods into a small expression IR
(expr, trace, simplify), decide how blocks are classified (hooks: interval
arithmetic in closed form, or host-side block tables for data-dependent
masks), and render a hook-only subclass of the source kernel's CuIR
(target), verified by the executor (rules).

    plan = plan_hooks(spec)                       # traced mods, aux, classification
    result = transfer_by_rules(spec, FaSm80, out_dir=run_dir)
"""

from cubridge.ir.hooks import BlockKind
from cubridge.transfer.block_table import BlockTable, build_block_table
from cubridge.transfer.hooks import HookPlan, plan_hooks
from cubridge.transfer.interval import classify_block
from cubridge.transfer.rules import NotHookConfined, RuleTransfer, transfer_by_rules
from cubridge.transfer.target import load_target, render_target, write_target
from cubridge.transfer.trace import TraceError, trace_mask_mod, trace_score_mod

__all__ = [
    "BlockKind", "BlockTable", "HookPlan", "NotHookConfined", "RuleTransfer", "TraceError",
    "build_block_table", "classify_block", "load_target", "plan_hooks", "render_target",
    "trace_mask_mod", "trace_score_mod", "transfer_by_rules", "write_target",
]
