"""compute-sanitizer: where it is, how to wrap a command in it, and the part of
its report that says what went wrong.

Where a generated kernel faults (an illegal address, a misaligned access, a
trap), the CUDA error alone names no line. Rerun under `compute-sanitizer
--tool memcheck`, the report names the access (read or write, size), the
kernel, the source line (cubins are built with -lineinfo), the thread and
block, and how far out of bounds the address lies.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from cubridge.build.nvcc import NvccNotFoundError, find_nvcc

EXECUTABLE = "compute-sanitizer"
MAX_REPORT_LINES = 30
_PREFIX = re.compile(r"^=+ ?")
# Lines of the report that say nothing about the fault.
_NOISE = ("COMPUTE-SANITIZER", "Saved host backtrace", "Host Frame", "ERROR SUMMARY",
          "LEAK SUMMARY", "Program hit")


def find_compute_sanitizer() -> Path | None:
    """compute-sanitizer on PATH, beside nvcc, or under CUDA_HOME; None if absent."""
    found = shutil.which(EXECUTABLE)
    if found:
        return Path(found)
    dirs = []
    try:
        dirs.append(find_nvcc().parent)
    except NvccNotFoundError:
        pass
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            dirs.append(Path(os.environ[var]) / "bin")
    dirs.append(Path("/usr/local/cuda/bin"))
    for d in dirs:
        for candidate in (d / EXECUTABLE, d.parent / "compute-sanitizer" / EXECUTABLE):
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return candidate
    return None


def sanitizer_argv(executable: Path, tool: str = "memcheck") -> list[str]:
    """The prefix that runs a command under the sanitizer: stop at the first
    error (a faulting kernel would otherwise repeat it per thread) and exit
    with a code of its own when it found one."""
    return [str(executable), "--tool", tool, "--print-limit", "3", "--show-backtrace",
            "device", "--error-exitcode", "86"]


def sanitizer_findings(output: str) -> list[str]:
    """The report's lines about the fault (the access, the kernel and line, the
    thread and block, the address), without the banner and host backtraces."""
    found: list[str] = []
    for raw in output.splitlines():
        if not raw.startswith("="):
            continue
        line = _PREFIX.sub("", raw).rstrip()
        if not line.strip() or any(line.lstrip().startswith(n) for n in _NOISE):
            continue
        found.append(line)
        if len(found) >= MAX_REPORT_LINES:
            break
    return found
