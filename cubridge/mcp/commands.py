"""`cubridge mcp`: serve cubridge's tools over MCP (stdio, or streamable HTTP)."""

from __future__ import annotations

import argparse
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "mcp", help="MCP server (stdio, or streamable HTTP): cubridge's tools for a coding agent",
        description="Serve the Model Context Protocol, built on the official MCP Python SDK "
        "(pip install 'cubridge[llm]'): on stdin/stdout by default (configure your agent to "
        "run `cubridge mcp`), or over streamable HTTP with --http. Tools: list_kernels, "
        "show_ir, verify_ir, diff_ir, lower, compile, verify_gpu, benchmark.")
    p.add_argument("--http", action="store_true", help="serve streamable HTTP, not stdio")
    p.add_argument("--host", default="127.0.0.1", help="HTTP host (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8765, help="HTTP port (default 8765)")
    p.add_argument("--path", default="/mcp", help="HTTP endpoint path (default /mcp)")
    p.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> int:
    from cubridge.mcp.server import INSTALL_HINT, serve_http, serve_stdio
    from cubridge.mcp.tools import TOOLS

    try:
        import mcp  # noqa: F401
    except ImportError:
        print(f"cubridge mcp: {INSTALL_HINT}", file=sys.stderr)
        return 2
    if args.http:
        return serve_http(TOOLS, args.host, args.port, args.path)
    return serve_stdio(TOOLS)
