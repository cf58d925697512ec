"""The one registry of peers: what a user would run instead of cubridge
(docs/benchmark.md, Peers), for the benchmark and the verifier alike.

`PEERS[name].prepare(problem)` does the work a user does once (build a mask,
a BlockMask, transpose to another layout) and returns the call to time; it
raises `Unsupported` when the peer cannot express the variant or is not
installed. Each peer gets the variant in the form its users write it
(cubridge.verify.peer_forms): 0-d aux as Python constants, FA4's own flags.
`cubridge bench` times the prepared calls (cubridge.bench.peers).
With `exact=True` a peer computes what the verifier compares (an LSE where it
has one, float32 where the input dtype would miss the tolerances, zeros for
rows with no allowed key); `eager_impl`, `sdpa_impl` and `flex_impl` are those
as verify() candidates, `impl(q, k, v, scale=None, **aux)`, which pickle as
(peer, spec file) so they can run in isolated workers.

- eager: the spec's reference in the input dtype; eager_fp32: on float32
  copies, output cast back (what `eager_impl` runs);
- sdpa: torch SDPA, native is_causal for full/causal masks, else a dense bool
  mask or a dense additive bias; a score factor no key changes scales Q first
  (peer_forms.query_scaled; SDPA takes no other score_mod);
- flex_triton / flex_flash: FlexAttention with a BlockMask from the mask_mod
  (or from score_mod's -inf condition where the spec masks there), built once
  per shape, compiled (Triton, or the FLASH backend of flash-attn-4);
  `flex_impl` runs it eager by default (works on CPU). Where
  the first call fails as its users' would, the next step they take: Triton
  with smaller tiles (out of shared memory), FLASH with a BlockMask of the key
  block its error names (its D = 256 tile) or with the mods rewritten around
  what its code generator lacks (cubridge.verify.flash_forms); FLASH gets the
  0-d tensors a mod makes as Python numbers from the start, since it reads a
  literal (torch.tensor(0.5)) wrongly without an error (flash_number_mods);
- fa4: FlashAttention-4 where its flags express the variant (causal,
  window_size for causal windows and bands, softcap), on Q scaled where the score
  has a factor no key changes; it imports lazily and says so when not installed.
"""

from __future__ import annotations

import importlib.util
import re
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from cubridge.attention import Shape, default_scale
from cubridge.spec import Spec, bind_mods, load, make_aux
from cubridge.spec.grids import (
    arange,
    eval_mask,
    eval_score_bias,
    index_grid,
    is_additive,
)
from cubridge.spec.mods import BoundMods
from cubridge.spec.shapes import fit_shapes
from cubridge.verify import flash_forms
from cubridge.verify.candidate import impl_factory
from cubridge.verify.error_text import error_summary
from cubridge.verify.flash_forms import flash_form, with_number_constants
from cubridge.verify.peer_forms import (
    QueryScaled,
    Unsupported,
    bound_constants,
    captured_tensors,
    constant_mods,
    fa4_flags,
    query_scaled,
)


def first_tensor(result: object) -> torch.Tensor:
    """out from an implementation returning out or (out, lse, ...)."""
    if isinstance(result, tuple | list):
        result = result[0]
    if not isinstance(result, torch.Tensor):
        raise TypeError(f"expected a tensor or a tuple starting with one, got {type(result)}")
    return result


@dataclass
class PeerProblem:
    """One problem a peer is prepared for: the spec, its inputs and what is known
    of the mask's structure (the benchmark counts it; None: not known)."""

    spec: Spec
    shape: Shape
    dtype: torch.dtype
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    aux: Mapping[str, torch.Tensor]
    mods: BoundMods  # the spec's mods with aux bound (cubridge.spec.mods.bind_mods)
    scale: float
    structure: str | None = None  # "full", "causal", ... (cubridge.bench.flops.MaskStats)
    band: tuple[int, int] | None = None  # (lo, hi) of q - k, when the mask is exactly that band
    depends_on_batch: bool = True
    depends_on_head: bool = True
    # the score_mod with the terms a peer's user precomputes per shape read from
    # tables (cubridge.bench.distance_mods); None: the spec's own
    precomputed_score_mod: Callable[..., torch.Tensor] | None = None
    # the mask the spec writes as -inf in its score_mod, as a mask_mod (the bench
    # fills it: cubridge.transfer.score_masks); None: none
    score_mask_mod: Callable[..., torch.Tensor] | None = None

    @property
    def device(self) -> torch.device:
        return self.q.device

    def constant_mods(self) -> BoundMods:
        """The mods as a peer's user writes them: 0-d aux as Python constants
        (cubridge.verify.peer_forms.constant_mods)."""
        return constant_mods(self.spec, self.aux)

    @property
    def is_plain_softmax(self) -> bool:
        """Standard attention with at most a mask: no score_mod, softmax normaliser."""
        return self.spec.score_mod is None and self.spec.normalizer == "softmax"


