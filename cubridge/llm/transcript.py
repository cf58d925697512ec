"""Transcripts: every LLM exchange of a run, as files, doubling as the cache.

Layout inside a run directory:

    llm/<stage>/<seq>-<key>.json   the exchange, machine-readable
    llm/<stage>/<seq>-<key>.md     the same, for people
    llm/<stage>/failures.jsonl     calls that failed for good (never cached)

An exchange records the request (messages, sampling parameters), the reply,
tokens, cost, time, retries, the provider and model, and two slots the stage
loop fills afterwards: the parsed action and the verification outcome. The
store indexes exchanges by cache key (provider, model, request content), so
a rerun with the same model and inputs answers from disk and makes no calls.
Files are written atomically and secrets given to the store are replaced by
[REDACTED] in everything it writes.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cubridge.llm.errors import LLMError
from cubridge.llm.request import Reply, Request, Usage, cache_key

EXCHANGE_FORMAT = "cubridge.llm.exchange/1"
REDACTED = "[REDACTED]"
_STAGE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


@dataclass
class Exchange:
    """One request and its reply, as recorded."""

    stage: str
    seq: int
    provider: str
    model: str
    request: Request
    reply: Reply
    cache_key: str
    cost_usd: float | None = None
    attempts: int = 1
    retry_errors: list[str] = field(default_factory=list)
    started_at: str = ""
    finished_at: str = ""
    label: str | None = None  # e.g. "recorded fixture: written by a person"
    parsed: Any = None  # slot: the action parsed from the reply (JSON-able)
    verification: Any = None  # slot: the verification outcome (JSON-able)
    cached: bool = False  # true when this run answered it from disk
    path: Path | None = None  # the .json file

    @property
    def request_hash(self) -> str:
        return self.request.hash

    @property
    def text(self) -> str:
        return self.reply.text

    def to_json(self) -> dict[str, Any]:
        return {
            "format": EXCHANGE_FORMAT,
            "stage": self.stage,
            "seq": self.seq,
            "provider": self.provider,
            "model": self.model,
            "request_hash": self.request_hash,
            "cache_key": self.cache_key,
            "label": self.label,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "attempts": self.attempts,
            "retry_errors": list(self.retry_errors),
            "cost_usd": self.cost_usd,
            "request": self.request.to_json(),
            "reply": self.reply.to_json(),
            "parsed": self.parsed,
            "verification": self.verification,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], path: Path | None = None) -> Exchange:
        request = Request.from_json(data["request"])
        if data.get("request_hash") not in (None, request.hash):
            raise ValueError(f"{path}: request_hash does not match the recorded request")
        return cls(
            stage=data["stage"],
            seq=int(data["seq"]),
            provider=data["provider"],
            model=data["model"],
            request=request,
            reply=Reply.from_json(data["reply"]),
            cache_key=data["cache_key"],
            cost_usd=data.get("cost_usd"),
            attempts=int(data.get("attempts", 1)),
            retry_errors=list(data.get("retry_errors") or []),
            started_at=data.get("started_at", ""),
            finished_at=data.get("finished_at", ""),
            label=data.get("label"),
            parsed=data.get("parsed"),
            verification=data.get("verification"),
            path=path,
        )

    def to_markdown(self) -> str:
        usage = self.reply.usage
        cost = f", ${self.cost_usd:.4f}" if self.cost_usd is not None else ""
        est = " (estimated)" if usage.estimated else ""
        req = self.request
        lines = [
            f"# {self.stage} #{self.seq:04d}: {self.provider} / {self.model}",
            "",
        ]
        if self.label:
            lines += [f"> {self.label}", ""]
        lines += [
            f"- started {self.started_at}, finished {self.finished_at}, "
            f"latency {self.reply.latency_s:.2f}s, {self.attempts} attempt(s)",
            f"- tokens: {usage.input_tokens} in, {usage.output_tokens} out{est}{cost}",
            f"- temperature {req.temperature}, max_tokens {req.max_tokens}, sample {req.sample}"
            + (f", stop {list(req.stop)}" if req.stop else ""),
            f"- request {self.request_hash[:16]}, cache key {self.cache_key[:16]}",
        ]
        lines += [f"- retried after: {err}" for err in self.retry_errors]
        for message in req.messages:
            lines += ["", f"## {message.role}", "", message.content.rstrip()]
        finish = f" (finish: {self.reply.finish_reason})" if self.reply.finish_reason else ""
        lines += ["", f"## reply{finish}", "", self.reply.text.rstrip()]
        for title, value in (("parsed action", self.parsed), ("verification", self.verification)):
            if value is not None:
                shown = value if isinstance(value, str) else json.dumps(value, indent=2)
                lines += ["", f"## {title}", "", "````", shown.rstrip(), "````"]
        return "\n".join(lines) + "\n"


def read_exchanges(directory: Path) -> Iterator[Exchange]:
    """Every recorded exchange under `directory` (other JSON files are skipped)."""
    for path in sorted(Path(directory).rglob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if isinstance(data, dict) and data.get("format") == EXCHANGE_FORMAT:
            try:
                exchange = Exchange.from_json(data, path)
            except (KeyError, TypeError, ValueError) as exc:
                raise LLMError(
                    f"{path}: malformed exchange record ({type(exc).__name__}: {exc}); "
                    f"fix or remove the file"
                ) from None
            yield exchange


class TranscriptStore:
    """The `llm/` folder of one run directory."""

    def __init__(self, run_dir: Path, *, secrets: Sequence[str] = ()) -> None:
        self.root = Path(run_dir) / "llm"
        # Very short strings would redact ordinary text; no real key is that short.
        self._secrets = [s for s in secrets if s and len(s) >= 8]
        self._lock = threading.Lock()
        self._by_key: dict[str, Exchange] = {}
        self._last_seq: dict[str, int] = {}
        if self.root.is_dir():
            for exchange in read_exchanges(self.root):
                self._index(exchange)

    def _index(self, exchange: Exchange) -> None:
        known = self._by_key.get(exchange.cache_key)
        if known is None or exchange.seq > known.seq:
            self._by_key[exchange.cache_key] = exchange
        self._last_seq[exchange.stage] = max(self._last_seq.get(exchange.stage, 0), exchange.seq)

    def __len__(self) -> int:
        return len(self._by_key)

    def lookup(self, cache_key: str) -> Exchange | None:
        with self._lock:
            return self._by_key.get(cache_key)

    def next_seq(self, stage: str) -> int:
        """Reserve the next sequence number of `stage`."""
        check_stage_name(stage)
        with self._lock:
            seq = self._last_seq.get(stage, 0) + 1
            self._last_seq[stage] = seq
            return seq

    def write(self, exchange: Exchange) -> Path:
        """Write (or rewrite) an exchange's .json and .md files."""
        check_stage_name(exchange.stage)
        folder = self.root / exchange.stage
        folder.mkdir(parents=True, exist_ok=True)
        stem = f"{exchange.seq:04d}-{exchange.cache_key[:12]}"
        path = folder / f"{stem}.json"
        self._write_text(path, json.dumps(exchange.to_json(), indent=2, ensure_ascii=False))
        self._write_text(folder / f"{stem}.md", exchange.to_markdown())
        exchange.path = path
        with self._lock:
            self._index(exchange)
        return path

    def record_failure(self, stage: str, entry: Mapping[str, Any]) -> None:
        check_stage_name(stage)
        folder = self.root / stage
        folder.mkdir(parents=True, exist_ok=True)
        line = self.redact(json.dumps(dict(entry), ensure_ascii=False))
        with self._lock, open(folder / "failures.jsonl", "a") as f:
            f.write(line + "\n")

    def redact(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, REDACTED)
        return text

    def _write_text(self, path: Path, text: str) -> None:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(self.redact(text))
        tmp.replace(path)


def check_stage_name(stage: str) -> None:
    if not _STAGE_NAME.match(stage):
        raise ValueError(
            f"stage name {stage!r} must be letters, digits, '_', '.' or '-' (it names a folder)"
        )


def record_fixture(
    directory: Path,
    stage: str,
    request: Request,
    text: str,
    *,
    label: str,
    model: str = "recorded-fixture",
) -> Exchange:
    """Record a reply that no model gave (an expert's, for tests and replay) as
    an exchange under `directory/llm/<stage>/`. The label is required and says
    who wrote it, so a fixture is never mistaken for a model's output."""
    if not label.strip():
        raise ValueError("a recorded fixture needs a label saying who wrote the reply")
    store = TranscriptStore(Path(directory))
    now = now_iso()
    exchange = Exchange(
        stage=stage,
        seq=store.next_seq(stage),
        provider="fixture",
        model=model,
        request=request,
        reply=Reply(text, Usage.estimate(request.prompt_chars(), len(text)), model, 0.0, "fixture"),
        cache_key=cache_key("fixture", model, request.hash),
        started_at=now,
        finished_at=now,
        label=label,
    )
    store.write(exchange)
    return exchange
