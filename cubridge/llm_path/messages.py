"""Building the stages' prompts from the template files beside them
(cubridge/llm_path/prompts/)."""

from __future__ import annotations

import functools
from pathlib import Path

from cubridge.ir import docgen
from cubridge.llm import Message, number_lines, system, user
from cubridge.llm.templates import load_template, render

PROMPTS_PACKAGE = "cubridge.llm_path"
_REPO_MANUAL = Path(__file__).resolve().parents[2] / "docs" / "cuir.md"


@functools.cache
def cuir_manual() -> str:
    """docs/cuir.md (generated from the CuIR docstrings); regenerated when the
    package runs outside its checkout."""
    if _REPO_MANUAL.is_file():
        return _REPO_MANUAL.read_text()
    return docgen.render()


def stage_messages(template: str, **variables: str) -> list[Message]:
    """The system prompt (role, rules, the CuIR manual) and the stage's task."""
    return [system(render("stage_system", PROMPTS_PACKAGE, manual=cuir_manual())),
            user(render(template, PROMPTS_PACKAGE, **variables))]


def numbered(source: str) -> str:
    return "```cuda\n" + number_lines(source) + "```"


def edit_actions_help() -> str:
    return load_template("edit_actions", PROMPTS_PACKAGE)