@dataclass
class Prepared:
    run: Callable[[], object]  # the call (the benchmark times it)
    note: str = ""  # how the peer expresses the variant, e.g. "dense mask"
    # untimed: the call's result -> out [B, Hq, Sq, Dv]
    to_standard: Callable[[object], torch.Tensor] = field(default=first_tensor)


Prepare = Callable[..., Prepared]  # (problem, exact=False, **options) -> Prepared


@dataclass(frozen=True)
class Peer:
    name: str
    source: str  # what is run, for reports
    prepare: Prepare
    check: Callable[[Spec], str] = lambda spec: ""  # why it cannot express a spec ("" if it can)

    def unsupported(self, spec: Spec) -> str:
        return self.check(spec)


def flash_attn_cute_available() -> bool:
    try:
        return importlib.util.find_spec("flash_attn.cute") is not None
    except (ImportError, ValueError):
        return False


def _softmax_only(peer: str) -> Callable[[Spec], str]:
    def check(spec: Spec) -> str:
        return "" if spec.normalizer == "softmax" else \
            f"{peer} has no {spec.normalizer} normaliser"
    return check


def _require(check: Callable[[Spec], str], spec: Spec) -> None:
    why = check(spec)
    if why:
        raise Unsupported(why)


def additive_bias_only(spec: Spec, shape: Shape | None = None) -> bool:
    """True if score_mod(s) - s does not depend on s, or does so only through a factor
    of s that no key changes, which is Q scaled (peer_forms.query_scaled); checked on a
    small grid."""
    if spec.score_mod is None:
        return True
    shape = shape or fit_shapes(spec, [Shape(2, 4, 2, 33, 47, 16)])[0]
    mods = bind_mods(spec, make_aux(spec, shape, torch.Generator().manual_seed(0)))
    # (a Q-scaled form's rest is a bias by construction: query_scaled checks linearity)
    return (is_additive(mods.score_mod, *_grid(shape, "cpu"))
            or query_scaled(mods.score_mod, shape) is not None)


def _grid(shape: Shape, device: torch.device | str) -> tuple[torch.Tensor, ...]:
    return index_grid(arange(shape.b, device), arange(shape.hq, device),
                      arange(shape.sq, device), arange(shape.sk, device))


# -- the peers -------------------------------------------------------------------------------

def prepare_eager(problem: PeerProblem, exact: bool = False) -> Prepared:
    """The spec's reference itself, in the input dtype (exact: on float32 copies)."""
    if exact:
        return prepare_eager_fp32(problem, exact)
    spec, q, k, v, aux = problem.spec, problem.q, problem.k, problem.v, dict(problem.aux)
    return Prepared(lambda: spec.reference(q, k, v, **aux), note="spec reference")


def prepare_eager_fp32(problem: PeerProblem, exact: bool = False) -> Prepared:
    """The spec's reference on float32 copies of the inputs, output cast back: what
    a user does when the reference in bf16 is not accurate enough (the casts are
    part of the timed call). exact: the LSE too, when the reference gives one."""
    spec, q, k, v, dtype = problem.spec, problem.q, problem.k, problem.v, problem.dtype
    up = lambda t: t.float() if t.is_floating_point() else t  # noqa: E731
    aux = {n: up(t) for n, t in problem.aux.items()} if exact else dict(problem.aux)

    def run() -> object:
        result = spec.reference(q.float(), k.float(), v.float(), **aux)
        if exact and isinstance(result, tuple):
            return result[0].to(dtype), result[1].float()
        return first_tensor(result).to(dtype)

    return Prepared(run, note="float32 compute")


def _query_scaled_form(problem: PeerProblem, score_mod: Callable[..., torch.Tensor] | None
                       ) -> tuple[Callable[..., torch.Tensor] | None, QueryScaled | None]:
    """(the score_mod left to express, the Q-scaled form or None): an additive bias or
    no score_mod is taken as it is; a score factor no key changes becomes Q scaled."""
    if score_mod is None or is_additive(score_mod, *_grid(_probe_shape(problem.shape),
                                                          problem.device)):
        return score_mod, None
    scaled = query_scaled(score_mod, problem.shape, problem.device)
    return (score_mod, None) if scaled is None else (scaled.rest, scaled)


