"""Tensors a mod captures (closures, globals), lifted to aux tensors.

FlexAttention users write `doc_ids[q_idx] == doc_ids[kv_idx]` with `doc_ids`
captured by closure. When a traced mod indexes such a tensor, the tracer asks
`Captures.aux_name` for the tensor's aux name: the name of the variable that
holds it (found by walking the mods' closures, nested closures such as
FlexAttention's `or_masks`, functools.partial arguments and referenced
globals), made unique against the spec's own aux names. The lifted tensors
travel with the hook plan (`HookPlan.captured`), which supplies them when a
call does not pass them.
"""

from __future__ import annotations

import functools
import keyword
from collections.abc import Callable, Iterable, Mapping

import torch

_MAX_DEPTH = 8  # nested closures followed (or_masks(and_masks(...)) is 2)


def _named_tensors(fn: object, found: dict[int, str], seen: set[int], depth: int) -> None:
    """Record id(tensor) -> variable name for tensors reachable from `fn`."""
    if id(fn) in seen or depth > _MAX_DEPTH:
        return
    seen.add(id(fn))
    if isinstance(fn, functools.partial):
        for i, a in enumerate(fn.args):
            _visit(a, f"{getattr(fn.func, '__name__', 'partial')}_arg{i}", found, seen, depth)
        for k, a in fn.keywords.items():
            _visit(a, k, found, seen, depth)
        _named_tensors(fn.func, found, seen, depth + 1)
        return
    code = getattr(fn, "__code__", None)
    if code is None:
        return
    for name, cell in zip(code.co_freevars, getattr(fn, "__closure__", None) or (),
                          strict=False):
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        _visit(value, name, found, seen, depth)
    module_globals = getattr(fn, "__globals__", {})
    for name in code.co_names:
        if name in module_globals:
            value = module_globals[name]
            if isinstance(value, torch.Tensor) or (callable(value) and
                                                   getattr(value, "__code__", None) is not None):
                _visit(value, name, found, seen, depth)


def _visit(value: object, name: str, found: dict[int, str], seen: set[int], depth: int) -> None:
    if isinstance(value, torch.Tensor):
        found.setdefault(id(value), name)
    elif isinstance(value, tuple | list):
        for i, v in enumerate(value):
            _visit(v, f"{name}_{i}", found, seen, depth)
    elif callable(value):
        _named_tensors(value, found, seen, depth + 1)


def _identifier(name: str) -> str:
    name = "".join(c if c.isalnum() or c == "_" else "_" for c in name) or "captured"
    if name[0].isdigit() or keyword.iskeyword(name):
        name = "captured_" + name
    return name


class Captures:
    """The tensors the mods of one spec capture, with their aux names."""

    def __init__(self, mods: Iterable[Callable[..., object] | None],
                 taken: Iterable[str] = ()) -> None:
        self._names: dict[int, str] = {}
        seen: set[int] = set()
        for fn in mods:
            if fn is not None:
                _named_tensors(fn, self._names, seen, 0)
        self._taken = set(taken)
        self.lifted: dict[str, torch.Tensor] = {}  # aux name -> tensor, as traced
        self._by_id: dict[int, str] = {}

    def aux_name(self, tensor: torch.Tensor) -> str:
        """The aux name of a captured tensor (the same tensor, the same name)."""
        if id(tensor) in self._by_id:
            return self._by_id[id(tensor)]
        base = _identifier(self._names.get(id(tensor), "captured"))
        name, n = base, 1
        while name in self._taken or name in self.lifted:
            n += 1
            name = f"{base}_{n}"
        self._by_id[id(tensor)] = name
        self.lifted[name] = tensor
        return name


def on_device(captured: Mapping[str, torch.Tensor], device: torch.device | str
              ) -> dict[str, torch.Tensor]:
    """The captured tensors on `device` (the same tensors where they already are)."""
    return {n: t if t.device == torch.device(device) else t.to(device)
            for n, t in captured.items()}
