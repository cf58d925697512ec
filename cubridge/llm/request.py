"""What goes to a model and what comes back: messages, requests, replies.

A `Request` is hashed by content (messages and sampling parameters, plus the
sample index so that best-of-k draws are distinct requests). That hash keys
the replay provider; together with the provider and model it keys the cache.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Role = Literal["system", "user", "assistant"]
ROLES: tuple[str, ...] = ("system", "user", "assistant")


@dataclass(frozen=True)
class Message:
    role: Role
    content: str

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"message role {self.role!r} is not one of {', '.join(ROLES)}")
        if not isinstance(self.content, str):
            raise TypeError(f"{self.role} message content must be str, not {type(self.content)}")

    def to_json(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


def system(content: str) -> Message:
    return Message("system", content)


def user(content: str) -> Message:
    return Message("user", content)


def assistant(content: str) -> Message:
    return Message("assistant", content)


@dataclass(frozen=True)
class Request:
    """One completion request. `sample` tells apart the k draws of best-of-k."""

    messages: tuple[Message, ...]
    temperature: float | None = None
    max_tokens: int = 8192
    stop: tuple[str, ...] = ()
    sample: int = 0

    def __post_init__(self) -> None:
        if not self.messages:
            raise ValueError("a request needs at least one message")
        if not any(m.role == "user" for m in self.messages):
            raise ValueError("a request needs at least one user message")
        if self.max_tokens <= 0:
            raise ValueError(f"max_tokens must be positive, got {self.max_tokens}")
        if self.sample < 0:
            raise ValueError(f"sample must be >= 0, got {self.sample}")

    @classmethod
    def of(
        cls,
        messages: Sequence[Message],
        *,
        temperature: float | None = None,
        max_tokens: int = 8192,
        stop: Sequence[str] | None = None,
        sample: int = 0,
    ) -> Request:
        return cls(tuple(messages), temperature, max_tokens, tuple(stop or ()), sample)

    def to_json(self) -> dict[str, Any]:
        return {
            "messages": [m.to_json() for m in self.messages],
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "stop": list(self.stop),
            "sample": self.sample,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Request:
        return cls(
            tuple(Message(m["role"], m["content"]) for m in data["messages"]),
            data.get("temperature"),
            int(data["max_tokens"]),
            tuple(data.get("stop") or ()),
            int(data.get("sample", 0)),
        )

    @property
    def hash(self) -> str:
        """Content hash of the request (hex sha256), independent of provider and model."""
        return _sha256_json(self.to_json())

    @property
    def turn_hash(self) -> str:
        """Hash of the request without the user turns after the model's first reply:
        the opening prompt, the model's own replies so far and the sampling
        parameters. Two requests with equal turn hashes are the same turn of the
        same conversation, whatever the tool fed back in between (a compiler's
        or a GPU's words, which differ from machine to machine)."""
        data = self.to_json()
        first_reply = next((i for i, m in enumerate(self.messages) if m.role == "assistant"),
                           len(self.messages))
        data["messages"] = [m.to_json() for i, m in enumerate(self.messages)
                            if i < first_reply or m.role == "assistant"]
        data["turn"] = sum(m.role == "assistant" for m in self.messages)
        return _sha256_json(data)

    def prompt_chars(self) -> int:
        return sum(len(m.content) for m in self.messages)


def cache_key(provider: str, model: str, request_hash: str) -> str:
    """The cache key of a request sent to one provider kind and model."""
    return _sha256_json({"provider": provider, "model": model, "request": request_hash})


def _sha256_json(obj: object) -> str:
    text = json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class Usage:
    """Tokens of one exchange. `estimated` is true when the provider reported
    none and the counts were estimated from characters (about 4 per token)."""

    input_tokens: int = 0
    output_tokens: int = 0
    estimated: bool = False

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @classmethod
    def estimate(cls, prompt_chars: int, reply_chars: int) -> Usage:
        return cls(-(-prompt_chars // 4), -(-reply_chars // 4), estimated=True)

    def to_json(self) -> dict[str, Any]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "estimated": self.estimated,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Usage:
        return cls(
            int(data.get("input_tokens", 0)),
            int(data.get("output_tokens", 0)),
            bool(data.get("estimated", False)),
        )


@dataclass(frozen=True)
class Reply:
    """A model's answer. `raw` is the provider's response body as JSON-able data
    (never headers: nothing secret goes in it). `label` says where a reply came
    from when it is not a live model's output (written by hand, replayed)."""

    text: str
    usage: Usage
    model: str
    latency_s: float
    finish_reason: str | None = None
    raw: Mapping[str, Any] = field(default_factory=dict)
    label: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "usage": self.usage.to_json(),
            "model": self.model,
            "latency_s": self.latency_s,
            "finish_reason": self.finish_reason,
            "raw": dict(self.raw),
            "label": self.label,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Reply:
        return cls(
            text=data["text"],
            usage=Usage.from_json(data.get("usage") or {}),
            model=data.get("model", ""),
            latency_s=float(data.get("latency_s", 0.0)),
            finish_reason=data.get("finish_reason"),
            raw=data.get("raw") or {},
            label=data.get("label"),
        )
