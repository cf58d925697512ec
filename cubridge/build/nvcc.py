"""Finding and running nvcc, and turning its diagnostics into file:line errors."""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from pathlib import Path

from cubridge.build.errors import CompileError, NvccNotFoundError

# nvcc/cudafe: "path/file.cu(123): error: message"; ptxas: "ptxas fatal : message"
_DIAGNOSTIC = re.compile(
    r"^(?P<file>[^\s(][^(]*)\((?P<line>\d+)\): (?P<severity>error|warning|catastrophic error)"
    r"(?: #\S+)?: (?P<message>.*)$"
)
FALLBACK_ROOTS = ("/usr/local/cuda",)  # searched after PATH, CUDA_HOME, CUDA_PATH
_TOOL_ERROR = re.compile(
    r"^(?P<tool>ptxas|nvlink|nvcc|fatbinary)\s*(?:fatal|error)\s*: (?P<message>.*)$"
)


def find_nvcc() -> Path:
    """nvcc from PATH, else $CUDA_HOME/bin or $CUDA_PATH/bin, else /usr/local/cuda/bin."""
    on_path = shutil.which("nvcc")
    if on_path:
        return Path(on_path)
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), *FALLBACK_ROOTS):
        if root and (Path(root) / "bin" / "nvcc").is_file():
            return Path(root) / "bin" / "nvcc"
    raise NvccNotFoundError(
        "nvcc not found: put the CUDA toolkit's bin directory on PATH or set CUDA_HOME "
        "(cubridge needs nvcc 12.4+ to compile kernels; nvcc 13.0 is what it is tested with)"
    )


def nvcc_available() -> bool:
    try:
        find_nvcc()
    except NvccNotFoundError:
        return False
    return True


@functools.cache
def nvcc_version(nvcc: Path | None = None) -> str:
    """The full `nvcc --version` release line, e.g. 'Cuda compilation tools,
    release 13.0, V13.0.88' (part of every cache key)."""
    exe = nvcc or find_nvcc()
    out = subprocess.run([str(exe), "--version"], capture_output=True, text=True, check=True)
    lines = [ln for ln in out.stdout.splitlines() if "release" in ln]
    return lines[-1].strip() if lines else out.stdout.strip()


def parse_diagnostics(log: str) -> list[tuple[str, int, str, str]]:
    """(file, line, severity, message) for each diagnostic in an nvcc log; tool
    errors without a location (ptxas, nvlink) get file = tool name, line = 0."""
    found: list[tuple[str, int, str, str]] = []
    for raw in log.splitlines():
        line = raw.strip()
        if m := _DIAGNOSTIC.match(line):
            found.append((m["file"], int(m["line"]), m["severity"], m["message"].strip()))
        elif m := _TOOL_ERROR.match(line):
            found.append((m["tool"], 0, "error", m["message"].strip()))
    return found


def run_nvcc(args: list[str], *, cwd: Path, rename: dict[str, str] | None = None,
             timeout_s: float = 600.0) -> str:
    """Run nvcc with `args`; return its combined log. On failure raise
    CompileError listing each error as 'file:line: error: message' (paths in
    `rename` are replaced by readable names, e.g. a generated hooks header)."""
    exe = find_nvcc()
    proc = subprocess.run([str(exe), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout_s)
    log = proc.stdout + proc.stderr
    diagnostics = parse_diagnostics(log)  # before renaming: names may hold parentheses
    for path, name in (rename or {}).items():
        log = log.replace(path, name)
        diagnostics = [(name if f == path else f, ln, sev, msg) for f, ln, sev, msg in diagnostics]
    if proc.returncode == 0:
        return log
    errors = [d for d in diagnostics if d[2] != "warning"]
    if errors:
        listed = "\n".join(f"  {f}:{ln}: {sev}: {msg}" if ln else f"  {f}: {sev}: {msg}"
                           for f, ln, sev, msg in errors[:20])
        more = f"\n  ... and {len(errors) - 20} more" if len(errors) > 20 else ""
        message = f"nvcc failed with {len(errors)} error(s):\n{listed}{more}"
    else:
        tail = "\n".join(log.strip().splitlines()[-20:])
        message = f"nvcc failed (exit {proc.returncode}):\n{tail}"
    raise CompileError(message, diagnostics, log)
