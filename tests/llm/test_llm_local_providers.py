"""The command, manual and replay providers, and the transcript files."""

from __future__ import annotations

import json
import sys
import threading
import time

import pytest
from llm_fakes import ask, make_client

from cubridge.llm import (
    LLMClient,
    LLMError,
    ManualReplyTimeout,
    ProviderError,
    ReplayMiss,
    Request,
    RetriesExhausted,
    RetryPolicy,
    Usage,
    assistant,
    load_config,
    read_exchanges,
    record_fixture,
    system,
    user,
)
from cubridge.llm.providers.command import CommandProvider
from cubridge.llm.providers.manual import ManualProvider
from cubridge.llm.providers.replay import ReplayProvider

NOCONF = {"XDG_CONFIG_HOME": "/nonexistent/cubridge-test"}
ECHO = "import sys; text = sys.stdin.read(); print('reply to: ' + text.strip())"
ECHO_JSON = (
    "import json, sys; req = json.load(sys.stdin); "
    "print(req['messages'][-1]['content'].upper(), req['max_tokens'])"
)


def quiet_client(provider, run_dir, **kwargs) -> LLMClient:
    return LLMClient(provider, run_dir, "lower", log=lambda _: None, **kwargs)


def test_command_provider_pipes_the_prompt(tmp_path):
    config = load_config(
        {"provider": "command", "command": [sys.executable, "-c", ECHO], "model": "echo"},
        NOCONF,
    )
    client = LLMClient.from_config(config, tmp_path, "lower", environ=NOCONF, log=lambda _: None)
    exchange = client.complete([user("patch the kernel")])
    assert exchange.text == "reply to: patch the kernel\n"
    assert exchange.reply.usage.estimated and exchange.reply.usage.output_tokens > 0
    assert exchange.model == "echo" and (tmp_path / "llm" / "lower").is_dir()


def test_command_provider_json_input(tmp_path):
    provider = CommandProvider([sys.executable, "-c", ECHO_JSON], input_mode="json")
    exchange = quiet_client(provider, tmp_path).complete([user("hello")], max_tokens=77)
    assert exchange.text == "HELLO 77\n"


@pytest.mark.slow
def test_command_provider_errors(tmp_path):
    failing = CommandProvider([sys.executable, "-c", "import sys; sys.exit('model crashed')"])
    with pytest.raises(ProviderError, match="exited with status 1: model crashed"):
        quiet_client(failing, tmp_path).complete([user("x")])
    with pytest.raises(ProviderError, match="cannot run"):
        quiet_client(CommandProvider(["/nonexistent/llm-cli"]), tmp_path).complete([user("x")])
    silent = CommandProvider([sys.executable, "-c", "pass"])
    with pytest.raises(ProviderError, match="printed nothing"):
        quiet_client(silent, tmp_path).complete([user("x")])
    slow = CommandProvider([sys.executable, "-c", "import time; time.sleep(30)"], timeout_s=0.3)
    client = quiet_client(slow, tmp_path, retry=RetryPolicy(max_attempts=2, backoff_base_s=0))
    start = time.monotonic()
    with pytest.raises(RetriesExhausted, match="timed out after 0.3s"):
        client.complete([user("x")])
    assert time.monotonic() - start < 5


def test_manual_provider_waits_for_the_reply_file(tmp_path):
    announced: list[str] = []
    provider = ManualProvider(
        tmp_path / "manual", poll_s=0.02, timeout_s=10, announce=announced.append
    )
    request = Request.of([user("Lift this kernel:\n__global__ void k() {}")])
    prompt_path, reply_path = provider.paths(request)

    def person() -> None:
        while not prompt_path.exists():
            time.sleep(0.01)
        reply_path.write_text("```python\nclass K: pass\n```\n")

    threading.Thread(target=person, daemon=True).start()
    exchange = quiet_client(provider, tmp_path).complete(request.messages)
    assert exchange.text == "```python\nclass K: pass\n```\n"
    assert "__global__ void k() {}" in prompt_path.read_text()
    assert announced == [
        f"[manual llm] prompt: {prompt_path}",
        f"[manual llm] waiting for the reply in: {reply_path}",
    ]


def test_manual_provider_feedback_round_shows_only_the_new_turns(tmp_path):
    """A feedback round is a turn of the same conversation: its prompt file
    names the earlier one and holds only the rejected reply and the feedback."""
    provider = ManualProvider(tmp_path, poll_s=0.02, timeout_s=0.1, announce=lambda _: None)
    first = Request.of([system("rules " * 500), user("the long task " * 500)])
    first_prompt, first_reply = provider.paths(first)
    first_reply.write_text("a wrong answer")
    assert provider.complete(first).text == "a wrong answer"
    second = Request.of([*first.messages, assistant("a wrong answer"), user("fix line 3")])
    second_prompt, second_reply = provider.paths(second)
    second_reply.write_text("a right answer")
    assert provider.complete(second).text == "a right answer"
    text = second_prompt.read_text()
    assert f"continues the conversation of {first_prompt.name}" in text
    assert "fix line 3" in text and "a wrong answer" in text and "the long task" not in text
    assert len(text) < len(first_prompt.read_text()) / 10


