"""`cubridge.flex_attention`: FlexAttention's call, answered by a verified
cubridge kernel.

    from cubridge import flex_attention
    out = flex_attention(q, k, v, score_mod=softcap, block_mask=block_mask)

The arguments are FlexAttention's (torch.nn.attention.flex_attention): q
[B, Hq, Sq, D], k and v [B, Hk, Sk, D], mods called per element, a BlockMask
(its mask_mod is taken; its tiles are FlexAttention's, cubridge classifies
its own) or a bare `mask_mod=`. On the first call for a set of mods, shapes,
dtype and device it builds the spec from the mods (cubridge.spec.from_mods),
routes and traces it (the rules path: the mods must trace into the library
kernel's hooks), compiles the hooks into the library kernel, and verifies the
kernel on the GPU against the mods' own float64 attention at the call's
lengths before it returns anything. Kernels are cached by the traced form of
the mods (not their identity: re-created closures reuse the kernel), the head
dims, dtype and GPU; `STATS` counts traces, builds and verifications.

Under torch.compile(fullgraph=True) the preparation runs once while Dynamo
traces (`torch._dynamo.assume_constant_result`), and the graph holds one
`cubridge::attention_fwd` call: a second call with the same mods and shapes
neither recompiles nor rebuilds. Tensors the mods capture, and the block
tables of data-dependent masks, are then those of the first call: as with a
FlexAttention BlockMask, in-place changes to captured tensors are not seen by
the tables of a compiled graph (eager calls check and rebuild them).
"""

from __future__ import annotations

import dataclasses
import json
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import torch

from cubridge.attention import HeadConfig, Shape, default_scale
from cubridge.build.attention_op import call_attention_fwd, check_inputs
from cubridge.build.driver import device_arch, require_cuda_device
from cubridge.kernels import LibraryKernel, select_for_spec
from cubridge.lower.hook_header import HookHeader, generate_header
from cubridge.pipeline.route import choose_path
from cubridge.pipeline.variant import CompiledVariant, rules_variant
from cubridge.rundir import content_hash
from cubridge.spec.from_mods import from_mods
from cubridge.spec.model import Spec
from cubridge.spec.shapes import reduced_heads
from cubridge.transfer.hooks import HookPlan

# What the cache did, for callers that measure it (tests, benchmarks).
STATS = {"calls": 0, "traces": 0, "builds": 0, "verifications": 0}
MAX_CALLS = 256  # (mods, shapes) entries kept; the kernels themselves are few
VERIFY_MAX_LEN = 4096  # longer calls are verified on their first 4096 queries and keys
TRACE_CHECK_LEN = 128  # traced vs called mods on up to this many queries and keys


class FlexAttentionError(ValueError):
    """The call cannot run on a cubridge kernel: why, and what to change."""


@dataclass
class _Kernel:
    """A compiled, registered and verified kernel for one traced form."""

    variant: CompiledVariant
    kernel_key: str  # the cubridge::attention_fwd key of its build for this call's dims
    verified_on: list[Shape]


@dataclass
class _Call:
    """One (mods, shapes, dtype, device): its plan (with this call's captured
    tensors), the header bound to that plan, and the shared kernel."""

    plan: HookPlan
    header: HookHeader
    kernel: _Kernel
    shape: Shape
    device: torch.device
    packed: list[torch.Tensor]  # the aux slots as of preparation (compiled graphs)

    def pack(self) -> list[torch.Tensor]:
        return self.header.pack_aux({}, self.shape, self.device)


_CALLS: OrderedDict[str, _Call] = OrderedDict()
_BY_MODS: OrderedDict[tuple, str] = OrderedDict()
_KERNELS: dict[str, _Kernel] = {}


def _mask_mod_of(block_mask: object, mask_mod: Callable[..., torch.Tensor] | None,
                 sq: int, sk: int) -> Callable[..., torch.Tensor] | None:
    if block_mask is None:
        return mask_mod
    from torch.nn.attention.flex_attention import BlockMask, noop_mask

    if not isinstance(block_mask, BlockMask):
        raise FlexAttentionError(f"block_mask must be a FlexAttention BlockMask "
                                 f"(create_block_mask), got {type(block_mask).__name__}")
    if mask_mod is not None and mask_mod is not block_mask.mask_mod:
        raise FlexAttentionError("give the mask either as block_mask or as mask_mod, not two "
                                 "different ones")
    if block_mask.mask_mod is noop_mask:
        raise FlexAttentionError("this BlockMask has no mask_mod (BlockMask.from_kv_blocks "
                                 "without one): cubridge builds the kernel from the mask_mod; "
                                 "make the BlockMask with create_block_mask(mask_mod, ...)")
    lengths = tuple(block_mask.seq_lengths)
    if lengths != (sq, sk):
        raise FlexAttentionError(f"the BlockMask was made for (Sq, Sk) = {lengths}, the call "
                                 f"has ({sq}, {sk})")
    return block_mask.mask_mod


