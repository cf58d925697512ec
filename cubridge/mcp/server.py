"""The MCP server, built on the official MCP Python SDK (`mcp`, in the `llm`
install extra): the low-level `Server` with cubridge's tools (cubridge/mcp/tools.py)
and their hand-written input schemas, served over stdio or streamable HTTP.

A tool's failure (ToolError, or any exception) comes back as a tool result with
isError, which the agent reads and acts on; an unknown tool or arguments outside
the tool's schema are protocol errors (invalid params). Tools run in a worker
thread, so a long compile or GPU check leaves the server answering (pings,
other sessions over HTTP); generated kernels never run in the server's process
(verify_gpu and benchmark use the watched child of cubridge.llm_path.gpu_check).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

import cubridge
from cubridge.mcp.tools import Tool, ToolError

NAME = "cubridge"
INSTRUCTIONS = ("cubridge: lift, transfer and lower attention kernels through CuIR; every tool "
                "verifies what it produces.")
INVALID_PARAMS = -32602
INSTALL_HINT = "cubridge mcp needs the MCP Python SDK: pip install 'cubridge[llm]'"


def _sdk() -> Any:
    try:
        import mcp.server.lowlevel as lowlevel
        import mcp_types
    except ImportError as exc:
        raise RuntimeError(f"{INSTALL_HINT} ({exc})") from exc
    return lowlevel, mcp_types


def check_arguments(name: str, tool: Tool, arguments: Mapping[str, Any]) -> None:
    """Required present, nothing outside the schema; MCPError(invalid params) otherwise."""
    from mcp import MCPError

    missing = [k for k in tool.schema.get("required", []) if k not in arguments]
    if missing:
        raise MCPError(INVALID_PARAMS, f"tool {name}: missing argument(s) {missing}")
    unknown = sorted(set(arguments) - set(tool.schema.get("properties", {})))
    if unknown:
        raise MCPError(INVALID_PARAMS, f"tool {name}: unknown argument(s) {unknown}")


def run_tool(tool: Tool, arguments: Mapping[str, Any]) -> tuple[str, bool]:
    """(text, is_error) of one call; never raises for the tool's failures."""
    try:
        return tool.run(**arguments), False
    except ToolError as exc:
        return str(exc), True
    except Exception as exc:  # noqa: BLE001 - reported to the agent, the server goes on
        return f"{type(exc).__name__}: {exc}", True


def build_server(tools: Mapping[str, Tool]) -> Any:
    """An SDK `Server` serving `tools` (name -> Tool)."""
    lowlevel, types = _sdk()
    import anyio
    from mcp import MCPError

    listing = [types.Tool(name=name, description=tool.description, input_schema=tool.schema)
               for name, tool in tools.items()]

    async def list_tools(ctx: Any, params: Any) -> Any:
        return types.ListToolsResult(tools=listing)

    async def call_tool(ctx: Any, params: Any) -> Any:
        name, arguments = params.name, dict(params.arguments or {})
        if name not in tools:
            raise MCPError(INVALID_PARAMS, f"unknown tool {name!r}; tools: {', '.join(tools)}")
        check_arguments(name, tools[name], arguments)
        text, is_error = await anyio.to_thread.run_sync(run_tool, tools[name], arguments)
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                    is_error=is_error)

    return lowlevel.Server(NAME, version=getattr(cubridge, "__version__", "0"),
                           instructions=INSTRUCTIONS, on_list_tools=list_tools,
                           on_call_tool=call_tool,
                           get_tool_input_schema=lambda n: tools[n].schema if n in tools
                           else None)


def serve_stdio(tools: Mapping[str, Tool], log: Callable[[str], None] | None = None) -> int:
    """Serve on stdin/stdout until the client closes them (logs go to stderr)."""
    import anyio
    from mcp.server.stdio import stdio_server

    server = build_server(tools)
    log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    log(f"cubridge mcp: serving {len(tools)} tools on stdio")

    async def main() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(main)
    return 0


def serve_http(tools: Mapping[str, Tool], host: str, port: int, path: str = "/mcp",
               log: Callable[[str], None] | None = None) -> int:
    """Serve streamable HTTP at http://HOST:PORT/PATH until interrupted."""
    import uvicorn

    server = build_server(tools)
    app = server.streamable_http_app(streamable_http_path=path, host=host)
    log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    log(f"cubridge mcp: serving {len(tools)} tools at http://{host}:{port}{path}")
    uvicorn.run(app, host=host, port=port, log_level="warning")
    return 0
