"""Running generated code in a separate process, with limits.

`run_generated(source, ...)` checks the source statically, writes it to a job
folder, and runs it in a sandbox process (sandbox/child.py: forked from a warm
server, sandbox/forkserver.py, or spawned fresh) that loads it as a module and
calls a trusted entry point on it. The outcome comes back
pickled; a failure is a `SandboxError` naming the line of the generated file.

What is enforced:
- a wall-clock timeout (the process group is killed) and RLIMIT_CPU;
- RLIMIT_AS (memory), RLIMIT_FSIZE (file size), no core dumps;
- an environment stripped to PATH, HOME/TMPDIR (the job folder), PYTHONPATH
  and locale: no proxies, no API keys, no user settings;
- on Linux where user namespaces are allowed, a private network namespace:
  no network at all (`SandboxResult.isolation["network"]` says whether it
  was); elsewhere only the static check and the audit hook keep it off;
- an audit hook refusing sockets, subprocesses and writes outside the job folder.
What is not: CPU or memory use of other processes, reads of files the user
can read (the static check forbids open() and friends), and code that escapes
Python through native calls (ctypes and dunder access are statically refused).
"""

from __future__ import annotations

import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cubridge
from cubridge.llm.errors import SandboxError
from cubridge.llm.sandbox import forkserver
from cubridge.llm.sandbox.static_check import CUIR_MODULES, check_source

_PACKAGE_ROOT = str(Path(cubridge.__file__).resolve().parent.parent)


@dataclass(frozen=True)
class SandboxLimits:
    timeout_s: float = 120.0  # wall clock
    cpu_s: int | None = None  # None: 4 x the timeout (torch may use several cores)
    memory_mb: int | None = 16384  # address space; importing torch alone maps several GiB
    file_size_mb: int | None = 256
    isolate_network: bool = True
    threads: int | None = None  # OMP_NUM_THREADS for the child, None: unset

    def cpu_limit(self) -> int:
        return self.cpu_s if self.cpu_s is not None else int(self.timeout_s * 4) + 5


@dataclass
class SandboxResult:
    value: Any
    stdout: str
    stderr: str
    wall_s: float
    isolation: Mapping[str, str] = field(default_factory=dict)


def sandbox_env(job_dir: Path, threads: int | None) -> dict[str, str]:
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(job_dir),
        "TMPDIR": str(job_dir),
        "LANG": "C.UTF-8",
        "PYTHONPATH": _PACKAGE_ROOT,
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONFAULTHANDLER": "1",
    }
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    return env


def run_generated(
    source: str,
    *,
    filename: str = "generated.py",
    entry: str | None = None,
    call: str | None = None,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    limits: SandboxLimits | None = None,
    workdir: Path | None = None,
    preload: Sequence[str] = ("torch",),
    allowed_modules: Mapping[str, bool] | None = CUIR_MODULES,
    keep: bool = False,
) -> SandboxResult:
    """Run generated code in a sandbox process and return what it computed.

    entry: "package.module:function", trusted code called as
           function(generated_module, *args, **kwargs) (e.g. an IR verifier);
    call:  or the name of a function of the generated module to call with args;
           with neither, the module is only executed.
    allowed_modules: the static check's import allow-list (None skips the check).
    workdir: where the job folder goes (default: a temporary folder); with
             keep=True it stays, with the generated file, for inspection.
    Raises StaticCheckError or SandboxError; args and the result must pickle.
    """
    if entry is not None and call is not None:
        raise ValueError("pass entry or call, not both")
    if entry is not None and ":" not in entry:
        raise ValueError(f"entry must be 'package.module:function', got {entry!r}")
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*\.py", filename):
        raise ValueError(f"filename must be a plain Python file name, got {filename!r}")
    limits = limits or SandboxLimits()
    if allowed_modules is not None:
        check_source(source, filename=filename, modules=allowed_modules)
    if workdir is not None:
        Path(workdir).mkdir(parents=True, exist_ok=True)
    job_dir = Path(tempfile.mkdtemp(prefix="sandbox-", dir=workdir)).resolve()
    try:
        return _run_job(
            job_dir, source, filename, entry, call, args, dict(kwargs or {}), limits, preload
        )
    finally:
        if not keep:
            shutil.rmtree(job_dir, ignore_errors=True)


