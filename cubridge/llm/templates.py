"""Prompt templates: markdown files in a package's `prompts/` folder
(cubridge/llm/prompts/ by default; the LLM path keeps its stages' prompts in
cubridge/llm_path/prompts/), with `{{name}}` placeholders. Substitution is
strict and single-pass: a placeholder without a value and a value without a
placeholder are both errors, and substituted text is never scanned again (kernel
source full of braces is safe)."""

from __future__ import annotations

import re
from importlib import resources

from cubridge.llm.errors import TemplateError

_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
_NAME = re.compile(r"^[a-z0-9_]+$")


DEFAULT_PACKAGE = "cubridge.llm"


def template_names(package: str = DEFAULT_PACKAGE) -> list[str]:
    folder = resources.files(package) / "prompts"
    return sorted(p.name[:-3] for p in folder.iterdir() if p.name.endswith(".md"))


def load_template(name: str, package: str = DEFAULT_PACKAGE) -> str:
    if not _NAME.match(name):
        raise TemplateError(f"template name {name!r} must be lower-case letters, digits and '_'")
    path = resources.files(package) / "prompts" / f"{name}.md"
    if not path.is_file():
        folder = package.replace(".", "/")
        raise TemplateError(
            f"no prompt template {name!r} ({folder}/prompts/{name}.md); "
            f"available: {', '.join(template_names(package))}"
        )
    return path.read_text()


def substitute(text: str, variables: dict[str, str], *, name: str = "<template>") -> str:
    """Fill `{{var}}` placeholders; every placeholder needs a value and every value a use."""
    used: set[str] = set()
    missing: list[str] = []

    def fill(match: re.Match[str]) -> str:
        var = match[1]
        if var not in variables:
            line = text.count("\n", 0, match.start()) + 1
            missing.append(f"{var} (line {line})")
            return match[0]
        used.add(var)
        value = variables[var]
        if not isinstance(value, str):
            raise TemplateError(f"template {name}: variable {var} must be str, not {type(value)}")
        return value

    result = _PLACEHOLDER.sub(fill, text)
    if missing:
        raise TemplateError(f"template {name}: no value for {', '.join(missing)}")
    unused = sorted(set(variables) - used)
    if unused:
        raise TemplateError(f"template {name}: unused variable(s) {', '.join(unused)}")
    return result


def render(name: str, package: str = DEFAULT_PACKAGE, **variables: str) -> str:
    """The template `name` (of `package`'s prompts/) with its placeholders filled."""
    return substitute(load_template(name, package), variables, name=name)
