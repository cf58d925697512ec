"""The LLM transfer stage end to end through the real openai and anthropic
clients against the local HTTP server, with scripted replies: transient
errors retried, malformed and buggy replies rejected with the precise error
fed back, a correct reply verified by the executor against the spec, every
exchange in the run directory, a rerun answered from the cache, a budget
that stops cleanly and a resumed run."""

from __future__ import annotations

import dataclasses
import json

import pytest
from llm_fakes import make_client
from stage_fixtures import FAST, SPECS, fixture_reply

from cubridge.kernels import get_kernel
from cubridge.llm import BudgetExceeded, read_exchanges
from cubridge.llm_path import StageFailed
from cubridge.llm_path.transfer import transfer
from cubridge.rundir import RunDir

COSINE = SPECS / "cosine.py"
GOOD = fixture_reply("transfer_cosine.md")
# The classic slip: the K rows are never normalised (only Q's norms scale S).
BUGGY = GOOD.replace("* (inv_q[:, None] * inv_k[None, :]) *", "* inv_q[:, None] *")
NO_BLOCK = "Scale S by the inverse norms of the q and k rows, then softmax."
INVALID = "```python\nclass Target(KernelBase)\n    pass\n```\n"
FA_SM80 = get_kernel("fa_sm80")
FORBIDDEN = "```python\nimport os\n\nfrom cubridge.ir import KernelBase\n```\n"
ENDLESS = "```python\nimport math\n\nwhile True:\n    x = math.pi\n```\n"


def _sent(llm_server, index: int) -> list[dict]:
    return llm_server.requests[index]["body"]["messages"]


@pytest.mark.slow
def test_openai_retries_rejects_feeds_back_then_verifies(llm_server, tmp_path):
    llm_server.fail(429, retry_after="0")
    llm_server.fail(500)
    llm_server.reply(NO_BLOCK, INVALID, FORBIDDEN, BUGGY, GOOD)
    run_dir = RunDir(tmp_path, log=lambda _: None)
    client = make_client("openai", llm_server, tmp_path, stage="transfer")
    result = transfer(COSINE, client, run_dir, dataclasses.replace(FAST, rounds=5),
                      kernel=FA_SM80)

    # 429 and 500 were retried inside the first call; 5 replies, 7 HTTP requests.
    assert llm_server.count == 7 and client.calls_made == 5
    exchanges = sorted(read_exchanges(tmp_path), key=lambda e: e.seq)
    assert exchanges[0].attempts == 3
    errors = [e.verification.get("error") for e in exchanges]
    assert errors[0] == "no ```python block in the reply"
    assert "target_cuir.py is not valid Python: line 1" in errors[1]
    assert "target_cuir.py line 1: import of 'os' is not allowed" in errors[2]
    assert "fails the spec when executed: FAIL" in errors[3]
    assert [e.verification["ok"] for e in exchanges] == [False, False, False, False, True]
    # Each error went back to the model right after the reply it rejected.
    for k, rejected in enumerate([NO_BLOCK, INVALID, FORBIDDEN, BUGGY]):
        sent = _sent(llm_server, k + 3)
        assert sent[-2]["content"] == rejected
        assert errors[k] in sent[-1]["content"]
    # The first prompt is built from the templates: the CuIR reference, the source
    # program once (with its base class), the spec, its aux and helpers.
    first = _sent(llm_server, 0)
    assert "# CuIR reference" in first[0]["content"]
    task = first[1]["content"]
    assert "Semantic alignment" in task and task.count("class FaSm80(") == 1
    assert "class AttentionKernelBase" in task and "def expand_kv" in task
    assert "| 0 | `logit_scale` | [Hq] | float32 |" in task

    assert result.target.read_text().startswith('"""Target CuIR: fa_sm80 transferred to cosine')
    assert "6/6 cases pass" in (tmp_path / "verify_ir.txt").read_text()
    meta = json.loads((tmp_path / "transfer.json").read_text())
    assert meta["kernel"] == "FaSm80Cosine" and "timing unavailable" in meta["timing"]
    assert exchanges[-1].parsed["kernel"] == "FaSm80Cosine"

    # A rerun with the same inputs: the finished stage is reused, no call made.
    again = make_client("openai", llm_server, tmp_path, stage="transfer")
    transfer(COSINE, again, RunDir(tmp_path, log=lambda _: None),
             dataclasses.replace(FAST, rounds=5), kernel=FA_SM80)
    assert again.calls_made == 0 and llm_server.count == 7


@pytest.mark.slow
def test_anthropic_retry_and_best_of_k(llm_server, tmp_path):
    """Sample 0 fails its only round; sample 1 is verified and kept (no timing on CPU)."""
    llm_server.fail(500)
    llm_server.reply(NO_BLOCK, GOOD)
    client = make_client("anthropic", llm_server, tmp_path, stage="transfer")
    settings = dataclasses.replace(FAST, rounds=1, k=2)
    result = transfer(COSINE, client, RunDir(tmp_path, log=lambda _: None), settings,
                      kernel=FA_SM80)
    assert llm_server.count == 3 and client.calls_made == 2
    assert llm_server.requests[-1]["path"].endswith("/messages")
    assert "PASS" in result.record.summary and "FaSm80Cosine" in result.record.summary
    meta = json.loads((tmp_path / "transfer.json").read_text())
    assert meta["best_sample"] == 1 and len(meta["failures"]) == 1
    assert "sample 0" in meta["failures"][0] and "no ```python block" in meta["failures"][0]
    assert "timing unavailable: kept the first verified candidate" in meta["timing"]
    hashes = {e.request_hash for e in read_exchanges(tmp_path)}
    assert len(hashes) == 2  # the sample index makes the requests differ


@pytest.mark.slow
def test_an_endless_program_times_out_with_its_line(llm_server, tmp_path):
    llm_server.reply(ENDLESS)
    client = make_client("openai", llm_server, tmp_path, stage="transfer")
    settings = dataclasses.replace(FAST, rounds=1, sandbox_timeout_s=4)
    with pytest.raises(StageFailed, match=r"target_cuir.py: timed out after 4s"):
        transfer(COSINE, client, RunDir(tmp_path, log=lambda _: None), settings,
                 kernel=FA_SM80)
    # Failed: nothing recorded as done, the exchange is on disk with its error.
    assert not (tmp_path / "target_cuir.py").exists()
    (exchange,) = read_exchanges(tmp_path)
    assert "timed out" in exchange.verification["error"]


@pytest.mark.slow
def test_budget_exhausted_leaves_the_run_resumable(llm_server, tmp_path):
    llm_server.reply(NO_BLOCK, GOOD)
    run_dir = RunDir(tmp_path, log=lambda _: None)
    client = make_client("openai", llm_server, tmp_path, stage="transfer", budget_calls=1)
    with pytest.raises(BudgetExceeded, match="'transfer' budget exhausted: 1 of 1 calls"):
        transfer(COSINE, client, run_dir, FAST, kernel=FA_SM80)
    assert llm_server.count == 1
    assert len(list(read_exchanges(tmp_path))) == 1
    assert "transfer" not in json.loads((tmp_path / "manifest.json").read_text()
                                        if (tmp_path / "manifest.json").exists()
                                        else '{"stages": {}}')["stages"]

    rerun = make_client("openai", llm_server, tmp_path, stage="transfer", budget_calls=3)
    result = transfer(COSINE, rerun, RunDir(tmp_path, log=lambda _: None), FAST,
                      kernel=FA_SM80)
    assert rerun.cache_hits == 1 and rerun.calls_made == 1 and llm_server.count == 2
    assert result.target.is_file()
