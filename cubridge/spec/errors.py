"""The one error a bad spec raises: what is wrong, and where (file:line)."""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap
import traceback
from collections.abc import Callable
from pathlib import Path


class SpecError(Exception):
    """A spec file is malformed or its reference misbehaves.

    `location` is "file:line" when the problem has a line, "file" when it only
    has a file, or None for a spec built in memory.
    """

    def __init__(self, message: str, location: str | None = None) -> None:
        self.message = message
        self.location = location
        super().__init__(f"{location}: {message}" if location else message)


def location_of(fn: Callable[..., object] | None, fallback: str | None = None) -> str | None:
    """file:line where a function is defined (or `fallback` if it has no code)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    try:
        code = fn.__code__  # type: ignore[union-attr]
    except AttributeError:
        try:
            return f"{inspect.getsourcefile(fn)}:{inspect.getsourcelines(fn)[1]}"  # type: ignore[arg-type]
        except (TypeError, OSError):
            return fallback
    return f"{code.co_filename}:{code.co_firstlineno}"


def return_location(fn: Callable[..., object], fallback: str | None) -> str | None:
    """file:line of `fn`'s return statement where it has one (what it returned is
    blamed there), else `fallback`."""
    try:
        lines, start = inspect.getsourcelines(fn)  # type: ignore[arg-type]
        tree = ast.parse(textwrap.dedent("".join(lines)))
        path = inspect.getsourcefile(fn)  # type: ignore[arg-type]
    except (OSError, TypeError, SyntaxError, IndentationError):
        return fallback
    top = tree.body[0] if tree.body else None
    if not isinstance(top, ast.FunctionDef | ast.AsyncFunctionDef) or path is None:
        return fallback
    returns: list[int] = []
    todo: list[ast.AST] = list(top.body)
    while todo:  # (returns of nested functions are theirs, not fn's)
        node = todo.pop()
        if isinstance(node, ast.Return):
            returns.append(node.lineno)
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
                          | ast.ClassDef):
            todo.extend(ast.iter_child_nodes(node))
    return f"{path}:{start + returns[0] - 1}" if len(returns) == 1 else fallback


def top_level_lines(tree: ast.Module) -> dict[str, int]:
    """The line each top-level name of a module is assigned or defined on."""
    lines: dict[str, int] = {}
    for node in tree.body:
        targets = (node.targets if isinstance(node, ast.Assign) else
                   [node.target] if isinstance(node, ast.AnnAssign | ast.AugAssign) else [])
        for t in targets:
            if isinstance(t, ast.Name):
                lines[t.id] = node.lineno
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            lines[node.name] = node.lineno
    return lines


def location_of_name(path: Path | None, name: str) -> str | None:
    """file:line where the spec file `path` assigns the top-level `name` (the
    file alone when it does not; None for a spec built in memory)."""
    if path is None:
        return None
    try:
        line = top_level_lines(ast.parse(Path(path).read_text())).get(name)
    except (OSError, SyntaxError, ValueError):
        line = None
    return f"{path}:{line}" if line else str(path)


def location_in_traceback(exc: BaseException, path: Path | None) -> str | None:
    """file:line of the innermost frame of `exc` inside the spec file `path`."""
    if path is None:
        return None
    wanted = str(path.resolve())
    found = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename and str(Path(frame.filename).resolve()) == wanted:
            found = f"{path}:{frame.lineno}"
    return found or str(path)


def describe_exception(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def self_attention_hint(spec: object, shape: object) -> str:
    """What to say where a spec raised on a shape whose queries and keys differ in
    length: a spec written for self-attention (one position tensor for both) says so."""
    sq, sk = getattr(shape, "sq", None), getattr(shape, "sk", None)
    if sq == sk or getattr(spec, "self_attention", False):
        return ""
    return (f"; this shape has Sq = {sq} != Sk = {sk}: a spec for self-attention only (one "
            "per-position tensor for queries and keys) says SELF_ATTENTION = True, and is "
            "then checked, verified and run at Sq = Sk")
