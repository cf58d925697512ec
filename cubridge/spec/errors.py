"""The one error a bad spec raises: what is wrong, and where (file:line)."""

from __future__ import annotations

import functools
import inspect
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
