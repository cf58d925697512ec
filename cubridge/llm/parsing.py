"""Fenced code blocks in a model's reply.

A block opens with a line of three or more backticks (or tildes), optionally
indented up to three spaces, followed by an info string whose first word is
the language (```python, ```cuda title=x); it closes with a line of the same
character, at least as long, and nothing else. Errors say what was expected
and where, in words meant to be fed back to the model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from cubridge.llm.errors import ReplyParseError

_OPEN = re.compile(r"^ {0,3}(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*?)\s*$")

# Languages that name the same thing; a request for any member matches all.
_ALIASES = {
    "python": ("python", "py", "python3"),
    "cuda": ("cuda", "cu", "cuh", "c++", "cpp", "cxx", "c"),
    "json": ("json",),
    "diff": ("diff", "patch"),
}
_CANONICAL = {alias: name for name, aliases in _ALIASES.items() for alias in aliases}


def canonical_language(lang: str) -> str:
    lang = lang.strip().lower()
    return _CANONICAL.get(lang, lang)


@dataclass(frozen=True)
class CodeBlock:
    language: str  # canonical: "python", "cuda"... ("" when the fence names none)
    code: str
    line: int  # 1-based reply line of the opening fence


def code_blocks(reply: str) -> list[CodeBlock]:
    """Every fenced block in the reply, in order. An unterminated block is an
    error (usually a reply cut off at max_tokens)."""
    blocks: list[CodeBlock] = []
    lines = reply.splitlines()
    i = 0
    while i < len(lines):
        match = _OPEN.match(lines[i])
        if not match:
            i += 1
            continue
        fence, info = match["fence"], match["info"]
        language = canonical_language(info.split()[0]) if info else ""
        close = re.compile(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        for j in range(i + 1, len(lines)):
            if close.match(lines[j]):
                blocks.append(CodeBlock(language, "\n".join(lines[i + 1 : j]) + "\n", i + 1))
                i = j + 1
                break
        else:
            shown = f"{fence}{language}" if language else fence
            raise ReplyParseError(
                f"the {shown} block opened on reply line {i + 1} is never closed "
                f"(was the reply cut off?)"
            )
    return blocks


def code_block(
    reply: str, language: str = "python", *, pick: Literal["only", "last", "longest"] = "only"
) -> str:
    """The code of the reply's block in `language`.

    pick="only" requires exactly one such block; "last" and "longest" choose
    among several (a reply that shows a snippet before the full program)."""
    want = canonical_language(language)
    found = [b for b in code_blocks(reply) if b.language == want]
    if not found:
        untagged = [b for b in code_blocks(reply) if not b.language]
        hint = (
            f" ({len(untagged)} block(s) without a language tag: label it ```{want})"
            if untagged
            else ""
        )
        raise ReplyParseError(f"no ```{want} block in the reply{hint}")
    if pick == "only":
        if len(found) > 1:
            where = ", ".join(str(b.line) for b in found)
            raise ReplyParseError(
                f"{len(found)} ```{want} blocks in the reply (lines {where}); expected exactly one"
            )
        return found[0].code
    if pick == "last":
        return found[-1].code
    if pick == "longest":
        return max(found, key=lambda b: len(b.code)).code
    raise ValueError(f"pick must be 'only', 'last' or 'longest', got {pick!r}")
