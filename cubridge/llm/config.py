"""LLM configuration from flags, environment and a TOML file.

Precedence, highest first: command-line flags, environment variables, the
config file, built-in defaults. The config file is `--llm-config PATH`, else
`$CUBRIDGE_LLM_CONFIG`, else `$XDG_CONFIG_HOME/cubridge/llm.toml` (by default
`~/.config/cubridge/llm.toml`) when it exists.

Every setting `name` is `name = ...` in the file, `CUBRIDGE_LLM_<NAME>` in
the environment and `--llm-<name>` (underscores as dashes) on the command
line. Retry settings live in a `[retry]` table, prices in `[prices."MODEL"]`
tables and budgets in `[budgets.STAGE]` tables (`[budgets.default]` applies
to every stage); the `--llm-budget-*` flags and `CUBRIDGE_LLM_BUDGET_*`
variables set the default budget.

API keys are read only from the environment, from the variable named by
`api_key_env` (OPENAI_API_KEY / ANTHROPIC_API_KEY by default); a key in the
config file is an error, and no key is ever written to disk or to a log.
"""

from __future__ import annotations

import argparse
import difflib
import os
import shlex
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, TypeVar

from cubridge.llm.accounting import Budget, Price, find_price
from cubridge.llm.errors import ConfigError
from cubridge.llm.retry import RetryPolicy

PROVIDERS = ("openai", "anthropic", "command", "manual", "replay")
DEFAULT_KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
ENV_PREFIX = "CUBRIDGE_LLM_"


@dataclass(frozen=True)
class LLMConfig:
    provider: str | None = None
    model: str | None = None
    base_url: str | None = None  # any OpenAI-compatible server: vLLM, SGLang, Ollama...
    api_key_env: str | None = None  # None: the provider's usual variable
    temperature: float | None = None  # None: the provider's default
    max_tokens: int = 8192
    timeout_s: float = 600.0
    # `openai` provider: the field carrying max_tokens. None: max_completion_tokens
    # for api.openai.com, max_tokens for other servers (vLLM, Ollama...).
    openai_max_tokens_field: str | None = None
    command: tuple[str, ...] = ()  # `command` provider: argv, the prompt goes to stdin
    command_input: str = "text"  # "text" (messages as markdown) or "json"
    manual_dir: Path | None = None  # None: <run dir>/llm/manual
    manual_poll_s: float = 2.0
    manual_timeout_s: float = 86400.0
    replay_dir: Path | None = None
    retry: RetryPolicy = RetryPolicy()
    prices: Mapping[str, Price] = field(default_factory=dict)
    budgets: Mapping[str, Budget] = field(default_factory=dict)
    # Where each setting came from ("flag", "env", "file PATH", "default"), for display.
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)

    @property
    def key_env(self) -> str | None:
        """The environment variable holding the API key, if the provider uses one."""
        return self.api_key_env or DEFAULT_KEY_ENV.get(self.provider or "")

    def budget_for(self, stage: str) -> Budget:
        default = self.budgets.get("default", Budget())
        return self.budgets.get(stage, Budget()).merged_over(default)

    def price_for(self, model: str) -> Price | None:
        return find_price(self.prices, model)

    def require_provider(self) -> str:
        if self.provider is None:
            raise ConfigError(
                "no LLM provider configured: pass --llm-provider, set CUBRIDGE_LLM_PROVIDER or "
                f'write provider = "..." in {default_config_path()} '
                f"(one of {', '.join(PROVIDERS)})"
            )
        return self.provider


# ---- parsing one value -------------------------------------------------------


def _str(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"expected a non-empty string, got {value!r}")
    return value


def _float(value: object) -> float:
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got {value!r}")
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"expected a number, got {value!r}") from None


def _int(value: object) -> int:
    if isinstance(value, bool):
        raise ValueError(f"expected an integer, got {value!r}")
    try:
        number = int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        raise ValueError(f"expected an integer, got {value!r}") from None
    if isinstance(value, float) and value != number:
        raise ValueError(f"expected an integer, got {value!r}")
    return number


_N = TypeVar("_N", int, float)


def _bounded(parse: Callable[[object], _N], kind: str, strict: bool) -> Callable[[object], _N]:
    """A parser that also requires the value > 0 (strict) or >= 0."""

    def check(value: object) -> _N:
        number = parse(value)
        if number < 0 or (strict and number == 0):
            raise ValueError(f"expected {kind} {'>' if strict else '>='} 0, got {value!r}")
        return number

    return check


_nonneg_float = _bounded(_float, "a number", strict=False)
_positive_float = _bounded(_float, "a number", strict=True)
_nonneg_int = _bounded(_int, "an integer", strict=False)
_positive_int = _bounded(_int, "an integer", strict=True)


def _provider(value: object) -> str:
    name = _str(value)
    if name not in PROVIDERS:
        raise ValueError(f"unknown provider {name!r} (one of {', '.join(PROVIDERS)})")
    return name


