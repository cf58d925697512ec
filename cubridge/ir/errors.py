"""Errors of CuIR programs, each naming the IR source line and the worker.

A CuIR error is a bug in a kernel description (a hazard, a deadlock, an
illegal shape...), so the message says where in the IR it happened: the file
and line of the primitive call in the kernel's own source, not in the
executor, and which worker (warp role) made the call.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

_IR_DIR = os.path.dirname(os.path.abspath(__file__))


@dataclass(frozen=True)
class SourceLoc:
    """A line of IR source: the kernel file and line that called a primitive."""

    file: str
    line: int
    function: str

    def __str__(self) -> str:
        return f"{_short(self.file)}:{self.line}"


def _short(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:  # another drive on Windows
        return path
    return path if rel.startswith("..") else rel


@functools.lru_cache(maxsize=4096)
def _in_ir(path: str) -> bool:
    return os.path.dirname(os.path.abspath(path)) == _IR_DIR


def caller_loc() -> SourceLoc:
    """The first stack frame outside cubridge/ir: the IR line that made the call."""
    frame = sys._getframe(1)
    while frame is not None and _in_ir(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return SourceLoc("<unknown>", 0, "<unknown>")
    return SourceLoc(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)


def _no_worker() -> str | None:
    return None


# The name of the worker running on this thread; the scheduler installs it.
current_worker_name: Callable[[], str | None] = _no_worker


class CuIRError(Exception):
    """A CuIR program is wrong. `loc` is the IR line, `worker` the role that ran it."""

    kind = "error"

    def __init__(self, message: str, *, loc: SourceLoc | None = None, worker: str | None = None):
        # raised without a location (e.g. from a tile view): the IR line and
        # worker making the current call
        loc = loc if loc is not None else caller_loc()
        worker = worker if worker is not None else current_worker_name()
        self.detail = message
        self.loc = loc
        self.worker = worker
        where = []
        if loc is not None:
            where.append(f"{loc}")
        if worker is not None:
            where.append(f"worker {worker}")
        prefix = f"[{', '.join(where)}] " if where else ""
        super().__init__(f"{self.kind}: {prefix}{message}")


class HazardError(CuIRError):
    """A memory hazard: reading data that has not landed or is not ordered
    after its write, or overwriting data another role may still read."""

    kind = "hazard"


class DeadlockError(CuIRError):
    """Every unfinished worker is blocked and nothing in flight can unblock them."""

    kind = "deadlock"


class SyncError(CuIRError):
    """A barrier used inconsistently (arrival counts, transaction bytes, phases)."""

    kind = "sync error"


class StaticCheckError(CuIRError):
    """A resource or instruction limit of the target is violated (shared memory,
    matrix-op shape, async groups left unwaited)."""

    kind = "static check"


class RaceError(CuIRError):
    """The program's result depends on the scheduling policy."""

    kind = "race"


class ProgramError(CuIRError):
    """A primitive was called with arguments that make no sense (shapes, dtypes, spaces)."""

    kind = "program error"
