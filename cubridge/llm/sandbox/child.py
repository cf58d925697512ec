"""The sandbox process: `python -m cubridge.llm.sandbox.child JOB_DIR`, or `main`
called in a child forked from a warm server (forkserver.py).

Trusted code that runs in the child before the generated code does. In order:
isolate the network (a new user + network namespace, where the kernel allows
it), set resource limits, import the modules to preload and the trusted
entry, install an audit hook, then load the generated file as a module, call
the entry on it and pickle the outcome to JOB_DIR/result.pkl. The audit hook
refuses sockets, new processes and file writes outside JOB_DIR; it is not a
security boundary against code that escapes Python (which the static check
prevents: no ctypes, no dunder access), but it turns mistakes into errors.
"""

from __future__ import annotations

import faulthandler
import importlib
import importlib.util
import os
import pickle
import signal
import sys
import traceback
from pathlib import Path
from typing import Any

from cubridge.modules import load_module_from_path

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
_BLOCKED_EVENTS = (
    "socket.",
    "subprocess.Popen",
    "os.system",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "os.fork",
    "os.forkpty",
    "os.kill",
    "os.killpg",
    "pty.spawn",
    "webbrowser.open",
)
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def isolate_network() -> str:
    """Enter a fresh user and network namespace (no interface but a downed
    loopback): nothing can be reached. Returns what happened, in words."""
    if not sys.platform.startswith("linux"):
        return f"not enforced: no network namespaces on {sys.platform}"
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        uid, gid = os.getuid(), os.getgid()
        if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0:
            return f"not enforced: unshare failed: {os.strerror(ctypes.get_errno())}"
        # Map our own ids so that file permissions stay what they were.
        Path("/proc/self/setgroups").write_text("deny")
        Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
        Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")
    except OSError as exc:
        return f"not enforced: {exc}"
    return "enforced (user + network namespace)"


def set_limits(limits: dict[str, Any]) -> dict[str, str]:
    import resource

    done = {}
    wanted = {
        "RLIMIT_AS": limits.get("memory_bytes"),
        "RLIMIT_CPU": limits.get("cpu_s"),
        "RLIMIT_FSIZE": limits.get("file_size_bytes"),
        "RLIMIT_CORE": 0,
    }
    for name, value in wanted.items():
        which = getattr(resource, name, None)
        if value is None or which is None:
            done[name] = "not set"
            continue
        try:
            # The CPU hard limit one second later: SIGXCPU (reported as such) comes first.
            hard = int(value) + 1 if name == "RLIMIT_CPU" else int(value)
            resource.setrlimit(which, (int(value), hard))
            done[name] = str(value)
        except (ValueError, OSError) as exc:
            done[name] = f"not set: {exc}"
    return done


def install_audit_hook(job_dir: Path) -> None:
    allowed = str(job_dir.resolve())

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event.startswith(_BLOCKED_EVENTS):
            raise PermissionError(f"sandbox: {event} is not allowed in generated code")
        if event == "open" and len(args) >= 3:
            path, mode, flags = args[0], args[1], args[2]
            writes = (mode is not None and any(c in str(mode) for c in "wax+")) or (
                isinstance(flags, int) and flags & _WRITE_FLAGS
            )
            if writes and isinstance(path, str | bytes):
                real = os.path.realpath(os.fsdecode(path))
                if real != os.devnull and not real.startswith(allowed + os.sep):
                    raise PermissionError(f"sandbox: writing {real} is not allowed")

    sys.addaudithook(hook)


def failure(exc: BaseException, source_path: Path) -> dict[str, Any]:
    """The outcome of an exception: its type, message and the innermost line
    of the generated file in its traceback."""
    frames = traceback.extract_tb(exc.__traceback__)
    mine = [f for f in frames if Path(f.filename) == source_path]
    line = mine[-1].lineno if mine else None
    if line is None and isinstance(exc, SyntaxError) and exc.filename == str(source_path):
        line = exc.lineno
    kind = "memory" if isinstance(exc, MemoryError) else "exception"
    return {
        "ok": False,
        "kind": kind,
        "type": type(exc).__name__,
        "message": str(exc),
        "line": line,
        "traceback": "".join(traceback.format_exception(exc)),
    }


def main(job_dir: Path) -> int:
    job = pickle.loads((job_dir / "job.pkl").read_bytes())
    isolation = {"network": isolate_network() if job["isolate_network"] else "not requested"}
    isolation.update(set_limits(job["limits"]))
    # The parent sends SIGUSR1 at its deadline: the stack dump names the line
    # the generated code was stuck on (faulthandler works even inside C code).
    faulthandler.register(signal.SIGUSR1, all_threads=False)
    source_path = Path(job["source_path"])
    outcome: dict[str, Any]
    try:
        for name in job["preload"]:
            importlib.import_module(name)
        entry = None
        if job["entry"]:
            module_name, _, function = job["entry"].partition(":")
            entry = getattr(importlib.import_module(module_name), function)
        install_audit_hook(job_dir)
        isolation["audit_hook"] = "installed"
        module = load_module_from_path(source_path, "cubridge_generated")
        if entry is not None:
            value = entry(module, *job["args"], **job["kwargs"])
        elif job["call"]:
            value = getattr(module, job["call"])(*job["args"], **job["kwargs"])
        else:
            value = None
        outcome = {"ok": True, "value": value}
    except BaseException as exc:  # noqa: BLE001 - everything the generated code raises is reported
        outcome = failure(exc, source_path)
    faulthandler.unregister(signal.SIGUSR1)
    outcome["isolation"] = isolation
    try:
        data = pickle.dumps(outcome)
    except Exception as exc:  # noqa: BLE001
        data = pickle.dumps(
            {
                "ok": False,
                "kind": "exception",
                "type": type(exc).__name__,
                "message": f"the result cannot be sent back (not picklable): {exc}",
                "line": None,
                "traceback": "",
                "isolation": isolation,
            }
        )
    tmp = job_dir / "result.pkl.tmp"
    tmp.write_bytes(data)
    tmp.replace(job_dir / "result.pkl")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
