"""cubridge.mcp: a Model Context Protocol server (stdio, JSON-RPC 2.0) that
exposes cubridge's tools to a coding agent, so the agent can drive lift,
transfer and lower itself: list kernels, show an IR, execute and verify an IR
against a spec, diff IRs, lower (hook codegen or edit actions), compile,
verify on the GPU and benchmark.

Run it with `cubridge mcp`; an MCP client (Claude Code, Cursor...) starts it
as a subprocess and speaks newline-delimited JSON-RPC on its stdin/stdout.
"""

from cubridge.mcp.protocol import serve
from cubridge.mcp.tools import TOOLS

__all__ = ["TOOLS", "serve"]
