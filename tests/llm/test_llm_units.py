"""Small pieces: request hashing, retry delays, templates, budgets."""

from __future__ import annotations

import random

import pytest

from cubridge.llm import (
    Budget,
    BudgetExceeded,
    Price,
    ProviderError,
    Request,
    RetryPolicy,
    TemplateError,
    TransientProviderError,
    Usage,
    system,
    user,
)
from cubridge.llm.accounting import BudgetTracker
from cubridge.llm.errors import ConfigError
from cubridge.llm.request import cache_key
from cubridge.llm.retry import RetryLog, call_with_retries
from cubridge.llm.templates import render, substitute, template_names


def test_request_hash_covers_content_and_sampling():
    base = Request.of([system("s"), user("u")], temperature=0.2, max_tokens=100)
    assert base.hash == Request.of([system("s"), user("u")], temperature=0.2, max_tokens=100).hash
    variants = [
        Request.of([system("s"), user("u!")], temperature=0.2, max_tokens=100),
        Request.of([system("s"), user("u")], temperature=0.3, max_tokens=100),
        Request.of([system("s"), user("u")], temperature=0.2, max_tokens=101),
        Request.of([system("s"), user("u")], temperature=0.2, max_tokens=100, stop=["x"]),
        Request.of([system("s"), user("u")], temperature=0.2, max_tokens=100, sample=1),
    ]
    assert len({base.hash, *(v.hash for v in variants)}) == 6
    assert Request.from_json(base.to_json()) == base
    assert cache_key("openai", "a", base.hash) != cache_key("openai", "b", base.hash)
    assert cache_key("openai", "a", base.hash) != cache_key("anthropic", "a", base.hash)


def test_request_validation():
    with pytest.raises(ValueError, match="at least one user message"):
        Request.of([system("only a system prompt")])
    with pytest.raises(ValueError, match="role 'tool'"):
        user("x").__class__("tool", "x")  # type: ignore[arg-type]


def test_backoff_grows_exponentially_with_jitter_and_a_cap():
    policy = RetryPolicy(max_attempts=10, backoff_base_s=1.0, backoff_max_s=8.0)
    rng = random.Random(0)
    for attempt, ceiling in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (6, 8.0)]:
        delays = [policy.delay_s(attempt, None, rng) for _ in range(200)]
        assert ceiling / 2 <= min(delays) and max(delays) <= ceiling
        assert max(delays) - min(delays) > ceiling / 4  # jittered, not fixed
    assert policy.delay_s(1, 5.0, rng) == 5.0  # Retry-After is honoured...
    assert policy.delay_s(1, 100.0, rng) == 8.0  # ...up to the cap


def test_call_with_retries_sleeps_between_transient_failures_only():
    slept: list[float] = []
    outcomes = [TransientProviderError("429", status=429), TransientProviderError("500"), "ok"]

    def call() -> str:
        item = outcomes.pop(0)
        if isinstance(item, Exception):
            raise item
        return item

    log = RetryLog()
    policy = RetryPolicy(max_attempts=5, backoff_base_s=0.5)
    assert call_with_retries(call, policy, log=log, sleep=slept.append) == "ok"
    assert log.attempts == 3 and len(slept) == 2 and log.errors == ["429", "500"]

    def bad_request() -> str:
        raise ProviderError("400", status=400)

    with pytest.raises(ProviderError, match="400"):
        call_with_retries(bad_request, policy, sleep=slept.append)
    assert len(slept) == 2


def test_budget_tracker_checks_before_and_counts_after():
    tracker = BudgetTracker("lift", Budget(tokens=1000, cost_usd=0.01, calls=3), Price(1, 10), "m")
    tracker.check()
    cost = tracker.add(Usage(400, 100))
    assert cost == pytest.approx((400 + 1000) / 1e6) and tracker.tokens == 500
    tracker.add(Usage(400, 200))
    with pytest.raises(BudgetExceeded, match="1100 tokens used of 1000"):
        tracker.check()
    with pytest.raises(ConfigError, match=r'add \[prices."gpt-x"\]'):
        BudgetTracker("lift", Budget(cost_usd=1.0), None, "gpt-x")
    unlimited = BudgetTracker("lift", Budget(), None, "m")
    for _ in range(100):
        unlimited.add(Usage(10**6, 10**6))
    unlimited.check()


def test_templates_are_strict():
    assert set(template_names()) >= {"feedback"}
    assert set(template_names("cubridge.llm_path")) >= {"edit_actions", "lift", "transfer"}
    text = render("feedback", error="edit 2: line 340 beyond end of file (312 lines)")
    assert "edit 2: line 340 beyond end of file (312 lines)" in text and "{{" not in text
    with pytest.raises(TemplateError, match=r"no value for error \(line 3\)"):
        render("feedback")
    with pytest.raises(TemplateError, match="unused variable"):
        render("feedback", error="e", eror="typo")
    with pytest.raises(TemplateError, match="no prompt template .nope.*available: feedback"):
        render("nope")
    # Substituted text is not scanned again: kernel code with braces is safe.
    assert substitute("A {{x}} B", {"x": "{{y}} {{ z }}"}) == "A {{y}} {{ z }} B"


def test_openai_max_tokens_field_follows_the_server():
    from cubridge.llm.providers.openai_chat import OpenAIChatProvider

    assert OpenAIChatProvider("m", api_key="x").max_tokens_field == "max_completion_tokens"
    local = OpenAIChatProvider("m", api_key="x", base_url="http://127.0.0.1:8000/v1")
    assert local.max_tokens_field == "max_tokens"
    forced = OpenAIChatProvider("m", api_key="x", max_tokens_field="max_completion_tokens",
                                base_url="http://127.0.0.1:8000/v1")  # fmt: skip
    assert forced.max_tokens_field == "max_completion_tokens"
