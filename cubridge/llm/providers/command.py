"""The `command` provider: pipe the prompt to any command-line tool and take
what it prints as the reply (`llm -m ...`, `claude -p`, `ollama run ...`, a
script). Tokens are estimated from characters, since a CLI reports none."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Sequence

from cubridge.llm.errors import ProviderError, TransientProviderError
from cubridge.llm.providers.base import render_messages
from cubridge.llm.request import Reply, Request, Usage


class CommandProvider:
    kind = "command"

    def __init__(
        self,
        argv: Sequence[str],
        *,
        model: str | None = None,
        input_mode: str = "text",
        timeout_s: float = 600.0,
    ) -> None:
        if not argv:
            raise ValueError("the command provider needs a command line")
        if input_mode not in ("text", "json"):
            raise ValueError(f"command input mode must be 'text' or 'json', got {input_mode!r}")
        self.argv = tuple(argv)
        self.model = model or os.path.basename(self.argv[0])
        self.input_mode = input_mode
        self.timeout_s = timeout_s

    def prompt_text(self, request: Request) -> str:
        if self.input_mode == "json":
            return json.dumps(request.to_json(), ensure_ascii=False)
        return render_messages(request.messages)

    def complete(self, request: Request) -> Reply:
        prompt = self.prompt_text(request)
        shown = " ".join(self.argv)
        start = time.perf_counter()
        try:
            # A session of its own, so a timeout kills the tool and its children.
            proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
        except OSError as exc:
            raise ProviderError(f"command provider: cannot run {shown!r}: {exc}") from exc
        try:
            stdout, stderr = proc.communicate(prompt, timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise TransientProviderError(
                f"command provider: {shown!r} timed out after {self.timeout_s:g}s"
            ) from None
        latency = time.perf_counter() - start
        if proc.returncode != 0:
            tail = stderr.strip()[-2000:] or "(no stderr)"
            raise ProviderError(
                f"command provider: {shown!r} exited with status {proc.returncode}: {tail}"
            )
        if not stdout.strip():
            raise ProviderError(f"command provider: {shown!r} printed nothing on stdout")
        return Reply(
            text=stdout,
            usage=Usage.estimate(len(prompt), len(stdout)),
            model=self.model,
            latency_s=latency,
            finish_reason="exit",
            raw={"stderr": stderr[-4000:]},
        )
