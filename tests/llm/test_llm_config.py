"""Configuration: precedence flags > environment > file > defaults, strict
validation with errors that name the source, and no secrets in files."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

from cubridge.llm import (
    Budget,
    ConfigError,
    Price,
    add_llm_arguments,
    config_from_args,
    load_config,
)
from cubridge.llm.providers import api_key, make_provider

FILE = """
provider = "anthropic"
model = "file-model"
temperature = 0.7
max_tokens = 1000
command = "llm -m x"

[retry]
max_attempts = 7
backoff_base_s = 0.5

[prices."claude-*"]
input_per_mtok = 3
output_per_mtok = 15

[prices."claude-opus-*"]
input_per_mtok = 15
output_per_mtok = 75

[budgets.default]
calls = 50
tokens = 100000

[budgets.lift]
calls = 5
"""


# No user config file may leak into these tests.
NOCONF = {"XDG_CONFIG_HOME": "/nonexistent/cubridge-test"}


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "llm.toml"
    path.write_text(text)
    return path


def test_precedence_flags_over_env_over_file_over_defaults(tmp_path):
    path = write(tmp_path, FILE)
    env = {"CUBRIDGE_LLM_MODEL": "env-model", "CUBRIDGE_LLM_MAX_TOKENS": "2000"}
    config = load_config({"model": "flag-model"}, env, path)
    assert config.model == "flag-model" and config.sources["model"] == "flag"
    assert config.max_tokens == 2000 and config.sources["max_tokens"] == "env"
    assert config.provider == "anthropic" and config.sources["provider"] == f"file {path}"
    assert config.temperature == 0.7 and config.timeout_s == 600.0
    assert config.sources["timeout_s"] == "default"
    assert config.command == ("llm", "-m", "x")
    assert config.retry.max_attempts == 7 and config.retry.backoff_base_s == 0.5
    assert config.retry.backoff_max_s == 60.0
    assert config.key_env == "ANTHROPIC_API_KEY"


def test_budgets_merge_stage_over_default_and_flags_over_file(tmp_path):
    path = write(tmp_path, FILE)
    config = load_config({}, {}, path)
    assert config.budget_for("lift") == Budget(tokens=100000, calls=5)
    assert config.budget_for("lower") == Budget(tokens=100000, calls=50)
    flagged = load_config({"budget_calls": "9", "budget_cost_usd": "2.5"}, {}, path)
    assert flagged.budget_for("lower") == Budget(tokens=100000, cost_usd=2.5, calls=9)
    assert flagged.budget_for("lift").calls == 5  # the stage's own limit still wins


def test_prices_most_specific_glob_wins(tmp_path):
    config = load_config({}, {}, write(tmp_path, FILE))
    assert config.price_for("claude-opus-4") == Price(15, 75)
    assert config.price_for("claude-sonnet-4") == Price(3, 15)
    assert config.price_for("gpt-4o") is None


def test_config_file_location_from_env_and_xdg(tmp_path):
    path = write(tmp_path, 'provider = "replay"\n')
    assert load_config({}, {"CUBRIDGE_LLM_CONFIG": str(path)}).provider == "replay"
    xdg = tmp_path / "xdg" / "cubridge"
    xdg.mkdir(parents=True)
    (xdg / "llm.toml").write_text('provider = "manual"\n')
    assert load_config({}, {"XDG_CONFIG_HOME": str(tmp_path / "xdg")}).provider == "manual"
    assert load_config({}, {"XDG_CONFIG_HOME": str(tmp_path / "none")}).provider is None
    with pytest.raises(ConfigError, match="does not exist"):
        load_config({}, {}, tmp_path / "missing.toml")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('api_key = "sk-123"\n', "'api_key' is not allowed: API keys are read only from the env"),
        ('openai_key = "sk-123"\n', "'openai_key' is not allowed"),
        ('modle = "x"\n', "unknown setting 'modle' (did you mean 'model'?)"),
        ('provider = "gemini"\n', "provider: unknown provider 'gemini'"),
        ('temperature = "hot"\n', "temperature: expected a number, got 'hot'"),
        ("max_tokens = 0\n", "max_tokens: expected an integer > 0"),
        ("[retry]\nmax_attempt = 3\n", "[retry]: unknown setting 'max_attempt'"),
        ('[prices."m"]\ninput_per_mtok = 1\n', "needs exactly input_per_mtok and output_per_mtok"),
        ("[budgets.lift]\ncalls = -1\n", "[budgets.lift]: calls: expected an integer >= 0, got -1"),
        ("provider = \n", "invalid TOML"),
    ],
)
def test_file_errors_name_file_and_setting(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_config({}, {}, path)
    assert message in str(err.value) and str(path) in str(err.value)


def test_env_and_flag_errors_name_their_source(tmp_path):
    with pytest.raises(ConfigError, match="CUBRIDGE_LLM_TIMEOUT_S: timeout_s: expected a number"):
        load_config({}, {"CUBRIDGE_LLM_TIMEOUT_S": "soon"}, None)
    with pytest.raises(ConfigError, match="--llm-budget-calls: budget_calls: expected an integer"):
        load_config({"budget_calls": "many"}, {"XDG_CONFIG_HOME": str(tmp_path)})


def test_argparse_flags_round_trip(tmp_path):
    parser = argparse.ArgumentParser()
    add_llm_arguments(parser)
    args = parser.parse_args(
        ["--llm-provider", "openai", "--llm-model", "m", "--llm-retry-max-attempts", "2",
         "--llm-config", str(write(tmp_path, "temperature = 0.1\n"))]
    )  # fmt: skip
    config = config_from_args(args, NOCONF)
    assert (config.provider, config.model, config.retry.max_attempts) == ("openai", "m", 2)
    assert config.temperature == 0.1


def test_api_key_only_from_the_named_variable(tmp_path):
    config = load_config({"provider": "anthropic", "model": "m", "api_key_env": "MY_KEY"}, NOCONF)
    assert api_key(config, {"MY_KEY": "sk-abcdefgh"}) == "sk-abcdefgh"
    with pytest.raises(ConfigError, match="set the environment variable MY_KEY"):
        api_key(config, {"ANTHROPIC_API_KEY": "not this one"})
    # A local OpenAI-compatible server may run without a key.
    local = load_config({"provider": "openai", "model": "m", "base_url": "http://x/v1"}, NOCONF)
    assert api_key(local, {}) == "EMPTY"
    official = load_config({"provider": "openai", "model": "m"}, NOCONF)
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        api_key(official, {})


def test_provider_factory_errors():
    with pytest.raises(ConfigError, match="no LLM provider configured"):
        make_provider(load_config({}, NOCONF))
    with pytest.raises(ConfigError, match="needs a model"):
        make_provider(load_config({"provider": "openai"}, NOCONF))
    with pytest.raises(ConfigError, match="needs a command"):
        make_provider(load_config({"provider": "command"}, NOCONF))
    with pytest.raises(ConfigError, match="needs a transcript directory"):
        make_provider(load_config({"provider": "replay"}, NOCONF))


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_a_missing_client_library_says_which_package_to_install(kind, monkeypatch):
    monkeypatch.setitem(sys.modules, kind, None)  # as if not installed: import raises
    config = load_config({"provider": kind, "model": "m", "base_url": "http://x/v1"}, NOCONF)
    with pytest.raises(ConfigError) as err:
        make_provider(config, environ={"OPENAI_API_KEY": "k", "ANTHROPIC_API_KEY": "k"})
    assert f"provider {kind!r} needs the {kind!r} package" in str(err.value)
    assert "pip install 'cubridge[llm]'" in str(err.value)