def _probe_shape(shape: Shape) -> Shape:
    """The problem's shape with few rows and keys: enough for is_additive's check."""
    return Shape(shape.b, shape.hq, shape.hk, min(shape.sq, 64), min(shape.sk, 64), shape.d,
                 shape.dv)


def _sdpa_check(spec: Spec) -> str:
    if spec.normalizer != "softmax":
        return f"SDPA computes softmax attention; {spec.name} uses {spec.normalizer}"
    if not additive_bias_only(spec):
        return (f"SDPA: score_mod is not an additive bias, nor a factor of the score that "
                f"no key changes (Q scaled) ({spec.name})")
    return ""


def prepare_sdpa(problem: PeerProblem, exact: bool = False) -> Prepared:
    """SDPA: native is_causal for full/causal masks, else a dense bool mask or a
    dense float bias (mask as -inf, each row shifted to a max of 0) built from the
    mods; a score factor no key changes scales Q first (peer_forms.query_scaled).
    exact: the bias in float32 (on CUDA SDPA then runs in float32) and rows with
    no allowed key set to 0."""
    if problem.spec.normalizer != "softmax":
        raise Unsupported(f"SDPA has no {problem.spec.normalizer} normaliser")
    q, k, v, scale = problem.q, problem.k, problem.v, problem.scale
    mods = problem.constant_mods()
    score_mod, scaled = _query_scaled_form(problem, mods.score_mod)
    if scaled is not None and exact:
        # the factor in float32: Q rounded to bf16 after it misses the tolerances on large
        # scores (the bench's call below does round it, as a user's bf16 Q is)
        q, k, v = q.float() * scaled.factor, k.float(), v.float()
    elif scaled is not None:
        q = scaled.scale(q)
    gqa = problem.shape.hq != problem.shape.hk
    structure = problem.structure
    prefix = f"{scaled.note}; " if scaled is not None else ""
    if score_mod is None and structure in ("full", "causal"):
        causal = structure == "causal"
        return Prepared(
            lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale,
                                                   enable_gqa=gqa).to(problem.dtype),
            note=prefix + "native" + (" is_causal" if causal else ""))
    grid = _grid(problem.shape, problem.device)
    mask = None if mods.mask_mod is None else eval_mask(mods.mask_mod, *grid)
    if score_mod is None:
        attn_mask, note = mask, "dense mask"
    else:
        # Each row shifted to a max of 0 (softmax ignores it), as a user who builds the
        # bias in q's dtype must: unshifted, a non-causal ALiBi bias loses the keys near
        # each row's max to bf16 rounding (verification fails).
        bias = eval_score_bias(score_mod, *grid, mask=mask, shift_rows=True,
                               dtype=torch.float32 if exact else q.dtype)
        if bias is None:
            raise Unsupported("SDPA: score_mod is not an additive bias, nor a factor of the "
                              "score that no key changes (Q scaled)")
        attn_mask, note = bias, "dense bias, rows shifted to a max of 0"
    attn_mask = attn_mask.contiguous() if attn_mask is not None else None
    note = prefix + note
    if not exact:
        return Prepared(
            lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, scale=scale,
                                                   enable_gqa=gqa),
            note=note)
    upcast = mods.score_mod is not None and problem.device.type == "cuda"

    def run() -> torch.Tensor:
        qq, kk, vv = (t.float() for t in (q, k, v)) if upcast else (q, k, v)
        out = F.scaled_dot_product_attention(qq, kk, vv, attn_mask=attn_mask, scale=scale,
                                             enable_gqa=gqa).to(problem.dtype)
        if mask is None:
            return out
        # Rows with no allowed key: SDPA's result there is not specified; ours is 0.
        return out.masked_fill(~mask.any(-1, keepdim=True), 0.0)

    return Prepared(run, note=note)


_compiled_flex: Callable[..., object] | None = None


def _flex_fn(compiled: bool) -> Callable[..., object]:
    global _compiled_flex
    from torch.nn.attention.flex_attention import flex_attention  # optional in old torch

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


