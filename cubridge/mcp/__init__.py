"""cubridge.mcp: a Model Context Protocol server, built on the official MCP
Python SDK, that exposes cubridge's tools to a coding agent, so the agent can
drive lift, transfer and lower itself: list kernels, show an IR, execute and
verify an IR against a spec, diff IRs, lower (hook codegen or edit actions),
compile, verify on the GPU and benchmark.

Run it with `cubridge mcp` (stdio: an MCP client such as Claude Code or Cursor
starts it as a subprocess) or `cubridge mcp --http` (streamable HTTP). The SDK
is in the `llm` extra: pip install 'cubridge[llm]'.
"""

from cubridge.mcp.tools import TOOLS, Tool, ToolError

__all__ = ["TOOLS", "Tool", "ToolError"]
