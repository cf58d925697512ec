"""`cubridge mcp`, built on the official MCP Python SDK: the SDK's own client
drives the server in-process, over stdio (a real subprocess) and over
streamable HTTP; a raw newline-delimited JSON-RPC session checks the wire that
agents speak; and the tools an agent drives the workflow with."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
import torch

from cubridge.build.resources import SPILL_BUDGET_BYTES
from cubridge.llm import code_block
from cubridge.mcp.tools import TOOLS

mcp = pytest.importorskip("mcp", reason="the MCP SDK is in the llm extra")
from mcp import Client, MCPError, StdioServerParameters  # noqa: E402

from cubridge.mcp.server import build_server  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SPECS = ROOT / "examples" / "specs"
FIXTURES = ROOT / "tests" / "fixtures" / "llm"
TOOL_NAMES = {"list_kernels", "show_ir", "verify_ir", "diff_ir", "lower", "compile",
              "verify_gpu", "benchmark"}


def _program(tmp_path: Path, fixture: str, name: str, edit: tuple[str, str] | None = None
             ) -> Path:
    source = code_block((FIXTURES / fixture).read_text(), "python")
    if edit:
        assert edit[0] in source
        source = source.replace(*edit)
    path = tmp_path / name
    path.write_text(source)
    return path


def _session(server, body):
    """Run `body(client)` in a session of the SDK's client with `server`."""
    async def main():
        async with Client(server, read_timeout_seconds=240) as client:
            return await body(client)
    return anyio.run(main)


def _text(result) -> str:
    return result.content[0].text


@pytest.mark.slow
def test_stdio_session_of_an_agent(tmp_path):
    buggy = _program(tmp_path, "transfer_cosine.md", "buggy_cosine.py",
                     ("* (inv_q[:, None] * inv_k[None, :]) *", "* inv_q[:, None] *"))
    params = StdioServerParameters(command=sys.executable, args=["-m", "cubridge.cli", "mcp"],
                                   cwd=str(ROOT))

    async def agent(client):
        listed = (await client.list_tools()).tools
        out = {"tools": listed, "kernels": await client.call_tool("list_kernels", {})}
        out["buggy"] = await client.call_tool("verify_ir", {
            "path": str(buggy), "spec": str(SPECS / "cosine.py"), "sizes": [[1, 65, 129]],
            "seed": 3})
        out["hooks"] = await client.call_tool("lower", {"spec": str(SPECS / "causal.py"),
                                                        "out": str(tmp_path / "hooks.cuh")})
        out["refused"] = await client.call_tool("lower", {"spec": str(SPECS / "cosine.py"),
                                                          "out": str(tmp_path / "no.cuh")})
        with pytest.raises(MCPError) as unknown:
            await client.call_tool("no_such_tool", {})
        out["unknown"] = unknown.value
        out["gpu"] = await client.call_tool("verify_gpu", {"source": str(tmp_path / "x.cu"),
                                                           "spec": str(SPECS / "causal.py")})
        return out

    got = _session(params, agent)
    assert {t.name for t in got["tools"]} == TOOL_NAMES
    assert all(t.input_schema["type"] == "object" for t in got["tools"])
    kernels = json.loads(_text(got["kernels"]))
    assert kernels[0]["name"] == "fa_sm80" and 128 in kernels[0]["head_dims"]
    assert "multiples of 8 from 8 to 256" in kernels[0]["head_dims_built"]  # (the padded ones)
    assert {k["name"]: k["head_dim_pairs"] for k in kernels} == {"fa_sm80": [],
                                                                 "fa_sm90": ["192/128"]}
    assert got["buggy"].is_error
    assert "FaSm80Cosine fails the spec when executed: FAIL" in _text(got["buggy"])
    assert not got["hooks"].is_error
    assert "cubridge_hooks.cuh for spec 'causal'" in (tmp_path / "hooks.cuh").read_text()
    assert got["refused"].is_error and not (tmp_path / "no.cuh").exists()
    assert "reference is not plain softmax attention" in _text(got["refused"])
    assert got["unknown"].code == -32602 and "unknown tool" in got["unknown"].message
    assert got["gpu"].is_error
    if not torch.cuda.is_available():
        assert "no CUDA GPU visible" in _text(got["gpu"])