def make_flex_preparer(backend: str = "TRITON", compiled: bool = True) -> Prepare:
    """FlexAttention with a BlockMask from the mask_mod; backend 'TRITON' (the
    default AUTO choice) or 'FLASH' (needs flash-attn-4). `compiled=False` runs
    FlexAttention's eager path (CPU: it materialises scores), also per call.
    exact: returns (out, lse)."""
    default_compiled = compiled

    def prepare_flex(problem: PeerProblem, exact: bool = False,
                     compiled: bool = default_compiled) -> Prepared:
        from torch.nn.attention.flex_attention import AuxRequest, create_block_mask

        if problem.spec.normalizer != "softmax":
            raise Unsupported(f"FlexAttention has no {problem.spec.normalizer} normaliser")
        options = {}
        if backend == "FLASH":
            if not flash_attn_cute_available():
                raise Unsupported("Flex FLASH backend needs flash-attn-4 (flash_attn.cute)")
            options = {"BACKEND": "FLASH"}
        s, mods = problem.shape, problem.constant_mods()
        # a mask written as -inf in score_mod: its BlockMask from that condition, as a
        # user who knows FlexAttention's block sparsity writes it (transfer.score_masks)
        lifted = None if mods.mask_mod is not None else problem.score_mask_mod
        if lifted is not None:
            mods = BoundMods(mods.score_mod, lifted)
        tabled = problem.precomputed_score_mod is not None
        if tabled:
            mods = BoundMods(problem.precomputed_score_mod, mods.mask_mod)

        def flex_kwargs(mods: BoundMods, kv_block: int | None = None) -> dict[str, object]:
            block_mask = None
            if mods.mask_mod is not None and problem.structure != "full":
                # Once per shape, untimed: what a user does before the first call.
                size = {} if kv_block is None else {"BLOCK_SIZE": (128, kv_block)}
                block_mask = create_block_mask(
                    mods.mask_mod, s.b if problem.depends_on_batch else None,
                    s.hq if problem.depends_on_head else None, s.sq, s.sk,
                    device=problem.device, **size)
            kwargs = dict(score_mod=mods.score_mod, block_mask=block_mask,
                          scale=problem.scale, enable_gqa=s.hq != s.hk)
            return {**kwargs, "kernel_options": options} if options else kwargs

        flex = _flex_fn(compiled)
        q, k, v = problem.q, problem.k, problem.v
        written, numbers = mods, ""  # (the note names what the mods as written capture)
        if backend == "FLASH":
            mods, numbers = flash_number_mods(mods, problem.device)
        kwargs = flex_kwargs(mods)
        note = flex_note(problem, kwargs["block_mask"] is not None, written, tabled,
                         from_score_mod=lifted is not None)
        note = "; ".join(p for p in (note, numbers) if p)
        if compiled and q.is_cuda:
            call = lambda **kw: flex(q, k, v, **kw)  # noqa: E731
            if backend == "TRITON":
                kwargs, note = fit_triton_tiles(call, kwargs, note)
            else:
                kwargs, note = fit_flash_mods(call, kwargs, note, mods, flex_kwargs,
                                              problem.device)
        if not exact:
            return Prepared(lambda: flex(q, k, v, **kwargs), note=note)

        def run() -> tuple[torch.Tensor, torch.Tensor]:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*flex_attention called without")
                out, aux_out = flex(q, k, v, return_aux=AuxRequest(lse=True), **kwargs)
            return out, aux_out.lse

        return Prepared(run, note=note)

    return prepare_flex


# Flex Triton's default tiles can ask an SM for more shared memory than it has where
# the mods capture several tensors (Graphormer's edge encoding: 262,144 B of 232,448);
# the error says "Reducing block sizes or `num_stages` may help", and so its users do.
TRITON_SMALL_TILES = {"BLOCK_M": 64, "BLOCK_N": 64, "num_stages": 1}


def fit_triton_tiles(call: Callable[..., object], kwargs: dict[str, object],
                     note: str) -> tuple[dict[str, object], str]:
    """(kwargs, note) with which `call` runs: as given, or with smaller tiles where
    the first call (the compile, the user's warm-up) ran out of shared memory."""
    try:
        call(**kwargs)
        return kwargs, note
    except Exception as exc:  # noqa: BLE001 - only the out-of-resource error is retried
        if "out of resource" not in str(exc) or "kernel_options" in kwargs:
            raise
    smaller = {**kwargs, "kernel_options": dict(TRITON_SMALL_TILES)}
    call(**smaller)
    tiles = ", ".join(f"{k}={v}" for k, v in TRITON_SMALL_TILES.items())
    return smaller, "; ".join(p for p in (note, f"kernel_options {tiles} (the default tiles "
                                                "ran out of shared memory)") if p)


