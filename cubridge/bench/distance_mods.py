"""The score_mod a FlexAttention user precomputes: a term of the head and q - k
alone that does costly work on the distance (T5's log buckets) is, for a user
who cares about speed, a table built once per shape and read per score.
Computed inline it ran Flex Triton at ~70 TFLOP/s and did not compile for the
FLASH backend (H200, bench/results/h200-user-specs-1013070/); read from the
table cubridge's own launcher builds (cubridge.transfer.distance_tables), Flex
Triton ~220 and FLASH ~310 (bench/results/h200-t5-peers-3a07b04/). The
benchmark hands it to the Flex peers (`PeerProblem.precomputed_score_mod`), so
both sides of a comparison get the same precomputation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch

from cubridge.attention import Shape
from cubridge.spec.model import Spec
from cubridge.transfer.distance_tables import distance_tables
from cubridge.transfer.expr import Node, apply, const, var
from cubridge.transfer.hooks import HookPlan, plan_hooks
from cubridge.transfer.torch_render import grid_function
from cubridge.verify.peer_forms import scalar_constants


def distance_table_mods(spec: Spec, aux: Mapping[str, torch.Tensor], shape: Shape,
                        device: torch.device) -> Callable[..., torch.Tensor] | None:
    """The spec's score_mod with its costly (h, q - k) terms read from tables
    built for `shape`, 0-d aux as constants; None where it has no such term or
    does not trace."""
    if spec.score_mod is None:
        return None
    plan = _plan(spec)
    if plan is None:
        return None
    tables = distance_tables(plan.score.node) if plan.score else ()
    if not tables:
        return None
    full = plan.with_captured(aux, device)
    distance = apply("add", apply("sub", var("q"), var("k")), const(shape.sk - 1))
    reads = {t.term: Node("aux_load", t.term.dtype,
                          (var("h") if t.by_head else const(0), distance), t.name)
             for t in tables}

    def replaced(n: Node) -> Node:
        if n in reads:
            return reads[n]
        return Node(n.op, n.dtype, tuple(replaced(a) for a in n.args), n.arg) if n.args else n

    fn = grid_function(replaced(plan.score.node))  # type: ignore[union-attr]
    values = {**scalar_constants(full), **{t.name: t.build(shape, full, device) for t in tables}}

    def score_mod(score, b, h, q_idx, kv_idx):  # noqa: ANN001, ANN202 - Flex's signature
        return fn(b, h, q_idx, kv_idx, score_=score, **values)

    return score_mod


# Traced plans by spec (a case per S and config reuses its spec's: tracing checks
# the expressions on a grid, 0.3 s for a dense pair bias). The spec is kept with
# its plan, so an id is never taken for another spec's.
_PLANS: dict[int, tuple[Spec, HookPlan | None]] = {}


def _plan(spec: Spec) -> HookPlan | None:
    hit = _PLANS.get(id(spec))
    if hit is None or hit[0] is not spec:
        try:
            plan = plan_hooks(spec)
        except Exception:  # noqa: BLE001 - a mod the tracer does not take keeps its own form
            plan = None
        hit = _PLANS[id(spec)] = (spec, plan)
    return hit[1]
