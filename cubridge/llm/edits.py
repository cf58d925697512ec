"""Line-level edit actions: how a model patches a file (the lower stage edits
expert CUDA this way instead of rewriting it).

The format, as the model is told (prompts/edit_actions.md says the same):

    @@@ replace 120..134
    <new lines>
    @@@ end
    @@@ insert after 88
    <new lines>
    @@@ end
    @@@ insert before "for (int n_block"
    <new lines>
    @@@ end
    @@@ delete 40..42
    @@@ end
    @@@ keep

- `@@@ keep`, alone in a reply, says the file builds the target as it is (the
  change is in the build's configuration only): no edit, on purpose.
- A target is a line number `N`, a range `N..M` (inclusive), or an anchor
  `"text"`: the one line containing that text (it must be unique). Ranges may
  mix both: `"begin".."end"` runs from the anchor line to the first line at or
  after it that contains the second text. `insert after 0` inserts at the top.
- Every number and anchor refers to the file as it was shown, before any of
  the reply's edits: edits may come in any order but must not overlap.
- A body is taken literally, up to `@@@ end`; if it is wrapped in a fenced
  code block, the fence lines are dropped. `delete` takes no body (its
  `@@@ end` may be left out). Text outside edit blocks is ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from cubridge.llm.errors import EditError, ReplyParseError

Action = Literal["replace", "delete", "insert after", "insert before"]

_HEADER = re.compile(r"^\s*@@@\s*(?P<rest>.*?)\s*$")
_VERB = re.compile(r"^(?P<verb>replace|delete|insert\s+after|insert\s+before)\b\s*(?P<target>.*)$")
_QUOTED = r'"(?:[^"\\]|\\.)*"'
_POINT = rf"(?:\d+|{_QUOTED})"
_TARGET = re.compile(rf"^(?P<start>{_POINT})(?:\s*(?:\.\.|-)\s*(?P<end>{_POINT}))?$")
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")


@dataclass(frozen=True)
class Point:
    """A line number or an anchor text."""

    line: int | None = None
    anchor: str | None = None

    def __str__(self) -> str:
        return str(self.line) if self.anchor is None else f'"{self.anchor}"'


@dataclass(frozen=True)
class Edit:
    index: int  # 1-based, in reply order: "edit 2" in messages
    action: Action
    start: Point
    end: Point | None  # for ranges
    body: tuple[str, ...]
    reply_line: int

    @property
    def target(self) -> str:
        return f"{self.start}..{self.end}" if self.end is not None else str(self.start)

    def __str__(self) -> str:
        return f"{self.action} {self.target}"


def _point(text: str) -> Point:
    if text.startswith('"'):
        return Point(anchor=re.sub(r"\\(.)", r"\1", text[1:-1]))
    return Point(line=int(text))


def parse_edits(reply: str) -> list[Edit]:
    """The edit actions in a reply, in order; an error names the reply line."""
    lines = reply.splitlines()
    edits: list[Edit] = []
    keep = None  # the reply line of '@@@ keep'
    i = 0
    while i < len(lines):
        header = _HEADER.match(lines[i])
        if not header:
            i += 1
            continue
        where = f"reply line {i + 1}"
        rest = header["rest"]
        if rest == "end":
            raise ReplyParseError(f"{where}: '@@@ end' without an open edit")
        if rest == "keep":
            keep = keep or i + 1
            i += 1
            continue
        verb = _VERB.match(rest)
        if not verb:
            raise ReplyParseError(
                f"{where}: unknown edit action {rest.split()[0] if rest else '(none)'!r} "
                f"(use '@@@ replace', '@@@ insert after', '@@@ insert before', '@@@ delete' "
                f"or '@@@ keep')"
            )
        action = " ".join(verb["verb"].split())
        number = len(edits) + 1
        target = _TARGET.match(verb["target"])
        if not target:
            raise ReplyParseError(
                f"edit {number} ({where}): bad target {verb['target']!r} after {action!r} "
                f'(expected N, N..M, "anchor text" or "from".."to")'
            )
        start, end = _point(target["start"]), target["end"] and _point(target["end"])
        if action.startswith("insert") and end:
            raise ReplyParseError(f"edit {number} ({where}): {action} takes one line, not a range")
        body: list[str] = []
        j = i + 1
        closed = False
        while j < len(lines):
            inner = _HEADER.match(lines[j])
            if inner and inner["rest"] == "end":
                closed = True
                break
            if inner and action == "delete" and _VERB.match(inner["rest"]):
                break  # a delete may omit its '@@@ end'
            body.append(lines[j])
            j += 1
        if not closed and action != "delete":
            raise ReplyParseError(
                f"edit {number}: '@@@ {action} {verb['target']}' on {where} has no '@@@ end'"
            )
        body = _unfence(body)
        if action == "delete" and any(line.strip() for line in body):
            raise ReplyParseError(f"edit {number} ({where}): delete takes no body")
        kept = () if action == "delete" else tuple(body)
        edits.append(Edit(number, action, start, end or None, kept, i + 1))  # type: ignore[arg-type]
        i = j + 1 if closed else j
    if keep is not None and edits:
        raise ReplyParseError(f"reply line {keep}: '@@@ keep' (no edit) in a reply with "
                              f"{len(edits)} edit action(s): keep the file or edit it, not both")
    if not edits and keep is None:
        raise ReplyParseError(
            "no edit actions in the reply (expected '@@@ replace N..M' / '@@@ insert after N' / "
            "'@@@ insert before N' / '@@@ delete N..M' blocks, each closed by '@@@ end', or "
            "'@@@ keep' where the file builds the target as it is)"
        )
    return edits


def _unfence(body: list[str]) -> list[str]:
    if len(body) >= 2 and _FENCE.match(body[0]) and _FENCE.match(body[-1]):
        return body[1:-1]
    return body


def _resolve(edit: Edit, point: Point, lines: list[str], after: int = 1) -> int:
    """The 1-based line a point names, searching anchors from line `after` on."""
    n = len(lines)
    if point.anchor is None:
        assert point.line is not None
        low = 0 if edit.action == "insert after" else 1
        if point.line < low:
            raise EditError(f"edit {edit.index} ({edit}): line {point.line} is before line {low}")
        if point.line > n:
            raise EditError(
                f"edit {edit.index} ({edit}): line {point.line} beyond end of file ({n} lines)"
            )
        return point.line
    if not point.anchor.strip():
        raise EditError(f"edit {edit.index} ({edit}): empty anchor")
    hits = [k + 1 for k in range(after - 1, n) if point.anchor in lines[k]]
    if not hits:
        raise EditError(f'edit {edit.index} ({edit}): anchor "{point.anchor}" matches no line')
    if len(hits) > 1 and after == 1:
        shown = ", ".join(map(str, hits[:8])) + (", ..." if len(hits) > 8 else "")
        raise EditError(
            f'edit {edit.index} ({edit}): anchor "{point.anchor}" matches {len(hits)} lines '
            f"({shown}); use a unique anchor or a line number"
        )
    return hits[0]


@dataclass(frozen=True)
class _Span:
    """An edit resolved to original lines: replaces lines[start:end] (0-based,
    half-open; start == end for an insert) with body."""

    start: int
    end: int
    body: tuple[str, ...]
    edit: Edit

    def describe(self) -> str:
        if self.start == self.end:
            return f"edit {self.edit.index} (insert at line {self.start + 1})"
        return f"edit {self.edit.index} (lines {self.start + 1}..{self.end})"


def resolve_edits(source: str, edits: list[Edit]) -> list[_Span]:
    lines = source.splitlines()
    spans = []
    for edit in edits:
        first = _resolve(edit, edit.start, lines)
        if edit.action == "insert after":
            spans.append(_Span(first, first, edit.body, edit))
        elif edit.action == "insert before":
            spans.append(_Span(first - 1, first - 1, edit.body, edit))
        else:
            last = first if edit.end is None else _resolve(edit, edit.end, lines, after=first)
            if last < first:
                raise EditError(f"edit {edit.index} ({edit}): range {first}..{last} is backwards")
            spans.append(_Span(first - 1, last, edit.body, edit))
    # Inserts go before a replacement that starts at the same place.
    spans.sort(key=lambda s: (s.start, s.end > s.start, s.edit.index))
    for a, b in zip(spans, spans[1:], strict=False):
        if b.start < a.end:
            first_, second = sorted((a, b), key=lambda s: s.edit.index)
            raise EditError(f"{second.describe()} overlaps {first_.describe()}")
    return spans


def apply_edits(source: str, edits: list[Edit]) -> str:
    """The source with the edits applied (all against the original lines)."""
    lines = source.splitlines()
    out: list[str] = []
    cursor = 0
    for span in resolve_edits(source, edits):
        out += lines[cursor : span.start]
        out += span.body
        cursor = span.end
    out += lines[cursor:]
    trailing = "\n" if source.endswith("\n") or not source else ""
    return "\n".join(out) + trailing


def number_lines(source: str) -> str:
    """The source with right-aligned line numbers, as shown to a model that edits it."""
    lines = source.splitlines()
    width = len(str(len(lines)))
    return "\n".join(f"{k:>{width}} | {line}" for k, line in enumerate(lines, 1)) + "\n"