def _run_job(
    job_dir: Path,
    source: str,
    filename: str,
    entry: str | None,
    call: str | None,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    limits: SandboxLimits,
    preload: Sequence[str],
) -> SandboxResult:
    source_path = job_dir / filename
    source_path.write_text(source)
    mib = 1024 * 1024
    job = {
        "source_path": str(source_path),
        "entry": entry,
        "call": call,
        "args": tuple(args),
        "kwargs": kwargs,
        "preload": tuple(preload),
        "isolate_network": limits.isolate_network,
        "limits": {
            "memory_bytes": limits.memory_mb * mib if limits.memory_mb else None,
            "cpu_s": limits.cpu_limit(),
            "file_size_bytes": limits.file_size_mb * mib if limits.file_size_mb else None,
        },
    }
    (job_dir / "job.pkl").write_bytes(pickle.dumps(job))
    env = sandbox_env(job_dir, limits.threads)
    start = time.perf_counter()
    server = forkserver.take_server(preload, _server_env(env))
    if server is not None:
        try:
            returncode, stdout, stderr = _run_forked(server, job_dir, limits, filename, source)
            forkserver.give_back(server)
        except forkserver.ForkServerError:
            forkserver.discard(server)  # a broken server: this job runs in a fresh process
            server = None
    if server is None:
        returncode, stdout, stderr = _run_spawned(job_dir, env, limits, filename, source)
    wall = time.perf_counter() - start
    result_path = job_dir / "result.pkl"
    if returncode != 0 or not result_path.exists():
        _raise_crash(filename, returncode, stderr, source_path, source, limits)
    outcome = pickle.loads(result_path.read_bytes())
    if not outcome["ok"]:
        line = outcome["line"]
        at = _where(line, source)
        raise SandboxError(
            f"{filename}: {outcome['type']}: {outcome['message']}{at}",
            kind=outcome["kind"],
            line=line,
        )
    isolation = {**outcome["isolation"],
                 "process": "forked from a warm server" if server else "spawned"}
    return SandboxResult(outcome["value"], stdout, stderr, wall, isolation)


def _server_env(env: dict[str, str]) -> dict[str, str]:
    """The job's environment less its own folder: what a fork server is keyed by."""
    return {k: v for k, v in env.items() if k not in ("HOME", "TMPDIR")}


def _run_spawned(job_dir: Path, env: dict[str, str], limits: SandboxLimits, filename: str,
                 source: str) -> tuple[int, str, str]:
    """A fresh Python process for the job: (exit code, stdout, stderr)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "cubridge.llm.sandbox.child", str(job_dir)],
        cwd=job_dir,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,  # its own process group: a timeout kills all of it
    )
    try:
        stdout, stderr = proc.communicate(timeout=limits.timeout_s)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGUSR1)  # ask for a stack dump, then kill
        try:
            proc.communicate(timeout=0.3)
        except subprocess.TimeoutExpired:
            pass
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        _raise_timeout(filename, source, job_dir / filename, stderr, limits)
    return proc.returncode, stdout, stderr


def _run_forked(server: forkserver.ForkServer, job_dir: Path, limits: SandboxLimits,
                filename: str, source: str) -> tuple[int, str, str]:
    """The job in a child of a warm fork server: (exit code, stdout, stderr)."""
    pid = server.start_job(job_dir)
    try:
        returncode = server.wait_job(limits.timeout_s)
        if returncode is None:
            os.kill(pid, signal.SIGUSR1)  # ask for a stack dump, then kill
            if server.wait_job(0.3) is None:
                os.killpg(pid, signal.SIGKILL)
                server.wait_job(None)
    except forkserver.ForkServerError:
        _kill_group(pid)  # the server is gone: its child must not outlive it
        raise
    if returncode is None:
        forkserver.give_back(server)
        _raise_timeout(filename, source, job_dir / filename, _read(job_dir / "stderr"), limits)
    return returncode, _read(job_dir / "stdout"), _read(job_dir / "stderr")


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def _raise_timeout(filename: str, source: str, source_path: Path, stderr: str,
                   limits: SandboxLimits) -> None:
    line = _last_line_in(stderr, source_path)
    at = _where(line, source)
    raise SandboxError(
        f"{filename}: timed out after {limits.timeout_s:g}s{at} (an endless loop?)",
        kind="timeout",
        line=line,
    ) from None


def _raise_crash(
    filename: str,
    returncode: int,
    stderr: str,
    source_path: Path,
    source: str,
    limits: SandboxLimits,
) -> None:
    line = _last_line_in(stderr, source_path)
    at = _where(line, source)
    if returncode < 0:
        sig = signal.Signals(-returncode)
        if sig == signal.SIGXCPU:
            raise SandboxError(
                f"{filename}: CPU time limit of {limits.cpu_limit()}s exceeded{at}",
                kind="timeout",
                line=line,
            )
        raise SandboxError(
            f"{filename}: the process was killed by {sig.name}{at}", kind="crash", line=line
        )
    tail = stderr.strip()[-1500:] or "(no output)"
    raise SandboxError(
        f"{filename}: the sandbox process exited with status {returncode} without a result"
        f"{at}: {tail}",
        kind="crash",
        line=line,
    )


def _last_line_in(stderr: str, source_path: Path) -> int | None:
    """The innermost line of the generated file in a faulthandler or Python traceback."""
    pattern = re.compile(rf'File "{re.escape(str(source_path))}", line (\d+)')
    hits = pattern.findall(stderr)
    if not hits:
        return None
    # faulthandler lists the innermost frame first, Python tracebacks last.
    if "most recent call first" in stderr:
        return int(hits[0])
    return int(hits[-1])


def _where(line: int | None, source: str) -> str:
    if line is None:
        return ""
    lines = source.splitlines()
    text = lines[line - 1].strip() if 0 < line <= len(lines) else ""
    return f" at line {line}" + (f": {text}" if text else "")
