"""Warm sandbox processes: a fork server per set of preloaded modules.

A sandbox process that imports torch spends ~2.5 s (more on a busy machine)
before the generated code runs, and the LLM path runs one for every program it
checks. A fork server pays that once: it starts with the sandbox's stripped
environment, imports the preload modules (trusted code only; it never runs
generated code) and then, for each job, forks a child that becomes the sandbox
process: a new session, the job folder as its cwd, HOME and TMPDIR, stdout and
stderr into files there, then `child.main`, which isolates the network, sets
the limits, installs the audit hook and runs the generated code exactly as a
spawned sandbox does. Each job gets a fresh copy of the warm process, so
nothing one job does reaches another.

Protocol (one job at a time per server; a pool serves concurrent callers):
  parent -> server  "<job folder>\\n"
  server -> parent  "ready\\n" once, then per job "pid <pid>\\n" and
                    "exit <code>\\n" (Popen's convention: -N for signal N).

`CUBRIDGE_SANDBOX_FORK=0` spawns a fresh process per job instead; so does any
platform without fork, and a server that fails to start (the reason is kept
in `fork_unavailable`).
"""

from __future__ import annotations

import atexit
import importlib
import os
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

_START_TIMEOUT_S = 180.0  # importing torch on a loaded two-core machine
_servers_lock = threading.Lock()
_idle: dict[tuple, list[ForkServer]] = {}
_every: list[ForkServer] = []
fork_unavailable: dict[tuple, str] = {}


class ForkServerError(RuntimeError):
    """The server broke (died, or answered out of protocol); the job may be retried."""


def fork_enabled() -> bool:
    return (hasattr(os, "fork") and sys.platform.startswith("linux")
            and os.environ.get("CUBRIDGE_SANDBOX_FORK", "1") != "0")


class ForkServer:
    def __init__(self, key: tuple, preload: Sequence[str], env: dict[str, str]) -> None:
        self.key = key
        self.home = Path(tempfile.mkdtemp(prefix="sandbox-server-")).resolve()
        env = {**env, "HOME": str(self.home), "TMPDIR": str(self.home)}
        self.log = self.home / "server.log"  # a file: a pipe nobody reads could fill up
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "cubridge.llm.sandbox.forkserver", *preload],
                cwd=self.home, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=log, start_new_session=True)
        self._pending = b""
        try:
            line = self._line(time.monotonic() + _START_TIMEOUT_S)
        except ForkServerError:
            line = "(it exited)"
        if line != "ready":
            err = self._stderr_tail()
            self.close()
            raise ForkServerError(f"the sandbox fork server did not start ({line!r}): {err}")

    def start_job(self, job_dir: Path) -> int:
        """Fork a sandbox process for the job; its pid."""
        try:
            self.proc.stdin.write(f"{job_dir}\n".encode())
            self.proc.stdin.flush()
        except OSError as exc:
            raise ForkServerError(f"the sandbox fork server is gone: {exc}") from None
        line = self._line(time.monotonic() + 30.0)
        if line is None or not line.startswith("pid "):
            raise ForkServerError(f"the sandbox fork server answered {line!r}: "
                                  f"{self._stderr_tail()}")
        return int(line.split()[1])

    def wait_job(self, timeout_s: float | None) -> int | None:
        """The job's exit code, or None if it is still running after timeout_s."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        line = self._line(deadline)
        if line is None:
            return None
        if not line.startswith("exit "):
            raise ForkServerError(f"the sandbox fork server answered {line!r}: "
                                  f"{self._stderr_tail()}")
        return int(line.split()[1])

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        try:
            self.proc.stdin.close()  # the server exits at end of input
            self.proc.wait(timeout=2.0)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.home, ignore_errors=True)

    def _line(self, deadline: float | None) -> str | None:
        """The next line from the server; None at the deadline."""
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                return None
            chunk = os.read(fd, 4096)
            if not chunk:
                raise ForkServerError("the sandbox fork server exited: " + self._stderr_tail())
            self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        return line.decode()

    def _stderr_tail(self) -> str:
        try:
            text = self.log.read_text(errors="replace").strip()
        except OSError:
            text = ""
        return text[-800:] or "(no output)"


def take_server(preload: Sequence[str], env: dict[str, str]) -> ForkServer | None:
    """An idle server for these modules and environment (started if none is), or
    None where forking is off or a server could not start (spawn instead)."""
    key = (tuple(preload), tuple(sorted(env.items())))
    if not fork_enabled() or key in fork_unavailable:
        return None
    with _servers_lock:
        idle = _idle.setdefault(key, [])
        while idle:
            server = idle.pop()
            if server.alive():
                return server
            _every.remove(server)  # died while idle
            server.close()
    try:
        server = ForkServer(key, preload, env)
    except (ForkServerError, OSError) as exc:
        fork_unavailable[key] = str(exc)
        return None
    with _servers_lock:
        _every.append(server)
    return server


def give_back(server: ForkServer) -> None:
    with _servers_lock:
        if server.alive():
            _idle[server.key].append(server)


def discard(server: ForkServer) -> None:
    with _servers_lock:
        if server in _every:
            _every.remove(server)
    server.close()


@atexit.register
def _close_all() -> None:
    with _servers_lock:
        servers, _every[:] = list(_every), []
        _idle.clear()
    for server in servers:
        server.close()


# The server side: python -m cubridge.llm.sandbox.forkserver MODULE...


def _become_sandbox_process(job_dir: Path, run_job: Callable[[Path], int]) -> None:
    """In the forked child: the job's own session, folder, environment and output
    files, then the sandbox process's main. Never returns."""
    code = 1
    try:
        os.setsid()  # its own process group: a timeout kills all of it
        out = os.open(job_dir / "stdout", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        err = os.open(job_dir / "stderr", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        null = os.open(os.devnull, os.O_RDONLY)
        for fd, target in ((null, 0), (out, 1), (err, 2)):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(job_dir)
        os.environ["HOME"] = os.environ["TMPDIR"] = str(job_dir)
        tempfile.tempdir = None  # computed again from TMPDIR
        sys.path[0] = str(job_dir)  # as for `python -m ...` started there
        code = run_job(job_dir)
    except BaseException:  # noqa: BLE001 - reported on the job's stderr, as a crash
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def serve(preload: Sequence[str]) -> int:
    from cubridge.llm.sandbox import child  # the sandbox process's own code, warm

    for name in preload:
        importlib.import_module(name)
    reply = sys.stdout.buffer
    reply.write(b"ready\n")
    reply.flush()
    for raw in sys.stdin.buffer:
        job_dir = Path(raw.decode().rstrip("\n"))
        _warm_entry(job_dir)
        pid = os.fork()
        if pid == 0:
            _become_sandbox_process(job_dir, child.main)
        reply.write(f"pid {pid}\n".encode())
        reply.flush()
        _, status = os.waitpid(pid, 0)
        reply.write(f"exit {os.waitstatus_to_exitcode(status)}\n".encode())
        reply.flush()
    return 0


def _warm_entry(job_dir: Path) -> None:
    """Import the job's trusted entry module here, once, so later forks have it."""
    import pickle

    try:
        entry = pickle.loads((job_dir / "job.pkl").read_bytes()).get("entry")
        if entry:
            importlib.import_module(entry.partition(":")[0])
    except Exception:  # noqa: BLE001 - the child imports it again and reports the error
        pass


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1:]))
