"""Asking until a reply passes a check, feeding each rejection back.

This is the inner loop every stage shares (the stages add what to ask and
how to check): the reply goes to `check`; if the check rejects it with an
error the model can act on (a parse error, a static-check or sandbox error,
an edit error, or a stage's `Rejected`), the reply and the error go back to
the model with the `feedback` template, for at most `rounds` rounds. Each
exchange's verification slot records the outcome.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from cubridge.llm.client import LLMClient
from cubridge.llm.errors import (
    EditError,
    GeneratedCodeError,
    LLMError,
    ReplyParseError,
)
from cubridge.llm.request import Message, assistant, user
from cubridge.llm.templates import render
from cubridge.llm.transcript import Exchange

T = TypeVar("T")


class Rejected(LLMError):
    """A stage's check found the reply wrong (e.g. the IR executor disagrees with
    the spec); the message goes back to the model."""


class RoundsExhausted(LLMError):
    """No reply passed the check within the allowed rounds."""

    def __init__(self, message: str, rounds: list[Round]) -> None:
        super().__init__(message)
        self.rounds = rounds


FEEDBACK_ERRORS = (ReplyParseError, GeneratedCodeError, EditError, Rejected)


@dataclass
class Round:
    exchange: Exchange
    error: str | None  # None: the reply passed


@dataclass
class Outcome(Generic[T]):
    value: T
    exchange: Exchange
    rounds: list[Round] = field(default_factory=list)


def ask_until_valid(
    client: LLMClient,
    messages: Sequence[Message],
    check: Callable[[str], T],
    *,
    rounds: int = 3,
    describe: Callable[[T], Any] | None = None,
    **complete_kwargs: Any,
) -> Outcome[T]:
    """Ask, check, feed back, up to `rounds` times. `describe(value)` gives the
    JSON-able parsed-action slot of the passing exchange."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    conversation = list(messages)
    history: list[Round] = []
    for _ in range(rounds):
        exchange = client.complete(conversation, **complete_kwargs)
        try:
            value = check(exchange.text)
        except FEEDBACK_ERRORS as exc:
            error = str(exc)
            history.append(Round(exchange, error))
            client.record(exchange, verification={"ok": False, "error": error})
            conversation += [assistant(exchange.text), user(render("feedback", error=error))]
            continue
        history.append(Round(exchange, None))
        parsed = describe(value) if describe is not None else None
        client.record(exchange, parsed=parsed, verification={"ok": True})
        return Outcome(value, exchange, history)
    raise RoundsExhausted(
        f"[{client.stage}] no reply passed the check in {rounds} round(s); "
        f"last error: {history[-1].error}",
        history,
    )