@pytest.mark.slow
def test_raw_json_rpc_on_stdio_as_agents_send_it():
    """The wire itself: newline-delimited JSON-RPC, the handshake an agent opens with."""
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": {"name": "agent", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
         "params": {"name": "list_kernels", "arguments": {}}},
        {"jsonrpc": "2.0", "id": 4, "method": "tools/call",
         "params": {"name": "list_kernels", "arguments": {"verbose": True}}},
    ]
    proc = subprocess.Popen([sys.executable, "-m", "cubridge.cli", "mcp"], cwd=ROOT,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    replies = {}
    try:
        for message in lines:
            proc.stdin.write(json.dumps(message) + "\n")
            proc.stdin.flush()
            if "id" in message:
                reply = json.loads(proc.stdout.readline())
                replies[reply["id"]] = reply
    finally:
        proc.stdin.close()
        proc.wait(60)
    assert replies[1]["result"]["protocolVersion"] == "2025-06-18"
    assert replies[1]["result"]["serverInfo"]["name"] == "cubridge"
    assert "tools" in replies[1]["result"]["capabilities"]
    assert {t["name"] for t in replies[2]["result"]["tools"]} == TOOL_NAMES
    assert replies[3]["result"]["isError"] is False
    assert "fa_sm80" in replies[3]["result"]["content"][0]["text"]
    assert replies[4]["error"]["code"] == -32602
    assert "unknown argument(s) ['verbose']" in replies[4]["error"]["message"]
    assert proc.returncode == 0, proc.stderr.read()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_streamable_http_session():
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "cubridge.cli", "mcp", "--http", "--port",
                             str(port)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None, proc.stderr.read()
                time.sleep(0.3)

        async def agent(client):
            return (await client.list_tools()).tools, await client.call_tool("list_kernels", {})

        tools, kernels = _session(f"http://127.0.0.1:{port}/mcp", agent)
    finally:
        proc.terminate()
        proc.wait(30)
    assert {t.name for t in tools} == TOOL_NAMES
    assert json.loads(_text(kernels))[0]["name"] == "fa_sm80"


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
    bad = _session(build_server(TOOLS), lambda c: c.call_tool(
        "lower", {"out": str(out), "edits": "@@@ delete 9999\n@@@ end\n"}))
    assert bad.is_error and "9999" in _text(bad)


def test_protocol_edge_cases():
    async def agent(client):
        out = {}
        for key, args in (("missing", ("verify_ir", {"path": "x.py"})),
                          ("extra", ("list_kernels", {"verbose": True}))):
            with pytest.raises(MCPError) as err:
                await client.call_tool(*args)
            out[key] = err.value
        out["absent"] = await client.call_tool("show_ir", {"path": "/no/such/file.py"})
        return out

    got = _session(build_server(TOOLS), agent)
    assert got["missing"].code == -32602 and "spec" in got["missing"].message
    assert "unknown argument(s) ['verbose']" in got["extra"].message
    assert got["absent"].is_error and "does not exist" in _text(got["absent"])


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
    # (kernel: the source is fa_sm80's; for MLA on sm_90a the library would pick fa_sm90)
    text = TOOLS["compile"].run(source=str(mla), spec=str(SPECS / "mla.py"),
                                config={"causal": True}, kernel="fa_sm80")
    report = json.loads(text)
    assert report["defines"]["CUBRIDGE_HEAD_DIM"] == 192
    res = report["resources"][0]
    assert res["spill_store_bytes"] + res["spill_load_bytes"] <= SPILL_BUDGET_BYTES
    broken = tmp_path / "broken.cu"
    broken.write_text(lib_cu.read_text().replace("const int lane = threadIdx.x % 32;",
                                                 "const int lane = threadIdx.x % ;"))
    reply = _session(build_server(TOOLS), lambda c: c.call_tool("compile",
                                                                 {"source": str(broken)}))
    assert reply.is_error and "nvcc failed" in _text(reply) and "broken.cu" in _text(reply)
