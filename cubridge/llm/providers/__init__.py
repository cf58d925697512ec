"""Model providers behind one interface (`Provider.complete(Request) -> Reply`)
and the factory that builds one from an `LLMConfig`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from cubridge.llm.config import LLMConfig
from cubridge.llm.errors import ConfigError
from cubridge.llm.providers.base import Provider, render_messages

__all__ = ["Provider", "make_provider", "api_key", "render_messages"]

# Placeholder key for OpenAI-compatible local servers that check none (vLLM's convention).
NO_KEY = "EMPTY"


def api_key(config: LLMConfig, environ: Mapping[str, str] | None = None) -> str | None:
    """The API key from the environment variable the config names, or None for
    providers that take none. A local OpenAI-compatible server (base_url set)
    may run without one."""
    environ = os.environ if environ is None else environ
    name = config.key_env
    if name is None:
        return None
    key = environ.get(name)
    if key:
        return key
    if config.provider == "openai" and config.base_url:
        return NO_KEY
    raise ConfigError(
        f"provider {config.provider!r} needs an API key: set the environment variable {name} "
        f"(or name another one with --llm-api-key-env / api_key_env)"
    )


def _require_sdk(kind: str) -> None:
    """The provider's client library (the `llm` extra), or a ConfigError saying how to get it."""
    try:
        __import__(kind)
    except ImportError as exc:
        raise ConfigError(
            f"provider {kind!r} needs the {kind!r} package, which is not installed ({exc}): "
            f"pip install 'cubridge[llm]' (or pip install {kind})"
        ) from None


def make_provider(
    config: LLMConfig, *, run_dir: Path | None = None, environ: Mapping[str, str] | None = None
) -> Provider:
    kind = config.require_provider()
    if kind in ("openai", "anthropic") and not config.model:
        raise ConfigError(f"provider {kind!r} needs a model: pass --llm-model or set model")
    if kind in ("openai", "anthropic"):
        _require_sdk(kind)
    if kind == "openai":
        from cubridge.llm.providers.openai_chat import OpenAIChatProvider

        return OpenAIChatProvider(
            config.model or "",
            api_key=api_key(config, environ) or NO_KEY,
            base_url=config.base_url,
            timeout_s=config.timeout_s,
            max_tokens_field=config.openai_max_tokens_field,
        )
    if kind == "anthropic":
        from cubridge.llm.providers.anthropic_messages import AnthropicMessagesProvider

        return AnthropicMessagesProvider(
            config.model or "",
            api_key=api_key(config, environ) or "",
            base_url=config.base_url,
            timeout_s=config.timeout_s,
        )
    if kind == "command":
        from cubridge.llm.providers.command import CommandProvider

        if not config.command:
            raise ConfigError(
                "provider 'command' needs a command: pass --llm-command or set command"
            )
        return CommandProvider(
            config.command,
            model=config.model,
            input_mode=config.command_input,
            timeout_s=config.timeout_s,
        )
    if kind == "manual":
        from cubridge.llm.providers.manual import ManualProvider

        directory = config.manual_dir
        if directory is None:
            if run_dir is None:
                raise ConfigError("provider 'manual' needs manual_dir or a run directory")
            directory = Path(run_dir) / "llm" / "manual"
        return ManualProvider(
            directory,
            model=config.model or "manual",
            poll_s=config.manual_poll_s,
            timeout_s=config.manual_timeout_s,
        )
    if kind == "replay":
        from cubridge.llm.providers.replay import ReplayProvider

        if config.replay_dir is None:
            raise ConfigError("provider 'replay' needs a transcript directory: --llm-replay-dir")
        return ReplayProvider(config.replay_dir, model=config.model or "replay")
    raise ConfigError(f"unknown provider {kind!r}")
