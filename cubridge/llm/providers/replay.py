"""The `replay` provider: answers from recorded transcripts, by the request's
content hash. For tests, and for reproducing a run without a model."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from cubridge.llm.errors import ReplayMiss
from cubridge.llm.request import Reply, Request
from cubridge.llm.transcript import read_exchanges


class ReplayProvider:
    kind = "replay"

    def __init__(self, directory: Path, *, model: str = "replay") -> None:
        self.directory = Path(directory)
        if not self.directory.is_dir():
            raise ReplayMiss(f"replay transcript directory {self.directory} does not exist")
        self.model = model
        self._replies: dict[str, Reply] = {}
        # Later recordings (higher seq) of the same request win.
        for exchange in sorted(read_exchanges(self.directory), key=lambda e: e.seq):
            origin = exchange.label or f"{exchange.provider}/{exchange.model}"
            self._replies[exchange.request_hash] = replace(
                exchange.reply,
                latency_s=0.0,
                label=f"replayed from {exchange.path} ({origin})",
            )

    def __len__(self) -> int:
        return len(self._replies)

    def complete(self, request: Request) -> Reply:
        reply = self._replies.get(request.hash)
        if reply is None:
            raise ReplayMiss(
                f"no recorded reply for request {request.hash} in {self.directory} "
                f"({len(self._replies)} recorded requests); the prompt or sampling "
                f"parameters differ from every recording"
            )
        return reply
