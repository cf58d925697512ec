"""`LLMClient`: a stage's one door to the model.

Each call goes: cache (the run directory's transcripts) -> budget check ->
provider under the retry policy -> accounting -> transcript. A rerun with the
same provider, model and request is answered from disk without a call, so an
interrupted run resumes where it stopped. Use one client per stage and run:
the budget counts what this client spends.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from cubridge.llm.accounting import Budget, BudgetTracker, Price
from cubridge.llm.config import LLMConfig
from cubridge.llm.errors import LLMError
from cubridge.llm.providers import Provider, api_key, make_provider
from cubridge.llm.request import Message, Request, cache_key
from cubridge.llm.retry import RetryLog, RetryPolicy, call_with_retries
from cubridge.llm.transcript import Exchange, TranscriptStore, check_stage_name, now_iso

# Providers that cost nothing: a cost budget needs no price table entry for them.
FREE_PROVIDERS = ("manual", "replay")


def _log_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class LLMClient:
    def __init__(
        self,
        provider: Provider,
        run_dir: Path,
        stage: str,
        *,
        budget: Budget | None = None,
        price: Price | None = None,
        retry: RetryPolicy | None = None,
        temperature: float | None = None,
        max_tokens: int = 8192,
        secrets: Sequence[str] = (),
        log: Callable[[str], None] = _log_stderr,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        check_stage_name(stage)
        self.provider = provider
        self.stage = stage
        self.run_dir = Path(run_dir)
        self.retry = retry or RetryPolicy()
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.tracker = BudgetTracker(stage, budget or Budget(), price, provider.model)
        self.store = TranscriptStore(self.run_dir, secrets=secrets)
        self.calls_made = 0
        self.cache_hits = 0
        self._log = log
        self._sleep = sleep

    @classmethod
    def from_config(
        cls,
        config: LLMConfig,
        run_dir: Path,
        stage: str,
        *,
        environ: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> LLMClient:
        environ = os.environ if environ is None else environ
        provider = make_provider(config, run_dir=run_dir, environ=environ)
        key = api_key(config, environ) if config.provider in ("openai", "anthropic") else None
        price = config.price_for(provider.model)
        if price is None and provider.kind in FREE_PROVIDERS:
            price = Price(0.0, 0.0)
        return cls(
            provider,
            run_dir,
            stage,
            budget=config.budget_for(stage),
            price=price,
            retry=config.retry,
            temperature=config.temperature,
            max_tokens=config.max_tokens,
            secrets=[key] if key else [],
            **kwargs,
        )

    def complete(
        self,
        messages: Sequence[Message],
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        stop: Sequence[str] | None = None,
        sample: int = 0,
        label: str | None = None,
    ) -> Exchange:
        """Ask the model (or the cache). Raises BudgetExceeded before a call the
        budget does not allow, ProviderError when the call fails for good.
        `label` marks the exchange's origin in the transcript (default: the
        provider's, e.g. "written by hand" for the manual provider)."""
        request = Request.of(
            messages,
            temperature=self.temperature if temperature is None else temperature,
            max_tokens=self.max_tokens if max_tokens is None else max_tokens,
            stop=stop,
            sample=sample,
        )
        key = cache_key(self.provider.kind, self.provider.model, request.hash)
        hit = self.store.lookup(key)
        if hit is not None:
            self.cache_hits += 1
            hit.cached = True
            self._log(f"[llm {self.stage}] #{hit.seq:04d} from cache ({hit.path})")
            return hit
        self.tracker.check()
        retries = RetryLog()
        started = now_iso()
        try:
            reply = call_with_retries(
                lambda: self.provider.complete(request), self.retry, log=retries, sleep=self._sleep
            )
        except LLMError as exc:
            self.store.record_failure(
                self.stage,
                {
                    "at": now_iso(),
                    "provider": self.provider.kind,
                    "model": self.provider.model,
                    "request_hash": request.hash,
                    "attempts": retries.attempts,
                    "error": f"{type(exc).__name__}: {exc}",
                },
            )
            raise
        cost = self.tracker.add(reply.usage)
        self.calls_made += 1
        exchange = Exchange(
            stage=self.stage,
            seq=self.store.next_seq(self.stage),
            provider=self.provider.kind,
            model=self.provider.model,
            request=request,
            reply=reply,
            cache_key=key,
            cost_usd=cost,
            attempts=retries.attempts,
            retry_errors=retries.errors,
            started_at=started,
            finished_at=now_iso(),
            label=label or reply.label,
        )
        self.store.write(exchange)
        usage = reply.usage
        price = f", ${cost:.4f}" if cost is not None else ""
        self._log(
            f"[llm {self.stage}] #{exchange.seq:04d} {self.provider.kind}/{reply.model}: "
            f"{usage.input_tokens}+{usage.output_tokens} tokens{price}, {reply.latency_s:.1f}s"
            + (f", {retries.attempts} attempts" if retries.attempts > 1 else "")
        )
        return exchange

    def record(self, exchange: Exchange, *, parsed: Any = None, verification: Any = None) -> None:
        """Fill an exchange's parsed-action and verification slots (JSON-able
        values) and rewrite its files."""
        if parsed is not None:
            exchange.parsed = parsed
        if verification is not None:
            exchange.verification = verification
        self.store.write(exchange)

    def summary(self) -> str:
        return (
            f"[llm {self.stage}] {self.calls_made} calls, {self.cache_hits} cached, "
            f"{self.tracker.summary()}"
        )