# Flex FLASH's error where the BlockMask's key blocks do not tile its kernel's (at
# D = 256 its Hopper kernel takes 80 keys a block, the default BlockMask 128).
_FLASH_TILE_N = re.compile(r"sparse_block_size\[1\] to be a multiple of tile_n=(\d+)")


def flash_number_mods(mods: BoundMods, device: torch.device) -> tuple[BoundMods, str]:
    """(mods, note): the mods with the 0-d tensors they make as Python numbers, as
    a user of Flex FLASH writes them (flash_forms.with_number_constants: its kernel
    misreads a tensor literal made in a mod, and says nothing), and what that did
    or why not."""
    score = with_number_constants(mods.score_mod, True, device)
    mask = with_number_constants(mods.mask_mod, False, device)
    return BoundMods(score.mod, mask.mod), "; ".join(f.note for f in (score, mask) if f.note)


def fit_flash_mods(call: Callable[..., object], kwargs: dict[str, object], note: str,
                   mods: BoundMods, remake: Callable[..., dict[str, object]],
                   device: torch.device) -> tuple[dict[str, object], str]:
    """(kwargs, note) with which Flex FLASH runs `call`: as given; with a BlockMask
    of the key block its error names (`remake(mods, kv_block)`), as the error tells
    its users; or with the mods in the form its users must write for it
    (cubridge.verify.flash_forms, `remake(mods)`) where the first call (the
    compile) fails. Where that form fails too, the error says both."""
    try:
        call(**kwargs)
        return kwargs, note
    except Exception as exc:  # noqa: BLE001 - the rewrite is what a user tries next
        first = exc
    tile_n = _FLASH_TILE_N.search(str(first))
    resize: dict[str, int] = {}
    if tile_n is not None:
        resize = {"kv_block": int(tile_n.group(1))}
        resized = remake(mods, **resize)
        sized = f"BlockMask of {resize['kv_block']}-key blocks, the key tile its error names"
        note = "; ".join(p for p in (note, sized) if p)
        try:
            call(**resized)
            return resized, note
        except Exception as exc:  # noqa: BLE001 - the mods' form next, at that block
            first = exc
    try:
        form = BoundMods(flash_form(mods.score_mod, True, device),
                         flash_form(mods.mask_mod, False, device))
        rewritten = remake(form, **resize)
        call(**rewritten)
    except Exception as exc:  # noqa: BLE001 - reported with the first error
        raise RuntimeError(f"{error_summary(first, 120)}; rewritten as its users must "
                           f"(flash_forms): {error_summary(exc, 200)}") from exc
    return rewritten, "; ".join(p for p in (note, f"mods written for it: {flash_forms.WHAT} "
                                            f"(as given: {error_summary(first, 120)})") if p)


def flex_note(problem: PeerProblem, block_mask: bool, mods: BoundMods,
              distance_table: bool = False, from_score_mod: bool = False) -> str:
    """How FlexAttention was given the variant: its BlockMask (`from_score_mod`: of
    score_mod's -inf condition), the 0-d aux bound as constants, the tensors its
    mods capture, a distance table."""
    constants = bound_constants(problem.spec, problem.aux)
    # (a tabled score_mod's closure holds its tables, named by the note instead)
    score_tensors = [] if distance_table else captured_tensors(mods.score_mod)
    tensors = sorted(set(captured_tensors(mods.mask_mod) + score_tensors))
    parts = ["BlockMask" + (" of score_mod's -inf condition" if from_score_mod else "")
             if block_mask else "",
             ", ".join(f"{n}={v}" for n, v in constants.items()),
             "score term of (h, q - k) as a table" if distance_table else "",
             f"captures {', '.join(tensors)}" if tensors else ""]
    return "; ".join(p for p in parts if p)


def _import_fa4() -> Callable[..., object]:
    """flash_attn.cute.flash_attn_func, imported on first use (optional)."""
    if not flash_attn_cute_available():
        raise Unsupported("flash-attn-4 (flash_attn.cute) is not installed")
    try:
        from flash_attn.cute import flash_attn_func
    except Exception as exc:  # noqa: BLE001 - a broken install is reported, not raised
        raise Unsupported(f"flash-attn-4 is installed but does not import: "
                          f"{type(exc).__name__}: {exc}") from exc
    return flash_attn_func


