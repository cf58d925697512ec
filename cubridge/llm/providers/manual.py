"""The `manual` provider: a person or an external agent plays the model.

For each request it writes `<hash>.prompt.md` into its directory, prints the
prompt and reply paths, and polls for `<hash>.reply.md`. The reply is taken
once the file is non-empty and its size has not changed between two polls
(so an editor's half-written save is not read). Files are named by the
request's content hash: a rerun finds a reply written after a timeout. A
feedback round continues a conversation whose start was written here before:
its prompt file holds only the new turns and names the earlier file.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

from cubridge.llm.errors import ManualReplyTimeout
from cubridge.llm.providers.base import render_messages
from cubridge.llm.request import Reply, Request, Usage

MANUAL_LABEL = "written by hand through the manual provider, not a model's output"


def _announce(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class ManualProvider:
    kind = "manual"

    def __init__(
        self,
        directory: Path,
        *,
        model: str = "manual",
        poll_s: float = 2.0,
        timeout_s: float = 86400.0,
        announce: Callable[[str], None] = _announce,
    ) -> None:
        self.directory = Path(directory)
        self.model = model
        self.poll_s = poll_s
        self.timeout_s = timeout_s
        self.announce = announce

    def _conversation_prefix(self, request: Request) -> tuple[int, str] | None:
        """(messages already shown, prompt file stem) when an earlier prompt in
        this directory holds the start of this request's conversation."""
        for n in range(len(request.messages) - 1, 0, -1):
            if request.messages[n - 1].role != "assistant":
                continue
            # the request that the assistant turn at n - 1 answered
            earlier = Request.of(request.messages[:n - 1], temperature=request.temperature,
                                 max_tokens=request.max_tokens, stop=request.stop,
                                 sample=request.sample)
            stem = earlier.hash[:16]
            if (self.directory / f"{stem}.prompt.md").exists():
                return n - 1, stem
        return None

    def paths(self, request: Request) -> tuple[Path, Path]:
        stem = request.hash[:16]
        return self.directory / f"{stem}.prompt.md", self.directory / f"{stem}.reply.md"

    def complete(self, request: Request) -> Reply:
        prompt_path, reply_path = self.paths(request)
        self.directory.mkdir(parents=True, exist_ok=True)
        if not prompt_path.exists():
            header = (
                f"<!-- cubridge manual LLM prompt (request {request.hash[:16]}, sample "
                f"{request.sample}, max {request.max_tokens} tokens). Write the reply, as the "
                f"model would, to {reply_path.name} in this directory. -->\n\n"
            )
            earlier = self._conversation_prefix(request)
            if earlier is None:
                body = render_messages(request.messages)
            else:
                # A feedback round: the same conversation, so only its new turns.
                n, stem = earlier
                body = (f"<!-- This continues the conversation of {stem}.prompt.md (your "
                        f"reply there: {stem}.reply.md and what followed); only the new "
                        "turns are below. -->\n\n"
                        + "\n\n".join(f"## {m.role}\n\n{m.content}"
                                      for m in request.messages[n:]) + "\n")
            tmp = prompt_path.with_name(prompt_path.name + ".tmp")
            tmp.write_text(header + body)
            tmp.replace(prompt_path)
        self.announce(f"[manual llm] prompt: {prompt_path}")
        self.announce(f"[manual llm] waiting for the reply in: {reply_path}")
        start = time.monotonic()
        last_size = -1
        while True:
            size = reply_path.stat().st_size if reply_path.exists() else -1
            if size > 0 and size == last_size:
                break
            last_size = size
            if time.monotonic() - start > self.timeout_s:
                raise ManualReplyTimeout(
                    f"no reply in {reply_path} after {self.timeout_s:g}s; write it and rerun "
                    f"(the prompt is {prompt_path}; the run resumes at this request)"
                )
            time.sleep(self.poll_s)
        text = reply_path.read_text()
        return Reply(
            text=text,
            usage=Usage.estimate(request.prompt_chars(), len(text)),
            model=self.model,
            latency_s=time.monotonic() - start,
            finish_reason="manual",
            raw={"reply_file": str(reply_path)},
            label=MANUAL_LABEL,
        )
