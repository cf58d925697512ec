"""The lift stage's checks of a reply, through the openai client: a reply
whose correspondence names a method the program lacks, or CUDA lines past
the end of the source, goes back with each problem listed; the corrected
reply is verified by the executor (covered in test_replay_fixtures)."""

from __future__ import annotations

import json

import pytest
from llm_fakes import make_client
from stage_fixtures import FAST, ROOT, fixture_reply

from cubridge.llm import ReplyParseError, read_exchanges
from cubridge.llm.loop import Rejected
from cubridge.llm_path import StageFailed
from cubridge.llm_path.correspondence import check_correspondence, parse_correspondence
from cubridge.llm_path.lift import lift
from cubridge.rundir import RunDir

CU = ROOT / "cubridge" / "kernels" / "fa_sm80" / "fa_sm80.cu"
GOOD = fixture_reply("lift_fa_sm80.md")
PROGRAM = GOOD[GOOD.index("```python"):GOOD.index("```json")]


def _with_json(data: dict) -> str:
    return PROGRAM + "```json\n" + json.dumps(data) + "\n```\n"


def test_correspondence_problems_are_listed_precisely():
    program = PROGRAM.split("\n", 1)[1].rsplit("```", 1)[0]
    bad = {"correspondence": [
        {"method": "producer", "ir_lines": [1, 2], "cuda_lines": [[1, 2]]},
        {"method": "attention", "ir_lines": [64, 138], "cuda_lines": [[400, 9999]]},
    ]}
    with pytest.raises(Rejected) as info:
        check_correspondence(bad, program, 465)
    text = str(info.value)
    assert "method 'producer' is not defined in the program" in text
    assert "cuda_lines [[400, 9999]] are outside the source's 1..465" in text
    assert "no entry for method(s) run" in text
    with pytest.raises(ReplyParseError, match="not valid JSON: line 1"):
        parse_correspondence("```json\n{oops\n```\n")
    with pytest.raises(ReplyParseError, match='"correspondence" list'):
        parse_correspondence('```json\n{"workers": []}\n```\n')


def test_bad_correspondence_goes_back_to_the_model(llm_server, tmp_path):
    wrong = _with_json({"correspondence": [
        {"method": "attention", "ir_lines": [64, 138], "cuda_lines": [[316, 9999]]}]})
    llm_server.reply(wrong, "I would rather explain the kernel in prose.")
    client = make_client("openai", llm_server, tmp_path, stage="lift")
    with pytest.raises(StageFailed, match="no reply passed the check in 2 round"):
        lift(CU, client, RunDir(tmp_path, log=lambda _: None),
             FAST.__class__(rounds=2, ir_sizes=FAST.ir_sizes))
    errors = [e.verification["error"] for e in sorted(read_exchanges(tmp_path),
                                                     key=lambda e: e.seq)]
    assert "cuda_lines [[316, 9999]] are outside the source's" in errors[0]
    assert "no entry for method(s) run, attention" not in errors[0]  # attention is there
    assert "no entry for method(s) run" in errors[0]
    assert errors[1] == "no ```python block in the reply"
    # The first prompt carries the numbered source and the three steps.
    prompt = llm_server.requests[0]["body"]["messages"][1]["content"]
    assert "Annotate the intrinsics" in prompt and "Map regions to workers" in prompt
    assert " 1 | " in prompt and "cp_async_wait<2>()" in prompt
