"""Our implementation under test, plugged in as MODULE:FUNC, FILE.py:FUNC, a
run directory (from `cubridge run`, holding a module that exposes `attention`),
or a folder of run directories (`runs/`), where each variant takes the newest
`<variant>-*` run directory.

Calling conventions, chosen from the function's signature:
- a library kernel with a `causal` flag, e.g. `cubridge.kernels.attention(q, k, v,
  scale=None, causal=False, ...)` (the entry select_kernel picks for the inputs):
  used for full and causal masks only;
- a per-variant kernel `attention(q, k, v, **aux)` (optionally `scale=`): called
  with the spec's aux tensors, for the variant it was built for.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from pathlib import Path

from cubridge.bench.case import Case
from cubridge.bench.peers import Impl, Prepared, Unsupported
from cubridge.verify.candidate import import_impl

DEFAULT_OURS = "cubridge.kernels:attention"
_DEFINES_ATTENTION = re.compile(r"^def attention\(", re.MULTILINE)


def _import(ref: str) -> Callable[..., object]:
    """verify's impl resolver; a failure makes the impl unavailable, not fatal."""
    try:
        return import_impl(ref)
    except Exception as exc:  # noqa: BLE001 - any import failure makes the impl unavailable
        raise Unsupported(f"cannot import {ref}: {type(exc).__name__}: {exc}") from exc


def _attention_modules(folder: Path) -> list[Path]:
    return [p for p in sorted(folder.glob("*.py"))
            if _DEFINES_ATTENTION.search(p.read_text(errors="replace"))]


def _run_dir_module(run_dir: Path, variant: str | None) -> Path:
    candidates = _attention_modules(run_dir)
    if not candidates and variant is not None:
        # A folder of run directories: the newest one made for this variant.
        runs = [d for d in run_dir.iterdir() if d.is_dir() and d.name.startswith(f"{variant}-")
                and _attention_modules(d)]
        if not runs:
            raise Unsupported(f"no run directory for {variant!r} under {run_dir} "
                              f"(expected {run_dir}/{variant}-*/ with a kernel module)")
        candidates = _attention_modules(max(runs, key=lambda d: d.stat().st_mtime))
    if len(candidates) != 1:
        found = [p.name for p in candidates] or "none"
        raise Unsupported(f"run directory {run_dir}: expected one .py file defining "
                          f"attention(q, k, v, **aux), found {found}")
    return candidates[0]


def load_callable(target: str, variant: str | None = None) -> Callable[..., object]:
    """Resolve MODULE:FUNC, FILE.py[:FUNC], a run directory, or (given the
    variant's name) a folder of run directories to a function."""
    path = Path(target.rpartition(":")[0] if ":" in target else target)
    if Path(target).is_dir():
        return _import(f"{_run_dir_module(Path(target), variant)}:attention")
    if path.suffix == ".py" or target.endswith(".py"):
        return _import(target if ":" in target else f"{target}:attention")
    if ":" not in target:
        raise Unsupported(f"{target!r}: expected MODULE:FUNC, FILE.py:FUNC or a run directory")
    return _import(target)


def external_impl(name: str, target: str) -> Impl:
    """An Impl that loads `target` on first use, per variant (a missing kernel is
    reported, not fatal)."""
    loaded: dict[str, Callable[..., object]] = {}

    def prepare(case: Case) -> Prepared:
        variant = case.spec.name
        if variant not in loaded:
            loaded[variant] = load_callable(target, variant)
        fn = loaded[variant]
        params = inspect.signature(fn).parameters
        q, k, v, scale = case.q, case.k, case.v, case.scale
        if "causal" in params:
            structure = case.stats.structure
            if not case.is_plain_softmax or structure not in ("full", "causal"):
                raise Unsupported(f"{target} has a causal flag only; this variant is "
                                  f"{structure}{'' if case.is_plain_softmax else ' with mods'}")
            causal = structure == "causal"
            return Prepared(lambda: fn(q, k, v, scale=scale, causal=causal),
                            note="causal" if causal else "")
        kwargs = dict(case.aux)
        if "scale" in params:
            kwargs["scale"] = scale
        return Prepared(lambda: fn(q, k, v, **kwargs))

    return Impl(name, prepare, target)


def flex_attention_impl(name: str = "ours") -> Impl:
    """`cubridge.flex_attention` called as a FlexAttention user calls it: the
    spec's own mods (a spec made by `from_mods` from mods that capture their
    tensors), no aux. Its first call, untimed, builds the kernel and verifies
    it on the GPU against the mods' float64 attention."""

    def prepare(case: Case) -> Prepared:
        import cubridge

        spec = case.spec
        if case.aux:
            raise Unsupported(f"cubridge.flex_attention takes FlexAttention's mods, which "
                              f"capture their tensors; spec {spec.name!r} passes aux "
                              f"{sorted(case.aux)}")
        if spec.normalizer != "softmax":
            raise Unsupported(f"cubridge.flex_attention is softmax attention; spec "
                              f"{spec.name!r} uses {spec.normalizer}")
        q, k, v, s = case.q, case.k, case.v, case.shape
        kwargs = dict(score_mod=spec.score_mod, mask_mod=spec.mask_mod, scale=case.scale,
                      enable_gqa=s.hq != s.hk)
        run = lambda: cubridge.flex_attention(q, k, v, **kwargs)  # noqa: E731
        run()
        return Prepared(run, note="cubridge.flex_attention (verified on its first call)")

    return Impl(name, prepare, "cubridge.flex_attention")
