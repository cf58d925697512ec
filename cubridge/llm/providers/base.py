"""The provider interface: one request in, one reply out.

A provider raises `TransientProviderError` for failures worth retrying (HTTP
429 and 5xx, timeouts, dropped connections) and `ProviderError` for the rest;
it never retries by itself (`LLMClient` does, under its `RetryPolicy`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from cubridge.llm.errors import ProviderError, TransientProviderError
from cubridge.llm.request import Message, Reply, Request


class Provider(Protocol):
    kind: str  # "openai", "anthropic", "command", "manual", "replay"
    model: str

    def complete(self, request: Request) -> Reply: ...


def render_messages(messages: tuple[Message, ...]) -> str:
    """Messages as one markdown text, for providers that take a single prompt
    (a CLI, a person). A lone user message is passed as it is."""
    if len(messages) == 1:
        return messages[0].content
    return "\n\n".join(f"## {m.role}\n\n{m.content}" for m in messages) + "\n"


def http_error(
    provider: str, status: int, message: str, headers: Mapping[str, str] | None
) -> ProviderError:
    """The error for an HTTP status: 408, 409, 429 and 5xx are transient."""
    text = f"{provider} HTTP {status}: {message}"
    if status in (408, 409, 429) or status >= 500:
        return TransientProviderError(text, status=status, retry_after_s=_retry_after(headers))
    return ProviderError(text, status=status)


def _retry_after(headers: Mapping[str, str] | None) -> float | None:
    value = (headers or {}).get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None  # an HTTP date: rare from APIs, the backoff covers it


def api_error_message(exc: object) -> str:
    """The server's error message from a client library's status error."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
    return str(getattr(exc, "message", exc))