def _check_call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, enable_gqa: bool) -> None:
    for name, t in (("query", q), ("key", k), ("value", v)):
        if t.dim() != 4:
            raise FlexAttentionError(f"{name} must be 4-D [B, H, S, D], got shape "
                                     f"{tuple(t.shape)}")
    if q.shape[1] != k.shape[1] and not enable_gqa:
        raise FlexAttentionError(f"query has {q.shape[1]} heads, key {k.shape[1]}: pass "
                                 "enable_gqa=True for grouped-query attention (as FlexAttention)")
    if q.shape[1] % k.shape[1]:
        raise FlexAttentionError(f"query heads ({q.shape[1]}) must be a multiple of key heads "
                                 f"({k.shape[1]})")


def _verify_shape(shape: Shape) -> Shape:
    """The call's lengths (captured tensors may fix them), fewer heads and batches."""
    hq, hk = reduced_heads(HeadConfig("call", shape.hq, shape.hk, shape.d, shape.dv))
    return Shape(min(shape.b, 2), hq, hk, min(shape.sq, VERIFY_MAX_LEN),
                 min(shape.sk, VERIFY_MAX_LEN), shape.d, shape.dv)


def _kernel_for(plan: HookPlan, spec: Spec, lib: LibraryKernel, shape: Shape,
                dtype: torch.dtype, device: torch.device) -> _Kernel:
    """The compiled kernel of a traced form (built and verified once per
    traced form, dims, dtype and arch; verified again on a new length)."""
    from cubridge.verify import verify

    arch = device_arch(device)
    traced = {k: v for k, v in plan.to_json().items() if k not in ("name", "source")}
    key = content_hash(json.dumps(traced, sort_keys=True), lib.name, str(shape.d),
                       str(shape.head_dim_v), str(dtype), arch)
    found = _KERNELS.get(key)
    if found is None:
        header = generate_header(plan)
        variant = rules_variant(spec, lib, header)
        variant.prepare(device)
        STATS["builds"] += 1
        found = _Kernel(variant, variant._keys[(shape.d, shape.head_dim_v, dtype)], [])
        _KERNELS[key] = found
    check = _verify_shape(shape)
    if not any(s.sq == check.sq and s.sk == check.sk for s in found.verified_on):
        # the same builds, packing this call's captured tensors
        built = found.variant
        variant = CompiledVariant(spec, lib, built.builds,
                                  hooks=dataclasses.replace(built.hooks, plan=plan))
        variant._keys = dict(built._keys)
        report = verify(spec, variant, device="cuda", shapes=[check], dtypes=[dtype],
                        trials=1, seed=0, require_lse=True)
        STATS["verifications"] += 1
        if not report.passed:
            failed = next(c for c in report.cases if c.verdict != "pass")
            raise FlexAttentionError(f"the kernel built for these mods fails verification "
                                     f"against the mods' own attention on {check} "
                                     f"({failed.distribution} inputs): {failed.reason}")
        found.verified_on.append(check)
    return found


def plan_call(score_mod: Callable[..., torch.Tensor] | None,
              mask_mod: Callable[..., torch.Tensor] | None, shape: Shape, dtype: torch.dtype,
              arch: str, kernel: str | None = None) -> tuple[Spec, LibraryKernel, HookPlan]:
    """The spec, library kernel and traced hook plan of a call (no GPU needed):
    what the first call builds from, so that its cubins can be compiled ahead."""
    cfg = HeadConfig("call", shape.hq, shape.hk, shape.d, shape.dv)
    spec = from_mods(score_mod, mask_mod, name="flex_attention", configs=[cfg],
                     seq_lens=[shape.sq], dtypes=[dtype])
    lib = select_for_spec(spec, arch, kernel)
    check = dataclasses.replace(_verify_shape(shape), sq=min(shape.sq, TRACE_CHECK_LEN),
                                sk=min(shape.sk, TRACE_CHECK_LEN))
    route = choose_path(spec, lib, trace_check=check)
    STATS["traces"] += 1
    if route.path != "rules" or route.plan is None:
        raise FlexAttentionError(f"cubridge.flex_attention takes mods that trace into "
                                 f"{lib.name}'s hooks; these do not: {route.reason}")
    return spec, lib, route.plan


