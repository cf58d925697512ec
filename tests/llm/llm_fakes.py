"""Helpers of the LLM tests: a local HTTP server speaking the OpenAI
chat-completions and Anthropic messages wire protocols with scripted replies,
for driving the real client libraries without a network, and a client factory."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from cubridge.llm import Exchange, LLMClient, load_config, system, user
from cubridge.llm.retry import RetryPolicy

# Tiny backoff: tests exercise retries without waiting.
FAST_RETRY = RetryPolicy(max_attempts=4, backoff_base_s=0.001, backoff_max_s=0.01)


@dataclass
class Scripted:
    """One scripted answer: a reply text, or an HTTP error status, optionally
    after a delay (to provoke client timeouts)."""

    text: str | None = None
    status: int = 200
    delay_s: float = 0.0
    retry_after: str | None = None


@dataclass
class FakeLLMServer:
    script: list[Scripted] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    url: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def reply(self, *texts: str) -> None:
        self.script += [Scripted(text=t) for t in texts]

    def fail(self, status: int, *, retry_after: str | None = None) -> None:
        self.script.append(Scripted(status=status, retry_after=retry_after))

    def hang(self, seconds: float, then: str | None = None) -> None:
        self.script.append(Scripted(text=then or "late", delay_s=seconds))

    @property
    def count(self) -> int:
        return len(self.requests)

    def next(self, record: dict[str, Any]) -> Scripted:
        with self._lock:
            self.requests.append(record)
            if not self.script:
                return Scripted(status=500, text="fake server: script exhausted")
            return self.script.pop(0)


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


def _openai_body(model: str, text: str, prompt: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": _tokens(prompt),
            "completion_tokens": _tokens(text),
            "total_tokens": _tokens(prompt) + _tokens(text),
        },
    }


def _text(content: Any) -> str:
    """A message's text: a string, or the text of its content blocks."""
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content if isinstance(b, dict))


def _anthropic_body(model: str, text: str, prompt: str) -> dict[str, Any]:
    return {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": _tokens(prompt), "output_tokens": _tokens(text)},
    }


def _make_handler(server: FakeLLMServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # keep test output quiet
            pass

        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            length = int(self.headers.get("content-length", 0))
            body = json.loads(self.rfile.read(length) or b"{}")
            record = {
                "path": self.path,
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "body": body,
            }
            step = server.next(record)
            if step.delay_s:
                time.sleep(step.delay_s)
            anthropic = self.path.endswith("/messages")
            if step.status != 200:
                message = step.text or f"scripted HTTP {step.status}"
                if anthropic:
                    payload = {"type": "error", "error": {"type": "api_error", "message": message}}
                else:
                    payload = {"error": {"message": message, "type": "server_error", "code": None}}
                self._send(step.status, payload, step.retry_after)
                return
            messages = body.get("messages", [])
            prompt = _text(body.get("system") or "") + "".join(
                _text(m["content"]) for m in messages
            )
            make = _anthropic_body if anthropic else _openai_body
            self._send(200, make(body.get("model", "fake"), step.text or "", prompt), None)

        def _send(self, status: int, payload: dict[str, Any], retry_after: str | None) -> None:
            data = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                if retry_after is not None:
                    self.send_header("retry-after", retry_after)
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client timed out and left

    return Handler


@pytest.fixture
def llm_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLLMServer]:
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(var, raising=False)
    fake = FakeLLMServer()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(fake))
    httpd.daemon_threads = True
    fake.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield fake
    httpd.shutdown()
    httpd.server_close()


SECRET = "sk-test-0123456789-SECRET-KEY"
KINDS = ["openai", "anthropic"]


def make_client(
    kind: str, server: FakeLLMServer, run_dir: Path, *, stage: str = "lift", **flags: object
) -> LLMClient:
    base = f"{server.url}/v1" if kind == "openai" else server.url
    environ = {"TEST_LLM_KEY": SECRET, "XDG_CONFIG_HOME": str(run_dir / "no-config")}
    config = load_config(
        {
            "provider": kind,
            "model": f"{kind}-test-model",
            "base_url": base,
            "api_key_env": "TEST_LLM_KEY",
            "timeout_s": flags.pop("timeout_s", 5),
            **flags,
        },
        environ,
    )
    client = LLMClient.from_config(config, run_dir, stage, environ=environ, log=lambda _: None)
    client.retry = FAST_RETRY
    return client


def ask(client: LLMClient, text: str = "Lift this kernel.", **kwargs: object) -> Exchange:
    return client.complete([system("You are an expert."), user(text)], **kwargs)