def prepare_fa4(problem: PeerProblem, exact: bool = False) -> Prepared:
    """FlashAttention-4 with its own flags (cubridge.verify.peer_forms.fa4_flags):
    full, causal, causal sliding window or a band around the diagonal (window_size), each
    with a softcap."""
    score_mod, scaled = _query_scaled_form(problem, problem.constant_mods().score_mod)
    flags = fa4_flags(problem.spec, problem.shape, problem.structure, problem.band,
                      score_mod, problem.device)
    flash_attn_func = _import_fa4()
    q = problem.q if scaled is None else scaled.scale(problem.q)
    # FA4 takes [B, S, H, D]; the transposes are the user's one-off layout work.
    q, k, v = (t.transpose(1, 2).contiguous() for t in (q, problem.k, problem.v))
    kwargs = dict(softmax_scale=problem.scale, **flags.kwargs())
    note = "; ".join(n for n in (scaled.note if scaled else "", flags.note) if n)
    return Prepared(lambda: flash_attn_func(q, k, v, **kwargs), note=note,
                    to_standard=lambda r: first_tensor(r).transpose(1, 2))


PEERS: dict[str, Peer] = {p.name: p for p in (
    Peer("eager", "the spec's reference(q, k, v, **aux) in the input dtype", prepare_eager),
    Peer("eager_fp32", "the spec's reference on float32 copies, output cast back",
         prepare_eager_fp32),
    Peer("sdpa", "torch.nn.functional.scaled_dot_product_attention", prepare_sdpa, _sdpa_check),
    Peer("flex_triton", "torch.compile(flex_attention), Triton backend",
         make_flex_preparer("TRITON"), _softmax_only("FlexAttention")),
    Peer("flex_flash", "torch.compile(flex_attention), kernel_options BACKEND=FLASH",
         make_flex_preparer("FLASH"), _softmax_only("FlexAttention")),
    Peer("fa4", "flash_attn.cute.flash_attn_func", prepare_fa4, _softmax_only("FA4")),
)}


def get_peer(name: str) -> Peer:
    if name not in PEERS:
        raise ValueError(f"unknown peer {name!r}; known: {list(PEERS)}")
    return PEERS[name]


# -- the peers as verify() candidates -----------------------------------------------------------

class PeerImpl:
    """A peer bound to a spec, called as impl(q, k, v, scale=None, **aux) with
    exact=True. Pickles as (peer name, spec path, options)."""

    def __init__(self, peer: str | Peer, spec: Spec, **options: object) -> None:
        self.peer = get_peer(peer) if isinstance(peer, str) else peer
        if not self.peer.name.startswith("eager") and not spec.mods_describe_reference:
            raise Unsupported(f"{spec.name}: its reference does more than its mods say "
                              f"(it has none), so {self.peer.name} cannot compute it")
        _require(self.peer.check, spec)
        self.spec, self.options = spec, options  # options: the peer's prepare's keywords
        self.name = f"{self.peer.name}[{spec.name}]"

    def __call__(self, q, k, v, scale=None, **aux):  # noqa: ANN001, ANN204
        d, dv = q.shape[3], v.shape[3]
        shape = Shape(q.shape[0], q.shape[1], k.shape[1], q.shape[2], k.shape[2], d,
                      dv if dv != d else None)
        scale = scale if scale is not None else (
            self.spec.scale if self.spec.scale is not None else default_scale(d))
        problem = PeerProblem(self.spec, shape, q.dtype, q, k, v, aux,
                              bind_mods(self.spec, aux), float(scale))
        return self.peer.prepare(problem, exact=True, **self.options).run()

    def __reduce__(self):  # noqa: ANN204
        if self.spec.path is None:
            raise TypeError(f"{self.name}: a spec built in memory cannot be sent to a worker")
        return (_rebuild, (self.peer.name, str(self.spec.path), self.options))


def _rebuild(peer: str, path: str, options: dict) -> PeerImpl:
    return PeerImpl(peer, load(path), **options)


@impl_factory
def eager_impl(spec: Spec) -> PeerImpl:
    """The spec's reference on float32 copies (the eager_fp32 peer)."""
    return PeerImpl("eager_fp32", spec)


@impl_factory
def sdpa_impl(spec: Spec) -> PeerImpl:
    """Raises Unsupported if SDPA cannot express the spec."""
    return PeerImpl("sdpa", spec)


@impl_factory
def flex_impl(spec: Spec, compile: bool = False) -> PeerImpl:
    """FlexAttention, eager unless `compile`; raises Unsupported if it cannot
    express the spec."""
    return PeerImpl("flex_triton", spec, compiled=compile)
