"""A stage's inner loop end to end through both client libraries: each
malformed reply is rejected with the precise error, which goes back to the
model, until a correct reply passes the static check and runs in the sandbox."""

from __future__ import annotations

import pytest
from llm_fakes import FAST_RETRY, make_client

from cubridge.llm import SandboxLimits, code_block, read_exchanges, run_generated, user
from cubridge.llm.loop import RoundsExhausted, ask_until_valid

GOOD = "```python\nimport math\n\n\ndef answer(x):\n    return math.sqrt(x) + 1\n```\n"
NO_BLOCK = "Here is the idea: take the square root and add one."
INVALID = "```python\ndef answer(x)\n    return x\n```\n"
FORBIDDEN = "```python\nimport os\n\n\ndef answer(x):\n    return os.getpid()\n```\n"
ENDLESS = "```python\ndef answer(x):\n    while True:\n        x += 1\n```\n"


def run_answer(reply: str) -> float:
    """The check of this toy stage: parse, check statically, run sandboxed."""
    code = code_block(reply, "python")
    limits = SandboxLimits(timeout_s=3, memory_mb=2048)
    result = run_generated(code, call="answer", args=(16,), preload=(), limits=limits)
    return result.value


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_malformed_replies_are_fed_back_until_one_passes(kind, llm_server, tmp_path):
    llm_server.reply(NO_BLOCK, INVALID, FORBIDDEN, ENDLESS, GOOD)
    client = make_client(kind, llm_server, tmp_path, stage="transfer")
    outcome = ask_until_valid(
        client,
        [user("Write answer(x) = sqrt(x) + 1 in a ```python block.")],
        run_answer,
        rounds=5,
        describe=lambda value: {"answer(16)": value},
    )
    assert outcome.value == 5.0
    errors = [r.error for r in outcome.rounds]
    assert errors[0] == "no ```python block in the reply"
    assert "generated.py is not valid Python: line 1" in errors[1] and "expected ':'" in errors[1]
    assert "generated.py line 1: import of 'os' is not allowed" in errors[2]
    assert "timed out after 3s at line 3: x += 1" in errors[3] or (
        "timed out after 3s at line 2" in errors[3]
    )
    assert errors[4] is None

    # Each error went back to the model in the next request, after its reply.
    for k in range(4):
        sent = llm_server.requests[k + 1]["body"]["messages"]
        assert sent[-2] == {
            "role": "assistant",
            "content": [NO_BLOCK, INVALID, FORBIDDEN, ENDLESS][k],
        }
        last = sent[-1]["content"]  # anthropic: text blocks, the last a cache breakpoint
        assert errors[k] in (last if isinstance(last, str) else last[0]["text"])

    # The transcript holds every round with its verification outcome.
    recorded = sorted(read_exchanges(tmp_path), key=lambda e: e.seq)
    assert [e.verification["ok"] for e in recorded] == [False, False, False, False, True]
    assert recorded[-1].parsed == {"answer(16)": 5.0}
    assert "## verification" in recorded[0].path.with_suffix(".md").read_text()


def test_rounds_are_bounded(llm_server, tmp_path):
    llm_server.reply(NO_BLOCK, NO_BLOCK)
    client = make_client("openai", llm_server, tmp_path)
    client.retry = FAST_RETRY
    with pytest.raises(RoundsExhausted, match="no reply passed the check in 2 round"):
        ask_until_valid(client, [user("go")], run_answer, rounds=2)
    assert llm_server.count == 2


@pytest.mark.slow
def test_a_rerun_of_the_loop_makes_no_calls(llm_server, tmp_path):
    llm_server.reply(NO_BLOCK, GOOD)
    ask_until_valid(make_client("openai", llm_server, tmp_path), [user("go")], run_answer)
    again = make_client("openai", llm_server, tmp_path)
    outcome = ask_until_valid(again, [user("go")], run_answer)
    assert outcome.value == 5.0 and llm_server.count == 2 and again.calls_made == 0
