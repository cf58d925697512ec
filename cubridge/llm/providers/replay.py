"""The `replay` provider: answers from recorded transcripts, by the request's
content hash. For tests, and for reproducing a run without a model.

A request recorded with other feedback between the model's turns (the
compiler's or the GPU's words differ from machine to machine) is answered by
its turn: the same opening prompt, the same earlier replies and sampling
parameters (`Request.turn_hash`); the reply's label says it was matched so."""

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
        self._by_turn: dict[str, Reply] = {}
        # Later recordings (higher seq) of the same request win.
        for exchange in sorted(read_exchanges(self.directory), key=lambda e: e.seq):
            origin = exchange.label or f"{exchange.provider}/{exchange.model}"
            reply = replace(exchange.reply, latency_s=0.0,
                            label=f"replayed from {exchange.path} ({origin})")
            self._replies[exchange.request_hash] = reply
            self._by_turn[exchange.request.turn_hash] = replace(
                reply, label=f"replayed by turn (the feedback before it differs from the "
                f"recording) from {exchange.path} ({origin})")

    def __len__(self) -> int:
        return len(self._replies)

    def complete(self, request: Request) -> Reply:
        reply = self._replies.get(request.hash) or self._by_turn.get(request.turn_hash)
        if reply is None:
            raise ReplayMiss(
                f"no recorded reply for request {request.hash} in {self.directory} "
                f"({len(self._replies)} recorded requests); the prompt or sampling "
                f"parameters differ from every recording"
            )
        return reply
