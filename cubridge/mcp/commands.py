"""`cubridge mcp`: serve cubridge's tools over MCP (stdio)."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "mcp", help="MCP server on stdio: cubridge's tools for a coding agent",
        description="Serve the Model Context Protocol on stdin/stdout (newline-delimited "
        "JSON-RPC). Tools: list_kernels, show_ir, verify_ir, diff_ir, lower, compile, "
        "verify_gpu, benchmark. Configure your agent to run `cubridge mcp`.")
    p.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> int:
    from cubridge.mcp.protocol import serve
    from cubridge.mcp.tools import TOOLS

    return serve(TOOLS)
