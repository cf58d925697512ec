"""The openai and anthropic client libraries, for real, against a local server
speaking their wire protocols: replies, retries, non-retries, timeouts,
budgets, the cache and key hygiene."""

from __future__ import annotations

import json

import pytest
from llm_fakes import KINDS, SECRET, ask, make_client

from cubridge.llm import (
    BudgetExceeded,
    LLMClient,
    ProviderError,
    RetriesExhausted,
    load_config,
    read_exchanges,
)


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_correct_reply_through_the_client_library(kind, llm_server, tmp_path):
    llm_server.reply("```python\nx = 1\n```\n")
    client = make_client(kind, llm_server, tmp_path)
    exchange = ask(client, temperature=0.3, stop=["STOP"])

    assert exchange.text == "```python\nx = 1\n```\n"
    assert exchange.reply.usage.input_tokens > 0 and exchange.reply.usage.output_tokens > 0
    assert exchange.model == f"{kind}-test-model" and exchange.attempts == 1
    sent = llm_server.requests[0]
    body = sent["body"]
    assert body["model"] == f"{kind}-test-model" and body["temperature"] == 0.3
    if kind == "openai":
        assert sent["path"] == "/v1/chat/completions"
        assert sent["headers"]["authorization"] == f"Bearer {SECRET}"
        assert body["messages"][0] == {"role": "system", "content": "You are an expert."}
        assert body["stop"] == ["STOP"] and body["max_tokens"] == 8192
    else:
        assert sent["path"] == "/v1/messages"
        headers = sent["headers"]  # library versions differ in where the key goes
        assert SECRET in (headers.get("x-api-key"), headers.get("authorization", "")[7:])
        # The Messages API takes the system prompt apart; it and the last turn are
        # cache breakpoints (a feedback round reads the conversation from cache).
        assert body["system"] == [{"type": "text", "text": "You are an expert.",
                                   "cache_control": {"type": "ephemeral"}}]
        assert body["messages"] == [{"role": "user", "content": [
            {"type": "text", "text": "Lift this kernel.", "cache_control": {"type": "ephemeral"}}]}]
        assert body["stop_sequences"] == ["STOP"]
    # The exchange is on disk as JSON and markdown, and reads back equal.
    [recorded] = list(read_exchanges(tmp_path))
    assert recorded.text == exchange.text and recorded.request == exchange.request
    assert exchange.path and exchange.path.with_suffix(".md").read_text().count("## user") == 1


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_429_and_500_are_retried_then_succeed(kind, llm_server, tmp_path):
    llm_server.fail(429, retry_after="0")
    llm_server.fail(500)
    llm_server.fail(503)
    llm_server.reply("finally")
    client = make_client(kind, llm_server, tmp_path)
    exchange = ask(client)
    assert exchange.text == "finally"
    assert llm_server.count == 4 and exchange.attempts == 4
    assert [e.split(":")[0] for e in exchange.retry_errors] == [
        f"{kind} HTTP 429",
        f"{kind} HTTP 500",
        f"{kind} HTTP 503",
    ]
    assert client.tracker.calls == 1  # one logical call


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("status", [400, 401, 404])
def test_client_errors_are_not_retried(kind, status, llm_server, tmp_path):
    llm_server.fail(status)
    llm_server.reply("never sent")
    client = make_client(kind, llm_server, tmp_path)
    with pytest.raises(ProviderError) as err:
        ask(client)
    assert not isinstance(err.value, RetriesExhausted)
    assert err.value.status == status and f"HTTP {status}" in str(err.value)
    assert llm_server.count == 1
    failures = (tmp_path / "llm" / "lift" / "failures.jsonl").read_text().splitlines()
    assert len(failures) == 1 and f"HTTP {status}" in json.loads(failures[0])["error"]
    assert list(read_exchanges(tmp_path)) == []  # a failure is never cached