def test_manual_provider_timeout_then_resume(tmp_path):
    provider = ManualProvider(tmp_path, poll_s=0.02, timeout_s=0.1, announce=lambda _: None)
    request = Request.of([user("question")])
    with pytest.raises(ManualReplyTimeout, match="write it and rerun"):
        provider.complete(request)
    prompt_path, reply_path = provider.paths(request)
    assert prompt_path.exists()
    reply_path.write_text("answer")  # written later: a rerun picks it up at once
    assert provider.complete(request).text == "answer"


def test_manual_provider_from_config_uses_the_run_directory(tmp_path):
    config = load_config({"provider": "manual"}, NOCONF)
    client = LLMClient.from_config(config, tmp_path, "lift", environ=NOCONF)
    assert client.provider.directory == tmp_path / "llm" / "manual"


def test_replay_answers_from_recorded_transcripts(llm_server, tmp_path):
    recorded = tmp_path / "recorded"
    llm_server.reply("first answer", "second answer")
    live = make_client("openai", llm_server, recorded)
    ask(live, "one")
    ask(live, "two", sample=1)

    replay = ReplayProvider(recorded / "llm")
    assert len(replay) == 2
    client = quiet_client(replay, tmp_path / "replayed")
    assert client.stage == "lower"
    messages = live.store.lookup(next(iter(live.store._by_key))).request.messages
    assert client.complete(messages).text == "first answer"
    assert llm_server.count == 2  # no call went out

    with pytest.raises(ReplayMiss) as err:
        client.complete(messages, sample=1)  # same messages, other sample: not recorded
    request = Request.of(messages, max_tokens=8192, sample=1)
    assert request.hash in str(err.value) and str(recorded / "llm") in str(err.value)
    # The replayed exchange is itself recorded in the new run directory.
    assert [e.provider for e in read_exchanges(tmp_path / "replayed")] == ["replay"]
    with pytest.raises(ReplayMiss, match="does not exist"):
        ReplayProvider(tmp_path / "nowhere")


def test_transcript_files_are_complete_and_readable(llm_server, tmp_path):
    llm_server.reply("```python\nx = 1\n```")
    client = make_client("anthropic", llm_server, tmp_path)
    exchange = ask(client, "make x")
    client.record(exchange, parsed={"code": "x = 1\n"}, verification={"ok": True, "rel_err": 0.0})
    data = json.loads(exchange.path.read_text())
    assert data["format"] == "cubridge.llm.exchange/1"
    for key in ("stage", "seq", "provider", "model", "request_hash", "cache_key", "started_at",
                "finished_at", "attempts", "cost_usd", "request", "reply"):  # fmt: skip
        assert key in data
    assert data["reply"]["usage"]["input_tokens"] > 0
    assert data["parsed"] == {"code": "x = 1\n"} and data["verification"]["ok"] is True
    markdown = exchange.path.with_suffix(".md").read_text()
    assert markdown.startswith("# lift #0001: anthropic / anthropic-test-model")
    assert "## system" in markdown and "make x" in markdown and "## verification" in markdown
    assert not list(tmp_path.rglob("*.tmp"))  # atomic writes leave nothing behind


def test_free_providers_need_no_price_for_a_cost_budget(tmp_path):
    config = load_config({"provider": "manual", "budget_cost_usd": "1"}, NOCONF)
    client = LLMClient.from_config(config, tmp_path, "lift", environ=NOCONF)
    assert client.tracker.price is not None and client.tracker.price.cost(Usage(10, 10)) == 0.0


def test_a_malformed_transcript_is_named(tmp_path):
    folder = tmp_path / "llm" / "lift"
    folder.mkdir(parents=True)
    (folder / "0001-abc.json").write_text('{"format": "cubridge.llm.exchange/1", "stage": "lift"}')
    with pytest.raises(LLMError, match=r"0001-abc.json: malformed exchange record"):
        LLMClient(CommandProvider(["true"]), tmp_path, "lift")


def test_fixtures_and_manual_replies_stay_labelled_through_replay(tmp_path):
    fixtures = tmp_path / "fixtures"
    request = Request.of([system("lift"), user("kernel source")], temperature=0.0)
    label = "recorded fixture: CuIR written by a cubridge engineer"
    record_fixture(fixtures, "lift", request, "```python\nx = 1\n```\n", label=label)
    with pytest.raises(ValueError, match="needs a label"):
        record_fixture(fixtures, "lift", request, "text", label=" ")

    client = quiet_client(ReplayProvider(fixtures / "llm"), tmp_path / "run")
    exchange = client.complete(request.messages, temperature=0.0)
    assert exchange.text == "```python\nx = 1\n```\n"
    assert exchange.label.startswith("replayed from ") and label in exchange.label
    assert label in exchange.path.with_suffix(".md").read_text()

    manual = ManualProvider(tmp_path / "m", poll_s=0.01, timeout_s=5, announce=lambda _: None)
    manual.paths(request)[1].parent.mkdir(parents=True)
    manual.paths(Request.of(request.messages, temperature=0.0))[1].write_text("by hand")
    by_hand = quiet_client(manual, tmp_path / "run2").complete(request.messages, temperature=0.0)
    assert by_hand.label == "written by hand through the manual provider, not a model's output"
