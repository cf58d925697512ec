"""OpenAI-compatible chat completions through the `openai` client library:
OpenAI itself or any server speaking the protocol (vLLM, SGLang, Ollama...)."""

from __future__ import annotations

import time
from typing import Any

from cubridge.llm.errors import ProviderError, TransientProviderError
from cubridge.llm.providers.base import api_error_message, http_error
from cubridge.llm.request import Reply, Request, Usage

OPENAI_URL = "https://api.openai.com/v1"


class OpenAIChatProvider:
    kind = "openai"

    def __init__(
        self,
        model: str,
        *,
        api_key: str,
        base_url: str | None = None,
        timeout_s: float = 600.0,
        max_tokens_field: str | None = None,
    ) -> None:
        import openai  # imported here: the dependency is needed only by this provider

        self.model = model
        self.base_url = base_url or OPENAI_URL
        official = self.base_url.rstrip("/") == OPENAI_URL
        # Newer OpenAI models reject max_tokens; most other servers only know it.
        self.max_tokens_field = max_tokens_field or (
            "max_completion_tokens" if official else "max_tokens"
        )
        self._openai = openai
        # max_retries=0: our RetryPolicy is the one in force.
        self._client = openai.OpenAI(
            api_key=api_key, base_url=self.base_url, timeout=timeout_s, max_retries=0
        )

    def complete(self, request: Request) -> Reply:
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": [m.to_json() for m in request.messages],
            self.max_tokens_field: request.max_tokens,
        }
        if request.temperature is not None:
            kwargs["temperature"] = request.temperature
        if request.stop:
            kwargs["stop"] = list(request.stop)
        openai = self._openai
        start = time.perf_counter()
        try:
            response = self._client.chat.completions.create(**kwargs)
        except openai.APITimeoutError as exc:
            raise TransientProviderError(f"openai request to {self.base_url} timed out") from exc
        except openai.APIConnectionError as exc:
            raise TransientProviderError(
                f"openai connection to {self.base_url} failed: {exc}"
            ) from exc
        except openai.APIStatusError as exc:
            raise http_error(
                "openai", exc.status_code, api_error_message(exc), exc.response.headers
            ) from exc
        except openai.APIError as exc:
            raise ProviderError(f"openai: {exc}") from exc
        latency = time.perf_counter() - start
        if not response.choices:
            raise ProviderError(f"openai: the response from {self.base_url} has no choices")
        choice = response.choices[0]
        text = choice.message.content or ""
        if response.usage is not None:
            usage = Usage(response.usage.prompt_tokens, response.usage.completion_tokens)
        else:
            usage = Usage.estimate(request.prompt_chars(), len(text))
        return Reply(
            text=text,
            usage=usage,
            model=response.model or self.model,
            latency_s=latency,
            finish_reason=choice.finish_reason,
            raw=response.model_dump(mode="json"),
        )