def _command(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        argv = tuple(shlex.split(value))
    elif isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        argv = tuple(value)
    else:
        raise ValueError(f"expected a command string or a list of strings, got {value!r}")
    if not argv:
        raise ValueError("the command is empty")
    return argv


def _command_input(value: object) -> str:
    mode = _str(value)
    if mode not in ("text", "json"):
        raise ValueError(f"expected 'text' or 'json', got {mode!r}")
    return mode


def _max_tokens_field(value: object) -> str:
    name = _str(value)
    if name not in ("max_tokens", "max_completion_tokens"):
        raise ValueError(f"expected 'max_tokens' or 'max_completion_tokens', got {name!r}")
    return name


def _env_name(value: object) -> str:
    name = _str(value)
    if not name.replace("_", "").isalnum() or name[0].isdigit():
        raise ValueError(f"{name!r} is not an environment variable name")
    return name


def _path(value: object) -> Path:
    return Path(os.path.expanduser(_str(value)))


SCALARS: dict[str, Callable[[object], Any]] = {
    "provider": _provider,
    "model": _str,
    "base_url": _str,
    "api_key_env": _env_name,
    "temperature": _nonneg_float,
    "max_tokens": _positive_int,
    "timeout_s": _positive_float,
    "openai_max_tokens_field": _max_tokens_field,
    "command": _command,
    "command_input": _command_input,
    "manual_dir": _path,
    "manual_poll_s": _positive_float,
    "manual_timeout_s": _positive_float,
    "replay_dir": _path,
}
RETRY_KEYS: dict[str, Callable[[object], Any]] = {
    "max_attempts": _positive_int,
    "backoff_base_s": _nonneg_float,
    "backoff_max_s": _nonneg_float,
}
BUDGET_KEYS: dict[str, Callable[[object], Any]] = {
    "tokens": _nonneg_int,
    "cost_usd": _nonneg_float,
    "calls": _nonneg_int,
}
PRICE_KEYS = ("input_per_mtok", "output_per_mtok")
SECRET_HINT = (
    "API keys are read only from the environment: put the key in an environment "
    'variable and name it with api_key_env = "VARIABLE"'
)


def _parse(where: str, key: str, parser: Callable[[object], Any], value: object) -> Any:
    try:
        return parser(value)
    except ValueError as exc:
        raise ConfigError(f"{where}: {key}: {exc}") from None


def _unknown(where: str, key: str, known: list[str]) -> ConfigError:
    if "key" in key.lower() and key != "api_key_env":
        return ConfigError(f"{where}: {key!r} is not allowed: {SECRET_HINT}")
    close = difflib.get_close_matches(key, known, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return ConfigError(f"{where}: unknown setting {key!r}{hint}; known: {', '.join(known)}")


# ---- the three sources -------------------------------------------------------


def default_config_path(environ: Mapping[str, str] | None = None) -> Path:
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "cubridge" / "llm.toml"


@dataclass
class _Layer:
    """Settings read from one source, already parsed and validated."""

    name: str
    scalars: dict[str, Any] = field(default_factory=dict)
    retry: dict[str, Any] = field(default_factory=dict)
    prices: dict[str, Price] = field(default_factory=dict)
    budgets: dict[str, dict[str, Any]] = field(default_factory=dict)


def _file_layer(path: Path) -> _Layer:
    where = str(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"LLM config file {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{where}: invalid TOML: {exc}") from None
    layer = _Layer(f"file {path}")
    known = [*SCALARS, "retry", "prices", "budgets"]
    for key, value in data.items():
        if key in SCALARS:
            layer.scalars[key] = _parse(where, key, SCALARS[key], value)
        elif key == "retry":
            layer.retry = _table(where, "retry", value, RETRY_KEYS)
        elif key == "prices":
            if not isinstance(value, dict):
                raise ConfigError(f'{where}: prices must be a table of [prices."MODEL"] tables')
            for model, entry in value.items():
                layer.prices[model] = _price(where, model, entry)
        elif key == "budgets":
            if not isinstance(value, dict):
                raise ConfigError(f"{where}: budgets must be a table of [budgets.STAGE] tables")
            for stage, entry in value.items():
                layer.budgets[stage] = _table(where, f"budgets.{stage}", entry, BUDGET_KEYS)
        else:
            raise _unknown(where, key, known)
    return layer


def _table(
    where: str, name: str, value: object, keys: Mapping[str, Callable[[object], Any]]
) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: [{name}] must be a table")
    out = {}
    for key, item in value.items():
        if key not in keys:
            raise _unknown(f"{where} [{name}]", key, list(keys))
        out[key] = _parse(f"{where} [{name}]", key, keys[key], item)
    return out


def _price(where: str, model: str, entry: object) -> Price:
    if not isinstance(entry, dict) or set(entry) != set(PRICE_KEYS):
        raise ConfigError(
            f'{where}: [prices."{model}"] needs exactly input_per_mtok and output_per_mtok'
        )
    values = [_parse(f'{where} [prices."{model}"]', k, _nonneg_float, entry[k]) for k in PRICE_KEYS]
    return Price(*values)


def _env_layer(environ: Mapping[str, str]) -> _Layer:
    layer = _Layer("env")
    for key, parser in SCALARS.items():
        name = ENV_PREFIX + key.upper()
        if environ.get(name):
            layer.scalars[key] = _parse(name, key, parser, environ[name])
    for key, parser in RETRY_KEYS.items():
        name = f"{ENV_PREFIX}RETRY_{key.upper()}"
        if environ.get(name):
            layer.retry[key] = _parse(name, key, parser, environ[name])
    for key, parser in BUDGET_KEYS.items():
        name = f"{ENV_PREFIX}BUDGET_{key.upper()}"
        if environ.get(name):
            layer.budgets.setdefault("default", {})[key] = _parse(name, key, parser, environ[name])
    return layer


def _flag_layer(flags: Mapping[str, Any]) -> _Layer:
    layer = _Layer("flag")
    for key, value in flags.items():
        if value is None:
            continue
        flag = f"--llm-{key.replace('_', '-')}"
        if key in SCALARS:
            layer.scalars[key] = _parse(flag, key, SCALARS[key], value)
        elif key.startswith("retry_") and key[6:] in RETRY_KEYS:
            layer.retry[key[6:]] = _parse(flag, key, RETRY_KEYS[key[6:]], value)
        elif key.startswith("budget_") and key[7:] in BUDGET_KEYS:
            limits = layer.budgets.setdefault("default", {})
            limits[key[7:]] = _parse(flag, key, BUDGET_KEYS[key[7:]], value)
        else:
            raise ConfigError(f"unknown LLM setting {key!r}")
    return layer


def load_config(
    flags: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    config_path: Path | str | None = None,
) -> LLMConfig:
    """The configuration from defaults < config file < environment < flags.

    `flags` maps setting names (`model`, `retry_max_attempts`, `budget_tokens`...)
    to values, None meaning "not given"."""
    environ = os.environ if environ is None else environ
    if config_path is not None:
        path: Path | None = Path(config_path)
    elif environ.get(ENV_PREFIX + "CONFIG"):
        path = Path(os.path.expanduser(environ[ENV_PREFIX + "CONFIG"]))
    else:
        path = default_config_path(environ)
        path = path if path.exists() else None
    layers = [_file_layer(path)] if path is not None else []
    layers += [_env_layer(environ), _flag_layer(flags or {})]

    scalars: dict[str, Any] = {}
    sources: dict[str, str] = {f.name: "default" for f in fields(LLMConfig) if f.name != "sources"}
    retry: dict[str, Any] = {}
    prices: dict[str, Price] = {}
    budgets: dict[str, dict[str, Any]] = {}
    for layer in layers:
        for key, value in layer.scalars.items():
            scalars[key] = value
            sources[key] = layer.name
        if layer.retry:
            retry.update(layer.retry)
            sources["retry"] = layer.name
        if layer.prices:
            prices.update(layer.prices)
            sources["prices"] = layer.name
        for stage, limits in layer.budgets.items():
            budgets.setdefault(stage, {}).update(limits)
            sources["budgets"] = layer.name
    try:
        policy = replace(RetryPolicy(), **retry)
    except ValueError as exc:
        raise ConfigError(f"retry settings: {exc}") from None
    return LLMConfig(
        **scalars,
        retry=policy,
        prices=prices,
        budgets={stage: Budget(**limits) for stage, limits in budgets.items()},
        sources=sources,
    )


# ---- command-line flags --------------------------------------------------------

FLAG_HELP = {
    "provider": f"LLM provider: {', '.join(PROVIDERS)}",
    "model": "model name, as the provider knows it",
    "base_url": "base URL of an OpenAI-compatible server (vLLM, SGLang, Ollama...)",
    "api_key_env": "environment variable holding the API key",
    "temperature": "sampling temperature",
    "max_tokens": "most tokens in one reply",
    "timeout_s": "timeout of one request, in seconds",
    "command": "`command` provider: the command line that reads the prompt on stdin",
    "replay_dir": "`replay` provider: directory of recorded transcripts",
    "manual_dir": "`manual` provider: where prompt and reply files go",
    "manual_timeout_s": "`manual` provider: how long to wait for a reply file",
    "retry_max_attempts": "attempts per call on transient errors (429, 5xx, timeouts)",
    "budget_tokens": "token budget of each stage",
    "budget_cost_usd": "cost budget of each stage, in US dollars",
    "budget_calls": "call budget of each stage",
}


def add_llm_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the --llm-* flags (every one defaults to 'not given')."""
    group = parser.add_argument_group("LLM")
    group.add_argument("--llm-config", metavar="PATH", help="LLM config file (TOML)")
    for key, text in FLAG_HELP.items():
        group.add_argument(f"--llm-{key.replace('_', '-')}", dest=f"llm_{key}", help=text)


def config_from_args(
    args: argparse.Namespace, environ: Mapping[str, str] | None = None
) -> LLMConfig:
    flags = {key: getattr(args, f"llm_{key}", None) for key in FLAG_HELP}
    return load_config(flags, environ, getattr(args, "llm_config", None))
