"""What a user would run instead of our kernel (BENCHMARK.md, Peers).

Each peer's `prepare(case)` does the work a user does once (build a mask, a
BlockMask, transpose to another layout) and returns the call to time; it raises
Unsupported when the peer cannot express the variant or is not installed.

cubridge/verify/peers.py (specs and verifier part) wraps SDPA and FlexAttention
as one-shot callables for CPU verification; benchmarking needs the one-off
preparation kept out of the timed call, hence these.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from cubridge.bench.case import Case, first_tensor
from cubridge.bench.mods import arange, eval_mask, eval_score_bias, index_grid, softcap_of


class Unsupported(Exception):
    """This implementation cannot run this variant here (the message says why)."""


@dataclass
class Prepared:
    run: Callable[[], object]  # the timed call
    note: str = ""  # how the peer expresses the variant, e.g. "dense mask"
    # untimed: the call's result -> out [B, Hq, Sq, Dv]
    to_standard: Callable[[object], torch.Tensor] = field(default=first_tensor)


@dataclass(frozen=True)
class Impl:
    name: str
    prepare: Callable[[Case], Prepared]
    source: str = ""  # what is being timed, for the report


def flash_attn_cute_available() -> bool:
    try:
        return importlib.util.find_spec("flash_attn.cute") is not None
    except (ImportError, ValueError):
        return False


def _require_softmax(case: Case, peer: str) -> None:
    if case.spec.normalizer != "softmax":
        raise Unsupported(f"{peer} has no {case.spec.normalizer} normaliser")


def _full_grid(case: Case) -> tuple[torch.Tensor, ...]:
    s, dev = case.shape, case.device
    return index_grid(arange(s.b, dev), arange(s.hq, dev), arange(s.sq, dev), arange(s.sk, dev))


def prepare_eager(case: Case) -> Prepared:
    """The spec's reference itself, in the benchmark dtype."""
    spec, q, k, v, aux = case.spec, case.q, case.k, case.v, dict(case.aux)
    return Prepared(lambda: spec.reference(q, k, v, **aux), note="spec reference")


def prepare_eager_fp32(case: Case) -> Prepared:
    """The spec's reference on float32 copies of the inputs, output cast back: what
    a user does when the reference in bf16 is not accurate enough (the casts are
    part of the timed call)."""
    spec, q, k, v, dtype = case.spec, case.q, case.k, case.v, case.dtype
    aux = dict(case.aux)

    def run() -> torch.Tensor:
        return first_tensor(spec.reference(q.float(), k.float(), v.float(), **aux)).to(dtype)

    return Prepared(run, note="float32 compute")


def prepare_sdpa(case: Case) -> Prepared:
    """SDPA: native is_causal for full/causal masks, else a dense bool mask or a
    dense float bias (mask as -inf) built from the mods."""
    _require_softmax(case, "SDPA")
    q, k, v, scale = case.q, case.k, case.v, case.scale
    gqa = case.shape.hq != case.shape.hk
    structure = case.stats.structure
    if case.spec.score_mod is None and structure in ("full", "causal"):
        causal = structure == "causal"
        return Prepared(
            lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale,
                                                   enable_gqa=gqa),
            note="native" + (" is_causal" if causal else ""))
    grid = _full_grid(case)
    mask = None if case.mods.mask_mod is None else eval_mask(case.mods.mask_mod, *grid)
    if case.mods.score_mod is None:
        attn_mask, note = mask, "dense mask"
    else:
        bias = eval_score_bias(case.mods.score_mod, *grid, dtype=q.dtype)
        if bias is None:
            raise Unsupported("SDPA: score_mod is not an additive bias")
        if mask is not None:
            bias = bias.masked_fill(~mask, float("-inf"))
        attn_mask, note = bias, "dense bias"
    attn_mask = attn_mask.contiguous() if attn_mask is not None else None
    return Prepared(
        lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, scale=scale,
                                               enable_gqa=gqa),
        note=note)


_compiled_flex: Callable[..., object] | None = None


def _flex_fn(compiled: bool) -> Callable[..., object]:
    global _compiled_flex
    from torch.nn.attention.flex_attention import flex_attention

    if not compiled:
        return flex_attention
    if _compiled_flex is None:
        # One compile per (variant, shape): lift dynamo's recompile limit (8 by
        # default), past which it silently falls back to the eager path.
        for knob in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit",
                     "accumulated_recompile_limit"):
            if hasattr(torch._dynamo.config, knob):
                setattr(torch._dynamo.config, knob, max(getattr(torch._dynamo.config, knob), 1024))
        _compiled_flex = torch.compile(flex_attention, dynamic=False)
    return _compiled_flex


