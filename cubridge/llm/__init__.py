"""cubridge.llm: providers, transcripts, cache, budgets, reply parsing and
sandboxing of generated code, the ground the LLM-driven stages stand on.

    config = load_config()                       # flags < env < file < defaults
    client = LLMClient.from_config(config, run_dir, "lift")
    exchange = client.complete([system(...), user(...)])
    code = code_block(exchange.text, "python")   # ReplyParseError: feed it back
    result = run_generated(code, entry="cubridge.verify...:verify_ir")
    client.record(exchange, parsed=..., verification=...)

README.md in this folder describes configuration, providers and files.
"""

from cubridge.llm.accounting import Budget, Price
from cubridge.llm.client import LLMClient
from cubridge.llm.config import LLMConfig, add_llm_arguments, config_from_args, load_config
from cubridge.llm.edits import Edit, apply_edits, number_lines, parse_edits
from cubridge.llm.errors import (
    BudgetExceeded,
    ConfigError,
    EditError,
    GeneratedCodeError,
    LLMError,
    ManualReplyTimeout,
    ProviderError,
    ReplayMiss,
    ReplyParseError,
    RetriesExhausted,
    SandboxError,
    StaticCheckError,
    TemplateError,
    TransientProviderError,
)
from cubridge.llm.parsing import CodeBlock, code_block, code_blocks
from cubridge.llm.providers import Provider, make_provider
from cubridge.llm.request import Message, Reply, Request, Usage, assistant, system, user
from cubridge.llm.retry import RetryPolicy
from cubridge.llm.sandbox import SandboxLimits, SandboxResult, check_source, run_generated
from cubridge.llm.transcript import Exchange, TranscriptStore, read_exchanges, record_fixture

__all__ = [
    "Budget", "BudgetExceeded", "CodeBlock", "ConfigError", "Edit", "EditError", "Exchange",
    "GeneratedCodeError", "LLMClient", "LLMConfig", "LLMError", "ManualReplyTimeout", "Message",
    "Price", "Provider", "ProviderError", "ReplayMiss", "Reply", "ReplyParseError", "Request",
    "RetriesExhausted", "RetryPolicy", "SandboxError", "SandboxLimits", "SandboxResult",
    "StaticCheckError", "TemplateError", "TranscriptStore", "TransientProviderError", "Usage",
    "add_llm_arguments", "apply_edits", "assistant", "check_source", "code_block", "code_blocks",
    "config_from_args", "load_config", "make_provider", "number_lines", "parse_edits",
    "read_exchanges", "record_fixture", "run_generated", "system", "user",
]  # fmt: skip
