"""Building the stages' prompts from the template files beside them
(cubridge/llm_path/prompts/): a system prompt per kind of stage (CuIR-writing
stages get the parts of the CuIR manual their program uses; the lowering gets
none) and the stage's task."""

from __future__ import annotations

from collections.abc import Mapping

from cubridge.llm import Message, number_lines, system, user
from cubridge.llm.templates import load_template, render

PROMPTS_PACKAGE = "cubridge.llm_path"


def stage_messages(template: str, system_template: str = "stage_system",
                   system_vars: Mapping[str, str] | None = None, **variables: str
                   ) -> list[Message]:
    """The system prompt (`system_template` with `system_vars`) and the
    stage's task (`template` with `variables`)."""
    return [system(render(system_template, PROMPTS_PACKAGE, **dict(system_vars or {}))),
            user(render(template, PROMPTS_PACKAGE, **variables))]


def numbered(source: str) -> str:
    return "```cuda\n" + number_lines(source) + "```"


def edit_actions_help() -> str:
    return load_template("edit_actions", PROMPTS_PACKAGE)