def make_flex_preparer(backend: str, compiled: bool = True) -> Callable[[Case], Prepared]:
    """FlexAttention with a BlockMask from the mask_mod; backend 'TRITON' (the
    default AUTO choice) or 'FLASH' (needs flash-attn-4). `compiled=False` runs
    FlexAttention's eager path (CPU tests only: it materialises scores)."""

    def prepare_flex(case: Case) -> Prepared:
        from torch.nn.attention.flex_attention import create_block_mask

        _require_softmax(case, "FlexAttention")
        options = {}
        if backend == "FLASH":
            if not flash_attn_cute_available():
                raise Unsupported("Flex FLASH backend needs flash-attn-4 (flash_attn.cute)")
            options = {"BACKEND": "FLASH"}
        s, st = case.shape, case.stats
        block_mask = None
        if case.mods.mask_mod is not None and st.structure != "full":
            block_mask = create_block_mask(
                case.mods.mask_mod, s.b if st.depends_on_batch else None,
                s.hq if st.depends_on_head else None, s.sq, s.sk, device=case.device)
        flex = _flex_fn(compiled)
        q, k, v, scale, score_mod = case.q, case.k, case.v, case.scale, case.mods.score_mod
        kwargs = dict(score_mod=score_mod, block_mask=block_mask, scale=scale,
                      enable_gqa=s.hq != s.hk)
        if options:
            kwargs["kernel_options"] = options
        note = "BlockMask" if block_mask is not None else ""
        return Prepared(lambda: flex(q, k, v, **kwargs), note=note)

    return prepare_flex


def prepare_fa4(case: Case) -> Prepared:
    """FlashAttention-4 where its flags express the variant: full, causal,
    causal sliding window, each with an optional softcap."""
    _require_softmax(case, "FA4")
    if not flash_attn_cute_available():
        raise Unsupported("flash-attn-4 (flash_attn.cute) is not installed")
    st = case.stats
    structure = st.structure
    if structure not in ("full", "causal") and st.window is None:
        raise Unsupported(f"FA4 flags cannot express a {structure} mask")
    softcap = 0.0
    if case.spec.score_mod is not None:
        cap = softcap_of(case.mods.score_mod, case.device)
        if cap is None:
            raise Unsupported("FA4 flags cannot express this score_mod (only softcap)")
        softcap = cap
    from flash_attn.cute import flash_attn_func

    window = (st.window - 1, 0) if st.window is not None else (None, None)
    # FA4 takes [B, S, H, D]; the transposes are the user's one-off layout work.
    q, k, v = (t.transpose(1, 2).contiguous() for t in (case.q, case.k, case.v))
    kwargs = dict(softmax_scale=case.scale, causal=structure != "full", window_size=window,
                  softcap=softcap)
    note = ", ".join(x for x in ("window" if st.window else "", "softcap" if softcap else "") if x)
    return Prepared(lambda: flash_attn_func(q, k, v, **kwargs), note=note,
                    to_standard=lambda r: first_tensor(r).transpose(1, 2))


PEER_SOURCES = {
    "eager": "the spec's reference(q, k, v, **aux) in the input dtype",
    "eager_fp32": "the spec's reference on float32 copies, output cast back",
    "sdpa": "torch.nn.functional.scaled_dot_product_attention",
    "flex_triton": "torch.compile(flex_attention), Triton backend",
    "flex_flash": "torch.compile(flex_attention), kernel_options BACKEND=FLASH",
    "fa4": "flash_attn.cute.flash_attn_func",
}
PEERS: dict[str, Callable[[Case], Prepared]] = {
    "eager": prepare_eager,
    "eager_fp32": prepare_eager_fp32,
    "sdpa": prepare_sdpa,
    "flex_triton": make_flex_preparer("TRITON"),
    "flex_flash": make_flex_preparer("FLASH"),
    "fa4": prepare_fa4,
}


def peer_impls(names: list[str] | None = None) -> list[Impl]:
    """The named peers (all by default), in BENCHMARK.md's order."""
    names = list(PEERS) if names is None else names
    unknown = [n for n in names if n not in PEERS]
    if unknown:
        raise ValueError(f"unknown peer(s) {unknown}; known: {list(PEERS)}")
    return [Impl(n, PEERS[n], PEER_SOURCES[n]) for n in names]
