"""Anthropic Messages through the `anthropic` client library."""

from __future__ import annotations

import inspect
import time
from typing import Any

from cubridge.llm.errors import ProviderError, TransientProviderError
from cubridge.llm.providers.base import api_error_message, http_error
from cubridge.llm.request import Reply, Request, Usage

ANTHROPIC_URL = "https://api.anthropic.com"
EPHEMERAL = {"type": "ephemeral"}


def cached_turns(request: Request) -> list[dict[str, Any]]:
    """The conversation's turns, the last one marked as a cache breakpoint (the
    next round of the conversation then reads everything up to it from cache)."""
    turns: list[dict[str, Any]] = [m.to_json() for m in request.messages if m.role != "system"]
    if turns:
        last = turns[-1]
        last["content"] = [{"type": "text", "text": last["content"],
                            "cache_control": EPHEMERAL}]
    return turns


class AnthropicMessagesProvider:
    kind = "anthropic"

    def __init__(
        self, model: str, *, api_key: str, base_url: str | None = None, timeout_s: float = 600.0
    ) -> None:
        import anthropic  # imported here: the dependency is needed only by this provider

        self.model = model
        self.base_url = base_url or ANTHROPIC_URL
        self._anthropic = anthropic
        # max_retries=0: our RetryPolicy is the one in force.
        self._client = anthropic.Anthropic(
            api_key=api_key, base_url=self.base_url, timeout=timeout_s, max_retries=0
        )
        create = inspect.signature(self._client.messages.create).parameters
        self._takes_temperature = "temperature" in create

    def complete(self, request: Request) -> Reply:
        # The Messages API takes the system prompt apart from the turns.
        system = "\n\n".join(m.content for m in request.messages if m.role == "system")
        kwargs: dict[str, Any] = {
            "model": self.model,
            "max_tokens": request.max_tokens,
            "messages": cached_turns(request),
        }
        if system:
            # The system prompt, then the conversation so far, are cache prefixes: a
            # feedback round is a turn of the same conversation and pays full price
            # only for what it adds (prompt caching).
            kwargs["system"] = [{"type": "text", "text": system, "cache_control": EPHEMERAL}]
        if request.temperature is not None:
            # Some library versions dropped the parameter; the wire format keeps it.
            if self._takes_temperature:
                kwargs["temperature"] = request.temperature
            else:
                kwargs["extra_body"] = {"temperature": request.temperature}
        if request.stop:
            kwargs["stop_sequences"] = list(request.stop)
        anthropic = self._anthropic
        start = time.perf_counter()
        try:
            response = self._client.messages.create(**kwargs)
        except anthropic.APITimeoutError as exc:
            raise TransientProviderError(f"anthropic request to {self.base_url} timed out") from exc
        except anthropic.APIConnectionError as exc:
            raise TransientProviderError(
                f"anthropic connection to {self.base_url} failed: {exc}"
            ) from exc
        except anthropic.APIStatusError as exc:
            raise http_error(
                "anthropic", exc.status_code, api_error_message(exc), exc.response.headers
            ) from exc
        except anthropic.APIError as exc:
            raise ProviderError(f"anthropic: {exc}") from exc
        latency = time.perf_counter() - start
        text = "".join(block.text for block in response.content if block.type == "text")
        usage = Usage(response.usage.input_tokens, response.usage.output_tokens)
        return Reply(
            text=text,
            usage=usage,
            model=response.model or self.model,
            latency_s=latency,
            finish_reason=response.stop_reason,
            raw=response.model_dump(mode="json"),
        )
