"""Running an untrusted candidate in a worker process, one call at a time, with
a timeout. A crash, a hang or a CUDA error ends the worker, not the verifier;
the next call starts a fresh worker.

Workers are never forked from the verifier (its CUDA context must not be
shared): where the LLM sandbox forks (Linux; not with CUBRIDGE_SANDBOX_FORK=0)
they come from multiprocessing's fork server, a clean process that has imported
torch once and never touches CUDA, so a worker starts without torch's import;
elsewhere each is spawned afresh.

The worker also blocks sockets (best effort: it keeps honest code from the
network; it is not a security sandbox).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import socket
from multiprocessing.connection import Connection
from pathlib import Path

from cubridge.llm.sandbox.forkserver import fork_enabled
from cubridge.spec import load
from cubridge.spec.inputs import Inputs
from cubridge.verify.candidate import CallOutcome, ImplRef, resolve_impl, run_candidate

STARTUP_TIMEOUT_S = 120.0  # importing torch in a fresh process
_PRELOAD = ["torch", "cubridge.verify.isolation"]


def worker_context() -> mp.context.BaseContext:
    """Where workers come from: the fork server (torch preloaded) or spawn, by the
    sandbox's own switch (CUBRIDGE_SANDBOX_FORK)."""
    if fork_enabled() and "forkserver" in mp.get_all_start_methods():
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(_PRELOAD)
        return ctx
    return mp.get_context("spawn")


# Messages go as plain pickles: Connection.send would share tensors through
# file descriptors handed over a socket, which the worker has switched off.
def _send(conn: Connection, obj: object) -> None:
    conn.send_bytes(pickle.dumps(obj))


def _recv(conn: Connection) -> object:
    return pickle.loads(conn.recv_bytes())


def _no_network(*args: object, **kwargs: object) -> None:
    raise PermissionError("network access is disabled while verifying a candidate")


def _worker(conn: Connection, impl_blob: bytes, spec_path: str | None,
            environ: dict[str, str]) -> None:
    # multiprocessing hands a fork server's child the verifier's sys.path and cwd, not
    # its environment: take the present one. The impl is unpickled (imported) here, so
    # that one that does not load is a clear error, not a worker dead at start.
    os.environ.clear()
    os.environ.update(environ)
    socket.socket = _no_network  # type: ignore[assignment,misc]
    socket.create_connection = _no_network  # type: ignore[assignment]

    def load_spec() -> object:
        if spec_path is None:
            raise ValueError("this impl is a factory of the spec, and the spec has no file "
                             "to load it from in the worker")
        return load(spec_path)

    try:
        impl = resolve_impl(pickle.loads(impl_blob), load_spec)
    except Exception as exc:
        _send(conn, ("failed", f"could not load the impl: {type(exc).__name__}: {exc}"))
        return
    _send(conn, ("ready", None))
    while True:
        try:
            message = _recv(conn)
        except EOFError:
            return
        if message is None:
            return
        inputs, scale, device = message
        _send(conn, ("done", run_candidate(impl, inputs, scale, device)))


class IsolatedRunner:
    """Calls the candidate in a worker process; see the module docstring."""

    def __init__(self, impl_ref: ImplRef, spec_path: Path | None, timeout_s: float) -> None:
        try:
            pickle.dumps(impl_ref)
        except Exception as exc:
            raise ValueError(
                f"isolate=True sends the impl to a worker process, but it cannot be pickled "
                f"({exc}); pass a module-level function or a 'module:func' string") from exc
        self.impl_ref = impl_ref
        self.spec_path = str(spec_path) if spec_path is not None else None
        self.timeout_s = timeout_s
        self.process: mp.process.BaseProcess | None = None
        self.conn: Connection | None = None
        self.restart_after_error = False
        self.load_failure: str | None = None  # the impl does not load: no use retrying

    def _start(self) -> str | None:
        ctx = worker_context()
        parent, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker,
                                   args=(child, pickle.dumps(self.impl_ref), self.spec_path,
                                         dict(os.environ)),
                                   daemon=True, name="cubridge-verify-worker")
        self.process.start()
        child.close()
        self.conn = parent
        if not parent.poll(max(STARTUP_TIMEOUT_S, self.timeout_s)):
            self.close()
            return "the worker process did not start in time"
        try:
            tag, payload = _recv(parent)
        except EOFError:
            return self._died("while starting")
        if tag != "ready":
            self.close()
            self.load_failure = str(payload)
            return self.load_failure
        return None

    def _died(self, when: str) -> str:
        assert self.process is not None
        self.process.join(5)
        code = self.process.exitcode
        self.close()
        return f"the worker process died {when} (exit code {code})"

    def call(self, inputs: Inputs, scale: float, device: str) -> CallOutcome:
        if self.load_failure is not None:
            return CallOutcome("error", message=self.load_failure)
        if self.process is None or not self.process.is_alive() or self.restart_after_error:
            self.close()
            self.restart_after_error = False
            if (problem := self._start()) is not None:
                status = "error" if self.load_failure is not None else "crash"
                return CallOutcome(status, message=problem)
        assert self.conn is not None
        try:
            _send(self.conn, (inputs, scale, device))
        except (BrokenPipeError, OSError):
            return CallOutcome("crash", message=self._died("before the call"))
        if not self.conn.poll(self.timeout_s):
            self.close()
            return CallOutcome("timeout", message=f"no result after {self.timeout_s:g} s; "
                                                  "the worker was killed")
        try:
            _, outcome = _recv(self.conn)
        except EOFError:
            return CallOutcome("crash", message=self._died("during the call"))
        # A CUDA error leaves the context unusable: start afresh after any error there.
        self.restart_after_error = outcome.status != "ok" and device.startswith("cuda")
        return outcome

    def close(self) -> None:
        if self.conn is not None:
            try:
                _send(self.conn, None)
            except (BrokenPipeError, OSError):
                pass
            self.conn.close()
            self.conn = None
        if self.process is not None:
            self.process.join(1)
            if self.process.is_alive():
                self.process.kill()
                self.process.join(5)
            self.process = None
