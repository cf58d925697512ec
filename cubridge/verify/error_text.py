"""One line that says why a call failed, for a report's table: the error's type
and the lines of its message that say something. A CuTe DSL diagnostic (what
FlexAttention's FLASH backend raises) is framed in '=' rules, so its first line
says nothing; Inductor appends a dump of the call and debugging hints."""

from __future__ import annotations

import re

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_RULE = re.compile(r"[=\-─━]{5,}")
_DUMP = ("target: ", "Found from")  # Inductor's dump of the call follows
_BOILERPLATE = ("Set TORCHDYNAMO_VERBOSE", "For even more developer context", "Kwargs:",
                "Please open an issue", "with the following information", "Title your issue")


def error_summary(exc: BaseException, limit: int = 400) -> str:
    """`exc` in at most `limit` characters: colour codes, rules, the call dump
    and the hints dropped, the remaining lines joined by ' / '."""
    lines = []
    for line in _ANSI.sub("", str(exc)).splitlines():
        line = _RULE.sub("", line).strip()
        if line.startswith(_DUMP):
            break
        if not any(ch.isalnum() for ch in line) or line.startswith(_BOILERPLATE):
            continue
        lines.append(line)
    text = f"{type(exc).__name__}: {' / '.join(lines)}"
    return text if len(text) <= limit else text[:limit - 3] + "..."
