"""Calling a candidate implementation once, defensively.

The candidate protocol: impl(q, k, v, scale=None, **aux) -> out | (out, lse).
If it accepts `out=` / `lse=` keywords it gets NaN-filled buffers to write
into (returning None then means "the buffers hold the result"). This module
runs in the verifying process or, isolated, in a worker process.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from cubridge.modules import load_module_from_path
from cubridge.spec.inputs import Inputs

ImplRef = Callable[..., object] | str


@dataclass
class CallOutcome:
    """What one call of the candidate gave: outputs on CPU, or why not."""

    status: str  # "ok" | "error" | "timeout" | "crash"
    out: torch.Tensor | None = None
    lse: torch.Tensor | None = None
    message: str = ""
    modified_inputs: list[str] = field(default_factory=list)


def is_factory(fn: object) -> bool:
    return bool(getattr(fn, "cubridge_impl_factory", False))


def impl_factory(fn: Callable[..., object]) -> Callable[..., object]:
    """Mark `fn(spec) -> impl` so that `--impl MODULE:FUNC` calls it with the spec."""
    fn.cubridge_impl_factory = True  # type: ignore[attr-defined]
    return fn


def import_impl(ref: str) -> Callable[..., object]:
    """'package.module:func' or 'path/to/file.py:func' to the named object."""
    module_name, sep, attr = ref.rpartition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"impl {ref!r}: expected MODULE:FUNC (or FILE.py:FUNC)")
    if module_name.endswith(".py"):
        path = parse_impl_file(ref)
        try:
            module = load_module_from_path(path, prefix="cubridge_impl")
        except Exception as exc:
            raise ValueError(f"impl {ref!r}: {_located(exc, path)}") from exc
    else:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            raise
        except Exception as exc:  # a module that does not parse or raises on import
            raise ValueError(f"impl {ref!r}: importing {module_name}: {_located(exc)}") from exc
    try:
        fn = getattr(module, attr)
    except AttributeError as exc:
        raise ValueError(f"impl {ref!r}: {module_name} has no attribute {attr!r}") from exc
    if not callable(fn):
        raise ValueError(f"impl {ref!r} is a {type(fn).__name__}, not a function")
    return fn


def parse_impl_file(ref: str) -> Path:
    """For a 'FILE.py:FUNC' reference, the file, checked to exist and parse
    (without running it); ValueError saying where it does not."""
    path = Path(ref.rpartition(":")[0])
    if not path.is_file():
        raise ValueError(f"impl {ref!r}: no such file {path}")
    try:
        source = path.read_bytes()
        compile(source, str(path), "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:  # ValueError: null bytes
        raise ValueError(f"impl {ref!r}: {_located(exc, path)}") from None
    return path


def _located(exc: BaseException, path: Path | None = None) -> str:
    """'file:line: what' for an exception raised while loading impl code."""
    if isinstance(exc, SyntaxError):
        where = f"{exc.filename or path}:{exc.lineno}" if exc.lineno else str(exc.filename or path)
        return f"{where}: does not parse: {exc.msg}"
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if path is None or Path(f.filename) == path]
    where = f"{frames[-1].filename}:{frames[-1].lineno}: " if frames else ""
    return f"{where}raised while importing: {type(exc).__name__}: {exc}"


def resolve_impl(ref: ImplRef, spec_loader: Callable[[], object]) -> Callable[..., object]:
    """The callable a reference names; factories are called with the spec."""
    fn = import_impl(ref) if isinstance(ref, str) else ref
    return fn(spec_loader()) if is_factory(fn) else fn  # type: ignore[return-value]


def impl_name(ref: ImplRef) -> str:
    if isinstance(ref, str):
        return ref
    return getattr(ref, "name", None) or getattr(ref, "__qualname__", None) or repr(ref)


def buffer_parameters(impl: Callable[..., object]) -> set[str]:
    """Which of out= / lse= the candidate accepts by name."""
    try:
        params = inspect.signature(impl).parameters
    except (TypeError, ValueError):
        return set()
    return {n for n in ("out", "lse") if n in params}


def poison_cuda_allocator(device: torch.device, sizes: list[int]) -> None:
    """Hand the caching allocator NaN-filled free blocks of these byte sizes
    (the outputs' sizes: the allocator reuses a cached block of the same size
    class first), so that an output the candidate allocates but never writes
    reads as NaN."""
    blocks = [torch.full((max(1, -(-n // 4)),), float("nan"), device=device) for n in sizes]
    torch.cuda.synchronize(device)
    del blocks


def _unpack(result: object, buffers: dict[str, torch.Tensor]
            ) -> tuple[torch.Tensor, torch.Tensor | None]:
    if result is None:
        if "out" not in buffers:
            raise TypeError("impl returned None without an out= buffer to hold the result")
        return buffers["out"], buffers.get("lse")
    if isinstance(result, torch.Tensor):
        return result, buffers.get("lse")
    if isinstance(result, tuple | list) and len(result) == 2:
        out, lse = result
        if not isinstance(out, torch.Tensor) or not (lse is None or isinstance(lse, torch.Tensor)):
            raise TypeError(f"impl returned ({type(out).__name__}, {type(lse).__name__}); "
                            "expected tensors")
        return out, lse
    raise TypeError(f"impl returned {type(result).__name__}; expected out or (out, lse)")


def run_candidate(
    impl: Callable[..., object], inputs: Inputs, scale: float, device: str
) -> CallOutcome:
    """Call `impl` on copies of `inputs` moved to `device`, with poisoned
    outputs; never raises for the candidate's faults."""
    dev = torch.device(device)
    s = inputs.shape
    try:
        given = {n: t.to(dev, copy=True) for n, t in inputs.tensors().items()}
        wanted = buffer_parameters(impl)
        buffers = {}
        if "out" in wanted:
            buffers["out"] = torch.full((s.b, s.hq, s.sq, s.head_dim_v), float("nan"),
                                        dtype=inputs.dtype, device=dev)
        if "lse" in wanted:
            buffers["lse"] = torch.full((s.b, s.hq, s.sq), float("nan"), device=dev)
        if dev.type == "cuda":
            out_bytes = s.b * s.hq * s.sq * s.head_dim_v * inputs.q.element_size()
            lse_bytes = s.b * s.hq * s.sq * 4
            poison_cuda_allocator(dev, [out_bytes, lse_bytes, out_bytes + lse_bytes])
        q, k, v = given["q"], given["k"], given["v"]
        aux = {n: t for n, t in given.items() if n not in ("q", "k", "v")}
        result = impl(q, k, v, scale=scale, **aux, **buffers)
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        out, lse = _unpack(result, buffers)
        out = out.detach().to("cpu", copy=True)
        lse = lse.detach().to("cpu", copy=True) if lse is not None else None
        pristine = inputs.tensors()
        modified = [n for n, t in given.items() if not torch.equal(t.cpu(), pristine[n])]
    except Exception as exc:
        return CallOutcome("error", message=_short_traceback(exc))
    return CallOutcome("ok", out=out, lse=lse, modified_inputs=modified)


def _short_traceback(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)[-3:]
    where = "; ".join(f"{Path(f.filename).name}:{f.lineno} in {f.name}" for f in frames)
    return f"{type(exc).__name__}: {str(exc).strip()[:400]} ({where})"
