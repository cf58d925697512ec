"""Tensors a mod captures: its closure (nested closures such as FlexAttention's
`or_masks` included), functools.partial arguments and the globals it names.
The tracer lifts them to aux tensors (cubridge.transfer.captures); the mod
evaluators call a mod with its indices where its captured tensors live
(cubridge.spec.mods)."""

from __future__ import annotations

import functools

import torch

Found = dict[int, tuple[str, torch.Tensor]]  # id(tensor) -> (variable name, tensor)
_MAX_DEPTH = 8  # nested closures followed (or_masks(and_masks(...)) is 2)


def _named_tensors(fn: object, found: Found, seen: set[int], depth: int) -> None:
    """Record id(tensor) -> (variable name, tensor) for tensors reachable from `fn`."""
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


def _visit(value: object, name: str, found: Found, seen: set[int], depth: int) -> None:
    if isinstance(value, torch.Tensor):
        found.setdefault(id(value), (name, value))
    elif isinstance(value, tuple | list):
        for i, v in enumerate(value):
            _visit(v, f"{name}_{i}", found, seen, depth)
    elif callable(value):
        _named_tensors(value, found, seen, depth + 1)


def captured_tensors(fn: object) -> Found:
    """id(tensor) -> (the variable holding it, the tensor), for every tensor `fn`
    reaches; the first name found wins."""
    found: Found = {}
    if fn is not None:
        _named_tensors(fn, found, set(), 0)
    return found
