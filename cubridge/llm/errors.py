"""Errors of the LLM layer. Every message says what went wrong and where, in
words a stage loop can feed back to the model or show to the user."""

from __future__ import annotations


class LLMError(Exception):
    """Base of every error raised by cubridge.llm."""


class ConfigError(LLMError):
    """The LLM configuration (flags, environment, config file) is invalid."""


class ProviderError(LLMError):
    """A provider call failed for good (bad request, bad key, unknown model...).

    `status` is the HTTP status when there was one."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class TransientProviderError(ProviderError):
    """A provider call failed in a way that may succeed if tried again: HTTP
    429 or 5xx, a timeout, a dropped connection. `retry_after_s` is the
    server's Retry-After hint, when it gave one."""

    def __init__(
        self, message: str, *, status: int | None = None, retry_after_s: float | None = None
    ) -> None:
        super().__init__(message, status=status)
        self.retry_after_s = retry_after_s


class RetriesExhausted(ProviderError):
    """Every attempt allowed by the retry policy failed transiently."""


class ReplayMiss(LLMError):
    """The replay provider has no recorded reply for a request."""


class ManualReplyTimeout(LLMError):
    """Nobody wrote the reply file of the manual provider in time."""


class BudgetExceeded(LLMError):
    """A stage used up its token, cost or call budget. Raised before a call
    is made, so everything already written stays as it was."""


class ReplyParseError(LLMError):
    """A reply does not contain what the stage asked for (a code block, edit
    actions); the message is meant to be fed back to the model."""


class EditError(LLMError):
    """Edit actions that cannot be applied to the file they target."""


class TemplateError(LLMError):
    """A prompt template is missing, or a substitution variable is missing or unused."""


class GeneratedCodeError(LLMError):
    """Generated code was rejected: by the static check or when it ran."""


class StaticCheckError(GeneratedCodeError):
    """Generated code uses something the allow-list forbids (or is not valid
    Python). `violations` holds (line, message) pairs."""

    def __init__(self, message: str, violations: list[tuple[int, str]]) -> None:
        super().__init__(message)
        self.violations = violations


class SandboxError(GeneratedCodeError):
    """Generated code failed in the sandbox process.

    kind: "exception" (it raised), "timeout" (wall clock or CPU limit),
    "memory" (the address-space limit), "crash" (killed by a signal or died
    without a result). `line` is the line of the generated file where it
    failed, when known."""

    def __init__(self, message: str, *, kind: str, line: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.line = line
