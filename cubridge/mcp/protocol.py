"""The MCP wire protocol over stdio, implemented directly: newline-delimited
JSON-RPC 2.0 messages. Handles initialize, ping, tools/list and tools/call;
notifications get no reply; anything else is a JSON-RPC error."""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Callable, Mapping
from typing import IO, Any

import cubridge

PROTOCOL_VERSION = "2025-06-18"
SUPPORTED_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18")

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = (
    -32700, -32600, -32601, -32602, -32603)


class ToolError(Exception):
    """A tool could not do what was asked; the message goes to the agent as a
    tool result with isError (not a protocol error)."""


class RpcError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class Server:
    def __init__(self, tools: Mapping[str, Any]) -> None:
        self.tools = tools

    def handle(self, message: Any) -> dict[str, Any] | None:
        """One incoming message -> the response (None for a notification)."""
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            return _error(None, INVALID_REQUEST, "not a JSON-RPC 2.0 message")
        msg_id = message.get("id")
        method = message.get("method")
        if method is None:  # a response to us: we send no requests
            return None
        is_notification = "id" not in message
        try:
            result = self.dispatch(method, message.get("params") or {})
        except RpcError as exc:
            return None if is_notification else _error(msg_id, exc.code, str(exc))
        except Exception as exc:  # noqa: BLE001 - the server must survive any handler bug
            detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            return None if is_notification else _error(msg_id, INTERNAL_ERROR, detail)
        if is_notification:
            return None
        return {"jsonrpc": "2.0", "id": msg_id, "result": result}

    def dispatch(self, method: str, params: dict[str, Any]) -> Any:
        if method == "initialize":
            asked = params.get("protocolVersion")
            return {"protocolVersion": asked if asked in SUPPORTED_VERSIONS else PROTOCOL_VERSION,
                    "capabilities": {"tools": {"listChanged": False}},
                    "serverInfo": {"name": "cubridge",
                                   "version": getattr(cubridge, "__version__", "0")},
                    "instructions": "cubridge: lift, transfer and lower attention kernels "
                                    "through CuIR; every tool verifies what it produces."}
        if method in ("ping", "notifications/initialized", "notifications/cancelled"):
            return {}
        if method == "tools/list":
            return {"tools": [{"name": name, "description": tool.description,
                               "inputSchema": tool.schema} for name, tool in self.tools.items()]}
        if method == "tools/call":
            return self.call(params)
        raise RpcError(METHOD_NOT_FOUND, f"method {method!r} not found")

    def call(self, params: dict[str, Any]) -> dict[str, Any]:
        name = params.get("name")
        if name not in self.tools:
            raise RpcError(INVALID_PARAMS, f"unknown tool {name!r}; tools: "
                           f"{', '.join(self.tools)}")
        arguments = params.get("arguments") or {}
        tool = self.tools[name]
        missing = [k for k in tool.schema.get("required", []) if k not in arguments]
        if missing:
            raise RpcError(INVALID_PARAMS, f"tool {name}: missing argument(s) {missing}")
        unknown = sorted(set(arguments) - set(tool.schema.get("properties", {})))
        if unknown:
            raise RpcError(INVALID_PARAMS, f"tool {name}: unknown argument(s) {unknown}")
        try:
            text = tool.run(**arguments)
            is_error = False
        except ToolError as exc:
            text, is_error = str(exc), True
        except Exception as exc:  # noqa: BLE001 - reported to the agent, server goes on
            text, is_error = f"{type(exc).__name__}: {exc}", True
        return {"content": [{"type": "text", "text": text}], "isError": is_error}


def _error(msg_id: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}}


def serve(tools: Mapping[str, Any], stdin: IO[str] | None = None,
          stdout: IO[str] | None = None, log: Callable[[str], None] | None = None) -> int:
    """Serve `tools` (name -> Tool) until stdin closes. Logs go to stderr
    (stdout is the protocol)."""
    server = Server(tools)
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    log(f"cubridge mcp: serving {len(server.tools)} tools on stdio")
    for line in stdin:
        if not line.strip():
            continue
        try:
            message = json.loads(line)
        except json.JSONDecodeError as exc:
            response: dict[str, Any] | None = _error(None, PARSE_ERROR, f"invalid JSON: {exc}")
        else:
            response = server.handle(message)
        if response is not None:
            stdout.write(json.dumps(response) + "\n")
            stdout.flush()
    return 0
