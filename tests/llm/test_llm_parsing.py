"""Reply parsing: fenced code blocks and line-level edit actions, with the
precise errors that go back to the model."""

from __future__ import annotations

import pytest

from cubridge.llm import EditError, ReplyParseError, apply_edits, code_block, code_blocks
from cubridge.llm.edits import number_lines, parse_edits

FILE = "".join(f"line {k}\n" for k in range(1, 13))  # 12 lines


def test_code_blocks_by_language_and_alias():
    reply = "Intro\n```py\na = 1\n```\ntext\n~~~~cuda title=k.cu\n__global__ void k() {}\n~~~~\n"
    blocks = code_blocks(reply)
    assert [(b.language, b.line) for b in blocks] == [("python", 2), ("cuda", 6)]
    assert code_block(reply, "python") == "a = 1\n"
    assert code_block(reply, "cu") == "__global__ void k() {}\n"


def test_code_block_errors_are_precise():
    with pytest.raises(ReplyParseError, match=r"^no ```python block in the reply$"):
        code_block("just prose", "python")
    with pytest.raises(ReplyParseError, match=r"1 block\(s\) without a language tag"):
        code_block("```\nx = 1\n```\n", "python")
    two = "```python\na\n```\n```python\nb = 2\n```\n"
    with pytest.raises(ReplyParseError, match=r"2 ```python blocks in the reply \(lines 1, 4\)"):
        code_block(two, "python")
    assert code_block(two, "python", pick="last") == "b = 2\n"
    assert code_block(two, "python", pick="longest") == "b = 2\n"
    with pytest.raises(ReplyParseError, match="opened on reply line 2 is never closed"):
        code_block("ok\n```python\nx = 1\n", "python")


def test_a_longer_fence_holds_a_shorter_one():
    reply = "````markdown\n```python\nx\n```\n````\n"
    [block] = code_blocks(reply)
    assert block.language == "markdown" and "```python" in block.code


def test_edits_replace_insert_delete_against_original_numbers():
    reply = (
        "I will fix it.\n"
        "@@@ delete 2..3\n@@@ end\n"
        "@@@ replace 10\nTEN\n@@@ end\n"
        "@@@ insert after 0\nTOP\n@@@ end\n"
        '@@@ insert before "line 7"\n```cuda\nBEFORE 7\n```\n@@@ end\n'
        '@@@ replace "line 11".."line 12"\nEND\n@@@ end\n'
    )
    edits = parse_edits(reply)
    assert [str(e) for e in edits] == [
        "delete 2..3",
        "replace 10",
        "insert after 0",
        'insert before "line 7"',
        'replace "line 11".."line 12"',
    ]
    out = apply_edits(FILE, edits).splitlines()
    assert out == [
        "TOP", "line 1", "line 4", "line 5", "line 6", "BEFORE 7", "line 7", "line 8",
        "line 9", "TEN", "END",
    ]  # fmt: skip


def test_keep_says_the_file_builds_the_target_as_it_is():
    """'@@@ keep' alone: no edit, on purpose (the change is the build's configuration)."""
    edits = parse_edits("The source already builds it.\n\n@@@ keep\n")
    assert edits == [] and apply_edits(FILE, edits) == FILE
    with pytest.raises(ReplyParseError, match=r"reply line 1: '@@@ keep' \(no edit\) in a reply "
                       r"with 1 edit action\(s\)"):
        parse_edits("@@@ keep\n@@@ delete 1\n@@@ end\n")


def test_delete_may_omit_its_end():
    edits = parse_edits("@@@ delete 1\n@@@ delete 3..4\n@@@ end\n")
    assert apply_edits(FILE, edits).splitlines()[:2] == ["line 2", "line 5"]


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ("no edits here", "no edit actions in the reply"),
        ("@@@ change 3\nx\n@@@ end\n", "reply line 1: unknown edit action 'change'"),
        ("@@@ replace 3\nx\n", "edit 1: '@@@ replace 3' on reply line 1 has no '@@@ end'"),
        ("@@@ replace three\nx\n@@@ end\n", "edit 1 (reply line 1): bad target 'three'"),
        ("@@@ insert after 2..4\nx\n@@@ end\n", "insert after takes one line, not a range"),
        ("@@@ delete 2\nstuff\n@@@ end\n", "edit 1 (reply line 1): delete takes no body"),
        ("@@@ end\n", "reply line 1: '@@@ end' without an open edit"),
    ],
)
def test_edit_parse_errors(reply, message):
    with pytest.raises(ReplyParseError) as err:
        parse_edits(reply)
    assert message in str(err.value)


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ("@@@ replace 1\na\n@@@ end\n@@@ replace 340\nx\n@@@ end\n",
         "edit 2 (replace 340): line 340 beyond end of file (12 lines)"),
        ("@@@ replace 5..3\nx\n@@@ end\n", "edit 1 (replace 5..3): range 5..3 is backwards"),
        ('@@@ replace "nowhere"\nx\n@@@ end\n', 'anchor "nowhere" matches no line'),
        ('@@@ replace "line 1"\nx\n@@@ end\n',
         'anchor "line 1" matches 4 lines (1, 10, 11, 12); use a unique anchor'),
        ("@@@ replace 4..8\nx\n@@@ end\n@@@ delete 8..9\n@@@ end\n",
         "edit 2 (lines 8..9) overlaps edit 1 (lines 4..8)"),
        ("@@@ replace 4..8\nx\n@@@ end\n@@@ insert after 5\ny\n@@@ end\n",
         "edit 2 (insert at line 6) overlaps edit 1 (lines 4..8)"),
        ("@@@ replace 0\nx\n@@@ end\n", "line 0 is before line 1"),
    ],
)  # fmt: skip
def test_edit_apply_errors(reply, message):
    with pytest.raises(EditError) as err:
        apply_edits(FILE, parse_edits(reply))
    assert message in str(err.value)


def test_insert_at_a_replacement_boundary_is_not_an_overlap():
    edits = parse_edits("@@@ replace 4..5\nR\n@@@ end\n@@@ insert before 4\nI\n@@@ end\n")
    assert apply_edits(FILE, edits).splitlines()[2:5] == ["line 3", "I", "R"]


def test_number_lines():
    assert number_lines("a\nb\n") == "1 | a\n2 | b\n"
    assert number_lines(FILE).splitlines()[11] == "12 | line 12"
