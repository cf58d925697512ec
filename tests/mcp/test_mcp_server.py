"""`cubridge mcp`: the MCP protocol over stdio (a real subprocess), and the
tools an agent drives the workflow with."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cubridge.build.resources import SPILL_BUDGET_BYTES
from cubridge.llm import code_block
from cubridge.mcp.protocol import Server, serve
from cubridge.mcp.tools import TOOLS

ROOT = Path(__file__).resolve().parents[2]
SPECS = ROOT / "examples" / "specs"
FIXTURES = ROOT / "tests" / "fixtures" / "llm"


def _program(tmp_path: Path, fixture: str, name: str, edit: tuple[str, str] | None = None
             ) -> Path:
    source = code_block((FIXTURES / fixture).read_text(), "python")
    if edit:
        assert edit[0] in source
        source = source.replace(*edit)
    path = tmp_path / name
    path.write_text(source)
    return path


def _rpc(msg_id: int, method: str, params: dict | None = None) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": method,
                       "params": params or {}})


def _call(msg_id: int, tool: str, **arguments: object) -> str:
    return _rpc(msg_id, "tools/call", {"name": tool, "arguments": arguments})


@pytest.mark.slow
def test_stdio_session_of_an_agent(tmp_path):
    buggy = _program(tmp_path, "transfer_cosine.md", "buggy_cosine.py",
                     ("* (inv_q[:, None] * inv_k[None, :]) *", "* inv_q[:, None] *"))
    lines = [
        _rpc(1, "initialize", {"protocolVersion": "2025-03-26", "capabilities": {},
                               "clientInfo": {"name": "test", "version": "0"}}),
        json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        _rpc(2, "tools/list"),
        _call(3, "list_kernels"),
        _call(4, "verify_ir", path=str(buggy), spec=str(SPECS / "cosine.py"),
              sizes=[[1, 65, 129]], seed=3),
        _call(5, "lower", spec=str(SPECS / "causal.py"), out=str(tmp_path / "hooks.cuh")),
        _call(6, "lower", spec=str(SPECS / "cosine.py"), out=str(tmp_path / "no.cuh")),
        _call(7, "no_such_tool"),
        _rpc(8, "resources/list"),
        "{not json",
        _call(9, "verify_gpu", source=str(tmp_path / "x.cu"), spec=str(SPECS / "causal.py")),
    ]
    proc = subprocess.run([sys.executable, "-m", "cubridge.cli", "mcp"], input="\n".join(lines),
                          capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    replies = [json.loads(line) for line in proc.stdout.splitlines()]
    by_id = {r["id"]: r for r in replies}
    assert len(replies) == 10  # the notification got no reply

    assert by_id[1]["result"]["protocolVersion"] == "2025-03-26"
    assert by_id[1]["result"]["capabilities"] == {"tools": {"listChanged": False}}
    names = {t["name"] for t in by_id[2]["result"]["tools"]}
    assert names == {"list_kernels", "show_ir", "verify_ir", "diff_ir", "lower", "compile",
                     "verify_gpu", "benchmark"}
    assert all(t["inputSchema"]["type"] == "object" for t in by_id[2]["result"]["tools"])
    kernels = json.loads(by_id[3]["result"]["content"][0]["text"])
    assert kernels[0]["name"] == "fa_sm80" and 128 in kernels[0]["head_dims"]

    verdict = by_id[4]["result"]
    assert verdict["isError"] is True
    assert "FaSm80Cosine fails the spec when executed: FAIL" in verdict["content"][0]["text"]

    assert by_id[5]["result"]["isError"] is False
    assert "cubridge_hooks.cuh for spec 'causal'" in (tmp_path / "hooks.cuh").read_text()
    refused = by_id[6]["result"]
    assert refused["isError"] and "reference is not plain softmax attention" in \
        refused["content"][0]["text"] and not (tmp_path / "no.cuh").exists()

    assert by_id[7]["error"]["code"] == -32602 and "unknown tool" in by_id[7]["error"]["message"]
    assert by_id[8]["error"]["code"] == -32601
    assert by_id[None]["error"]["code"] == -32700
    gpu = by_id[9]["result"]
    assert gpu["isError"]
    if not torch.cuda.is_available():
        assert "no CUDA GPU visible" in gpu["content"][0]["text"]


@pytest.mark.slow
def test_diff_ir_and_lower_with_edit_actions(tmp_path):
    mla = _program(tmp_path, "transfer_mla.md", "mla_cuir.py")
    diff = TOOLS["diff_ir"].run(path=str(mla))
    assert "diff FaSm80 -> FaSm80Mla" in diff
    assert "change stays inside hooks: no" in diff and "+        self.head_dim_qk" in diff

    out = tmp_path / "edited.cu"
    edits = '@@@ insert after 0\n// edited through MCP\n@@@ end\n'
    text = TOOLS["lower"].run(out=str(out), edits=edits)
    assert "1 edit action(s) applied" in text
    assert out.read_text().startswith("// edited through MCP\n")
    server = Server(TOOLS)
    bad = server.handle(json.loads(_call(1, "lower", out=str(out), edits="@@@ delete 9999\n"
                                         "@@@ end\n")))
    assert bad["result"]["isError"] and "9999" in bad["result"]["content"][0]["text"]


def test_protocol_edge_cases():
    server = Server(TOOLS)
    assert server.handle({"jsonrpc": "2.0", "id": 1, "method": "ping"})["result"] == {}
    missing = server.handle(json.loads(_call(2, "verify_ir", path="x.py")))
    assert missing["error"]["code"] == -32602 and "spec" in missing["error"]["message"]
    extra = server.handle(json.loads(_call(3, "list_kernels", verbose=True)))
    assert "unknown argument(s) ['verbose']" in extra["error"]["message"]
    assert server.handle({"id": 4, "method": "ping"})["error"]["code"] == -32600
    absent = server.handle(json.loads(_call(5, "show_ir", path="/no/such/file.py")))
    assert absent["result"]["isError"] and "does not exist" in \
        absent["result"]["content"][0]["text"]
    out = io.StringIO()
    assert serve(TOOLS, io.StringIO(_rpc(6, "ping") + "\n\n"), out, log=lambda _: None) == 0
    assert json.loads(out.getvalue()) == {"jsonrpc": "2.0", "id": 6, "result": {}}


@pytest.mark.parametrize("tool", ["verify_gpu", "benchmark"])
def test_gpu_tools_say_when_there_is_no_gpu(tool):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(Exception, match="no CUDA GPU visible"):
        TOOLS[tool].run(source="x.cu", spec=str(SPECS / "causal.py"))


@pytest.mark.slow
@pytest.mark.nvcc
def test_compile_tool_reports_resources_and_diagnostics(tmp_path):
    from cubridge.llm import apply_edits, parse_edits

    lib_cu = ROOT / "cubridge" / "kernels" / "fa_sm80" / "fa_sm80.cu"
    mla = tmp_path / "mla.cu"
    mla.write_text(apply_edits(lib_cu.read_text(),
                               parse_edits((FIXTURES / "lower_mla.md").read_text())))
    for header in ("hook_types.cuh", "sm80_primitives.cuh"):
        assert (ROOT / "cubridge" / "kernels" / "common" / header).is_file()
    text = TOOLS["compile"].run(source=str(mla), spec=str(SPECS / "mla.py"),
                                config={"causal": True})
    report = json.loads(text)
    assert report["defines"]["CUBRIDGE_HEAD_DIM"] == 192
    res = report["resources"][0]
    assert res["spill_store_bytes"] + res["spill_load_bytes"] <= SPILL_BUDGET_BYTES
    broken = tmp_path / "broken.cu"
    broken.write_text(lib_cu.read_text().replace("const int lane = threadIdx.x % 32;",
                                                 "const int lane = threadIdx.x % ;"))
    server = Server(TOOLS)
    reply = server.handle(json.loads(_call(1, "compile", source=str(broken))))
    assert reply["result"]["isError"]
    assert "nvcc failed" in reply["result"]["content"][0]["text"]
    assert "broken.cu" in reply["result"]["content"][0]["text"]