@pytest.mark.parametrize("kind", KINDS)
def test_retries_give_up_with_every_error_named(kind, llm_server, tmp_path):
    for _ in range(4):
        llm_server.fail(502)
    client = make_client(kind, llm_server, tmp_path)
    with pytest.raises(RetriesExhausted, match="gave up after 4 attempts") as err:
        ask(client)
    assert str(err.value).count(f"{kind} HTTP 502") == 4 and llm_server.count == 4


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_timeout_is_retried(kind, llm_server, tmp_path):
    llm_server.hang(1.5)
    llm_server.reply("in time")
    client = make_client(kind, llm_server, tmp_path, timeout_s=0.4)
    exchange = ask(client)
    assert exchange.text == "in time" and exchange.attempts == 2
    assert "timed out" in exchange.retry_errors[0]


@pytest.mark.parametrize("kind", KINDS)
def test_budget_stops_cleanly_and_the_rerun_resumes_from_cache(kind, llm_server, tmp_path):
    llm_server.reply("reply 1", "reply 2", "reply 3")
    client = make_client(kind, llm_server, tmp_path, budget_calls=2)
    assert ask(client, "step 1").text == "reply 1"
    assert ask(client, "step 2").text == "reply 2"
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    with pytest.raises(BudgetExceeded, match="'lift' budget exhausted: 2 of 2 calls"):
        ask(client, "step 3")
    assert llm_server.count == 2  # the budget check comes before the call
    after = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert after == before  # everything written stays exactly as it was

    # A rerun with a larger budget: the first two answers come from disk.
    rerun = make_client(kind, llm_server, tmp_path, budget_calls=5)
    first, second = ask(rerun, "step 1"), ask(rerun, "step 2")
    assert (first.text, second.text) == ("reply 1", "reply 2") and first.cached
    assert llm_server.count == 2 and rerun.calls_made == 0
    assert ask(rerun, "step 3").text == "reply 3"
    assert llm_server.count == 3 and rerun.calls_made == 1
    assert sorted(e.seq for e in read_exchanges(tmp_path)) == [1, 2, 3]


@pytest.mark.parametrize("kind", KINDS)
def test_token_and_cost_budgets(kind, llm_server, tmp_path):
    llm_server.reply("x" * 400, "y" * 400)
    client = make_client(kind, llm_server, tmp_path, budget_tokens=50)
    ask(client)  # about 100 output tokens: over the budget after the call
    with pytest.raises(BudgetExceeded, match="tokens used of 50"):
        ask(client, "again")
    assert llm_server.count == 1


def test_cost_accounting_uses_the_price_table(llm_server, tmp_path):
    (tmp_path / "llm.toml").write_text(
        '[prices."openai-test-*"]\ninput_per_mtok = 2.0\noutput_per_mtok = 10.0\n'
        "[budgets.lift]\ncost_usd = 0.0001\n"
    )
    llm_server.reply("z" * 400)
    environ = {"TEST_LLM_KEY": SECRET}
    config = load_config(
        {
            "provider": "openai",
            "model": "openai-test-model",
            "base_url": f"{llm_server.url}/v1",
            "api_key_env": "TEST_LLM_KEY",
        },
        environ,
        tmp_path / "llm.toml",
    )
    client = LLMClient.from_config(config, tmp_path, "lift", environ=environ, log=lambda _: None)
    exchange = ask(client)
    usage = exchange.reply.usage
    assert exchange.cost_usd == pytest.approx(
        (usage.input_tokens * 2 + usage.output_tokens * 10) / 1e6
    )
    with pytest.raises(BudgetExceeded, match=r"\$0\.00"):
        ask(client, "more")


@pytest.mark.parametrize("kind", KINDS)
def test_the_api_key_is_never_written(kind, llm_server, tmp_path):
    llm_server.fail(429)
    llm_server.reply(f"echoing the key {SECRET} back")  # even a reply quoting it
    llm_server.fail(401)
    client = make_client(kind, llm_server, tmp_path)
    exchange = ask(client)
    client.record(exchange, parsed={"note": SECRET}, verification={"ok": True})
    with pytest.raises(ProviderError):
        ask(client, "second")
    assert llm_server.requests[0]["headers"]  # the key did go over the wire...
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(files) >= 3
    for path in files:  # ...and nowhere to disk
        assert SECRET not in path.read_text(), path
    assert "[REDACTED]" in exchange.path.read_text()