def _build_call(score_mod: Callable[..., torch.Tensor] | None,
                mask_mod: Callable[..., torch.Tensor] | None, shape: Shape, dtype: torch.dtype,
                device: torch.device, kernel: str | None) -> _Call:
    device = require_cuda_device(device)
    spec, lib, plan = plan_call(score_mod, mask_mod, shape, dtype, device_arch(device), kernel)
    found = _kernel_for(plan, spec, lib, shape, dtype, device)
    header = dataclasses.replace(found.variant.hooks, plan=plan)  # type: ignore[arg-type]
    call = _Call(plan, header, found, shape, device, [])
    call.packed = call.pack()
    return call


@torch._dynamo.assume_constant_result
def _prepare(score_mod: Callable[..., torch.Tensor] | None,
             mask_mod: Callable[..., torch.Tensor] | None, q_shape: tuple[int, ...],
             k_shape: tuple[int, ...], v_shape: tuple[int, ...], dtype: torch.dtype,
             device: str, kernel: str | None) -> str:
    """The key of the prepared call (building it on first use). Under
    torch.compile Dynamo runs this once and keeps the key as a constant."""
    ident = (score_mod, mask_mod, q_shape, k_shape, v_shape, dtype, device, kernel)
    key = _BY_MODS.get(ident)
    if key is not None and key in _CALLS:
        _BY_MODS.move_to_end(ident)
        return key
    b, hq, sq, d = q_shape
    _, hk, sk, dv = v_shape
    shape = Shape(b, hq, hk, sq, sk, d, dv if dv != d else None)
    call = _build_call(score_mod, mask_mod, shape, dtype, torch.device(device), kernel)
    key = content_hash(repr(id(score_mod)), repr(id(mask_mod)), repr(ident[2:]),
                       str(len(_CALLS)), str(STATS["traces"]))
    _CALLS[key] = call
    _BY_MODS[ident] = key
    while len(_BY_MODS) > MAX_CALLS:
        _, old = _BY_MODS.popitem(last=False)
        _CALLS.pop(old, None)
    return key


def flex_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                   score_mod: Callable[..., torch.Tensor] | None = None,
                   block_mask: object = None, scale: float | None = None,
                   enable_gqa: bool = False, return_lse: bool = False,
                   kernel_options: object = None, *, return_aux: object = None,
                   mask_mod: Callable[..., torch.Tensor] | None = None,
                   kernel: str | None = None) -> object:
    """torch.nn.attention.flex_attention.flex_attention's call on a verified
    cubridge kernel (forward only): out [B, Hq, Sq, Dv] in the inputs' dtype;
    with return_lse=True (out, lse), with return_aux=AuxRequest(lse=True)
    (out, AuxOutput(lse=lse)); lse is [B, Hq, Sq], float32, natural log.
    `kernel_options` (FlexAttention's tile choices) is accepted and ignored:
    the library kernel has its own. `mask_mod` is an alternative to a
    BlockMask; `kernel` names a library entry (default: the one selected for
    the GPU). See the module docstring for caching."""
    del kernel_options
    if return_aux is not None and getattr(return_aux, "max_scores", False):
        raise FlexAttentionError("return_aux=AuxRequest(max_scores=True): cubridge kernels "
                                 "return the LSE, not the row maxima")
    _check_call(query, key, value, enable_gqa)
    mask = _mask_mod_of(block_mask, mask_mod, query.shape[2], key.shape[2])
    ident = _prepare(score_mod, mask, tuple(query.shape), tuple(key.shape),
                     tuple(value.shape), query.dtype, str(query.device), kernel)
    call = _CALLS[ident]
    if torch.compiler.is_compiling():
        packed = call.packed
    else:
        STATS["calls"] += 1
        packed = call.pack()  # block tables rebuilt if a captured tensor changed
        check_inputs(query, key, value, [call.shape.d], [query.dtype], packed,
                     what="cubridge.flex_attention",
                     v_head_dims={call.shape.d: [call.shape.head_dim_v]})
    s = default_scale(query.shape[3]) if scale is None else float(scale)
    out, lse = call_attention_fwd(query, key, value, packed, s,
                                                call.kernel.kernel_key)
    out, lse = call.header.fill_empty_rows(out, lse, value)  # (floor masks: cubridge.empty_rows)
    if return_aux is not None and getattr(return_aux, "lse", False):
        from torch.nn.attention.flex_attention import AuxOutput

        return out, AuxOutput(lse=lse)
    return (out, lse) if return_lse else out
