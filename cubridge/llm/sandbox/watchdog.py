"""A child process watched for progress: it reports events as it goes, and one
that falls silent for too long is taken to hang and killed.

For work on the GPU that generated code drives (a lowered kernel's verification
and timing): an illegal address poisons the CUDA context of its process, and a
kernel waiting on a barrier that never completes blocks it forever, so that work
runs in a process of its own, in its own process group (a wrapper such as
compute-sanitizer goes down with it).

The child writes events to stdout as lines `EVENT_PREFIX{json}`; everything
else it prints (a sanitizer's report, a traceback) is kept as the output's
tail. `run_watched` returns what happened; `Watched.failure()` says it in one
sentence for the model.
"""

from __future__ import annotations

import collections
import json
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

EVENT_PREFIX = "@cubridge-event "
TAIL_LINES = 200

# Why a process ended.
EXITED, SILENT, OVERTIME = "exited", "silent", "overtime"

_SIGNALS = {
    signal.SIGSEGV: "a segmentation fault",
    signal.SIGABRT: "an abort",
    signal.SIGBUS: "a bus error",
    signal.SIGFPE: "a floating-point exception",
    signal.SIGILL: "an illegal instruction",
    signal.SIGKILL: "a kill",
}


def emit(event: str, **data: Any) -> None:
    """In the child: report one event (and show the watchdog it is alive)."""
    print(EVENT_PREFIX + json.dumps({"event": event, **data}, default=str), flush=True)


@dataclass
class Watched:
    """What a watched child did."""

    argv: list[str]
    ended: str  # EXITED, SILENT (no event for silence_s) or OVERTIME (past total_s)
    returncode: int | None
    events: list[dict[str, Any]] = field(default_factory=list)
    output: str = ""  # the tail of stdout lines that were not events
    stderr: str = ""  # the tail of stderr
    seconds: float = 0.0
    silence_s: float = 0.0

    def last(self, event: str) -> dict[str, Any] | None:
        return next((e for e in reversed(self.events) if e.get("event") == event), None)

    @property
    def ok(self) -> bool:
        return self.ended == EXITED and self.returncode == 0

    def failure(self) -> str:
        """One sentence: how the process ended, when it did not end well."""
        if self.ended == SILENT:
            return (f"no progress for {self.silence_s:g} s, so it was taken to hang and killed "
                    "(a barrier, mbarrier or __syncthreads wait that never completes, or a "
                    "loop that never ends)")
        if self.ended == OVERTIME:
            return f"still running after {self.seconds:.0f} s; it was killed"
        code = self.returncode
        if code is not None and code < 0:
            try:
                sig = signal.Signals(-code)
            except ValueError:
                return f"the process was killed by signal {-code}"
            what = _SIGNALS.get(sig)
            return f"the process was killed by {sig.name}" + (f" ({what})" if what else "")
        return f"the process exited with code {code}"


def _reader(stream: Any, sink: queue.Queue[tuple[str, str | None]], tag: str) -> None:
    for line in iter(stream.readline, ""):
        sink.put((tag, line.rstrip("\n")))
    sink.put((tag, None))


def _kill_group(proc: subprocess.Popen[str]) -> None:
    """End the child and what it started (its own process group)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait(30)


def run_watched(argv: Sequence[str], *, silence_s: float, total_s: float,
                startup_s: float | None = None, env: Mapping[str, str] | None = None,
                cwd: str | None = None,
                on_event: Callable[[dict[str, Any]], None] | None = None) -> Watched:
    """Run argv; kill it when no event arrives for `silence_s` (`startup_s` before
    the first one: importing torch and starting CUDA take a while) or when it runs
    past `total_s`. Events are JSON lines the child printed with `emit`."""
    start = time.monotonic()
    proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, errors="replace",
                            env=dict(env) if env is not None else None, cwd=cwd,
                            start_new_session=True)
    lines: queue.Queue[tuple[str, str | None]] = queue.Queue()
    readers = [threading.Thread(target=_reader, args=(s, lines, tag), daemon=True)
               for s, tag in ((proc.stdout, "out"), (proc.stderr, "err"))]
    for t in readers:
        t.start()
    result = Watched(list(argv), EXITED, None, silence_s=silence_s)
    output: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    errors: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    open_streams = 2
    last_event = start
    while open_streams:
        now = time.monotonic()
        quiet = silence_s if result.events or startup_s is None else startup_s
        wait = min(last_event + quiet, start + total_s) - now
        if wait <= 0:
            result.ended = SILENT if now - last_event >= quiet else OVERTIME
            _kill_group(proc)
            break
        try:
            tag, line = lines.get(timeout=wait)
        except queue.Empty:
            continue
        if line is None:
            open_streams -= 1
        elif tag == "out" and line.startswith(EVENT_PREFIX):
            try:
                event = json.loads(line[len(EVENT_PREFIX):])
            except json.JSONDecodeError:
                output.append(line)
                continue
            result.events.append(event)
            last_event = time.monotonic()
            if on_event is not None:
                on_event(event)
        else:
            (output if tag == "out" else errors).append(line)
    if result.ended == EXITED:
        try:
            proc.wait(max(1.0, start + total_s - time.monotonic()))
        except subprocess.TimeoutExpired:
            result.ended = OVERTIME
            _kill_group(proc)
    for t in readers:
        t.join(5)
    while not lines.empty():  # what arrived between the last read and the kill
        tag, line = lines.get_nowait()
        if line is not None and not line.startswith(EVENT_PREFIX):
            (output if tag == "out" else errors).append(line)
    result.returncode = proc.returncode
    result.output, result.stderr = "\n".join(output), "\n".join(errors)
    result.seconds = time.monotonic() - start
    return result
