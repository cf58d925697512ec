"""Which path a spec takes to a kernel: the deterministic hook rules (the
variant's change stays inside the library kernel's hook points) or the LLM
stages (it leaves them). This is the one place the decision is made; `cubridge
run`, `cubridge transfer`, `cubridge.compile` and the MCP tools ask it. Each
fact behind the decision is stated in the reason:

- mods that raise when called on real index tensors (a Python `if` on a
  tensor, say) are no path's to take: a SpecError with the mod's line
  (`spec.check.probe_mods`), never the LLM path;
- head dims the library kernel was not built for (e.g. 192/128) change tile
  shapes, not hooks: LLM path;
- (a spec dtype the kernel does not build, float32, is no path's to take:
  `check_dtypes`, a SpecError at DTYPES, which `cubridge run` asks first;)
- FlexAttention-style mods the hook tracer cannot express: LLM path;
- no mods at all, and a reference that is not plain attention with the
  spec's normaliser (checked on a tiny float64 input): the variant cannot be
  stated as hooks: LLM path;
- otherwise the rules, with the traced hook plan (the run's one tracing of
  the spec's mods; plan.json keeps it for the later stages and kernel.py),
  once the traced expressions are seen to compute what the mods compute
  element by element (`transfer.hooks.check_trace`; a SpecError at the mod's
  line otherwise: every later stage uses the expressions, not the mods).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch

from cubridge.attention import Shape, default_scale
from cubridge.kernels import LibraryKernel
from cubridge.spec.check import probe_mods
from cubridge.spec.errors import SpecError, location_of_name
from cubridge.spec.helpers import (
    elementwise_attention,
    expand_kv,
    scaled_scores,
    softmax_attention,
)
from cubridge.spec.model import Spec
from cubridge.spec.shapes import fit_shapes, smoke_shape
from cubridge.transfer.hooks import HookPlan, check_trace, plan_hooks

PathName = Literal["rules", "llm"]
TRACE_CHECK_LEN = 61  # traced vs called mods: every pair of a 61 x 64 problem
_ACTIVATIONS = {"sigmoid": torch.sigmoid, "relu": torch.relu}


@dataclass(frozen=True)
class Route:
    path: PathName
    reason: str
    kernel: LibraryKernel
    plan: HookPlan | None = None  # the traced hooks, on the rules path

    def __str__(self) -> str:
        name = "deterministic hook rules" if self.path == "rules" else "LLM stages"
        return f"{name} on {self.kernel.name}: {self.reason}"

    def to_json(self) -> dict[str, Any]:
        """plan.json: the decision, its reason, the kernel and the hook plan."""
        return {"path": self.path, "reason": self.reason, "kernel": self.kernel.name,
                "hooks": self.plan.to_json() if self.plan is not None else None}


def choose_path(spec: Spec, kernel: LibraryKernel, trace_check: Shape | None = None) -> Route:
    """Decide the path of `spec` on `kernel` (see the module docstring); raises
    SpecError (file:line) for mods that raise on real tensors. `trace_check`:
    the problem the traced mods are checked on (default: 61 x 64 positions, fewer
    where the spec's lengths are shorter; a caller whose mods capture tensors
    sized for its own lengths passes those)."""
    probe_mods(spec)
    meta = kernel.metadata
    dims = sorted({(c.d, c.head_dim_v) for c in spec.configs})
    bad = [f"{d}/{dv}" for d, dv in dims if not meta.supports_dims(d, dv)]
    if bad:
        return Route("llm", f"head dims (QK/V) {', '.join(bad)} are not among {kernel.name}'s "
                     f"{meta.dims_text()}: tile shapes change, not hooks", kernel)
    if spec.score_mod is not None or spec.mask_mod is not None:
        try:
            plan = plan_hooks(spec, table_block=kernel.table_block(*dims[0]))
        except Exception as exc:  # noqa: BLE001 - any tracer refusal means "not a hook"
            return Route("llm", f"the hook tracer cannot express the spec's mods "
                         f"({type(exc).__name__}: {exc})", kernel)
        if trace_check is None:
            n = min(TRACE_CHECK_LEN, *spec.seq_lens)
            trace_check = fit_shapes(spec, [smoke_shape(spec.configs, sq=n,
                                                        sk=min(n + 3, *spec.seq_lens))])[0]
        check_trace(spec, plan, trace_check)
        mods = [n for n in ("score_mod", "mask_mod") if getattr(spec, n) is not None]
        verb = "trace" if len(mods) > 1 else "traces"
        lifted = " (score_mod's masking condition as the mask: its blocks are classified)" \
            if plan.mask_in_score else ""
        if plan.mask_floor is not None:
            lifted = (f" (score_mod's mask at {plan.mask_floor:.4g} as the mask: its blocks are "
                      "classified; rows it leaves no key weigh every key alike, filled after "
                      "the kernel)")
        return Route("rules", f"the spec's {' and '.join(mods)} {verb} into {kernel.name}'s "
                     f"hooks{lifted}", kernel, plan)
    if not is_plain_attention(spec):
        return Route("llm", "the spec has no FlexAttention-style mods and its reference is "
                     f"not plain {spec.normalizer} attention: the change leaves the hooks",
                     kernel)
    plan = plan_hooks(spec, table_block=kernel.table_block(*dims[0]))
    return Route("rules", f"plain {spec.normalizer} attention: the library kernel's default "
                 "hooks", kernel, plan)


def check_dtypes(spec: Spec, kernel: LibraryKernel) -> None:
    """A spec dtype the kernel does not build is no path's to take: CuIR's matrix
    ops, and so every kernel either path can make, take 16-bit operands (a
    SpecError at DTYPES; `cubridge run` asks before choosing the path)."""
    bad = [d for d in spec.dtypes if d not in kernel.metadata.dtypes]
    if bad:
        names = lambda ds: ", ".join(str(d).removeprefix("torch.") for d in ds)  # noqa: E731
        raise SpecError(
            f"DTYPES has {names(bad)}: {kernel.name} builds {names(kernel.metadata.dtypes)}, "
            "and CuIR's matrix ops (so every kernel the rules or the LLM path can make) take "
            "16-bit operands; drop it from DTYPES (`cubridge verify --impl` still checks an "
            "implementation of your own in it)", location_of_name(spec.path, "DTYPES"))


def is_plain_attention(spec: Spec) -> bool:
    """spec.reference == normaliser(q k^T * scale) v (with GQA) on a tiny float64
    input: softmax with its LSE, or the spec's elementwise activation."""
    cfg = spec.configs[0]
    group = cfg.hq // cfg.hk
    heads_kv = min(cfg.hk, 2)
    shape = fit_shapes(spec, [Shape(1, group * heads_kv, heads_kv, 5, 7, cfg.d, cfg.dv)])[0]
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, shape.hq, shape.sq, cfg.d, generator=gen, dtype=torch.float64)
    k = torch.randn(1, shape.hk, shape.sk, cfg.d, generator=gen, dtype=torch.float64)
    v = torch.randn(1, shape.hk, shape.sk, shape.head_dim_v, generator=gen, dtype=torch.float64)
    aux = dict(spec.make_aux(shape, gen, torch.device("cpu"))) if spec.make_aux else {}
    got = spec.reference(q, k, v, **aux)
    got = got[0] if isinstance(got, tuple) else got
    kx, vx = expand_kv(q, k, v)
    scale = spec.scale if spec.scale is not None else default_scale(cfg.d)
    scores = scaled_scores(q, kx, scale)
    everything = torch.ones(shape.sq, shape.sk, dtype=torch.bool)
    if spec.normalizer == "softmax":
        want, _ = softmax_attention(scores, everything, vx)
    else:
        want = elementwise_attention(_ACTIVATIONS[spec.normalizer](scores), everything, vx)
    return bool(torch.allclose(got.to(torch.float64), want, rtol=1e-6, atol=1e-8))
