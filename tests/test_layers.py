"""The parts import each other in one direction (docs/architecture.md, "Parts"):
no cycles between the pipeline and the LLM path, the MCP server and its
tools, or any other two parts."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "cubridge"
LEVELS = {
    "attention": 0, "modules": 0, "empty_rows": 0,
    "rundir": 1, "llm": 1, "spec": 1, "ir": 1, "build": 1,
    "kernels": 2, "verify": 2,
    "transfer": 3,
    "lower": 4, "bench": 4, "llm_path": 5,
    "pipeline": 6,
}
ALLOWED_SIDEWAYS: set[tuple[str, str]] = set()
COMMANDS = {"commands.py", "cli.py", "doctor.py", "__main__.py"}


def _part(path: Path) -> str:
    rel = path.relative_to(PACKAGE).parts
    return rel[0].removesuffix(".py")


def _imports(path: Path) -> set[str]:
    parts = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
            [a.name for a in node.names] if isinstance(node, ast.Import) else []
        for name in names:
            if name.startswith("cubridge."):
                parts.add(name.split(".")[1])
    return parts


def test_parts_import_only_lower_levels():
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        part = _part(path)
        if path.name in COMMANDS or part in ("mcp", "__init__"):
            continue  # commands and the MCP tools wire everything together
        assert part in LEVELS, f"{path}: part {part!r} has no level in docs/architecture.md"
        for other in _imports(path) - {part}:
            if LEVELS[other] >= LEVELS[part] and (part, other) not in ALLOWED_SIDEWAYS:
                bad.append(f"{path.relative_to(PACKAGE.parent)} ({part}) imports {other}")
    assert bad == []


def test_mcp_tools_do_not_import_their_transport():
    """The tools are plain functions; the SDK server (mcp/server.py) serves them."""
    assert "cubridge.mcp.server" not in (PACKAGE / "mcp" / "tools.py").read_text()
    assert not (PACKAGE / "mcp" / "protocol.py").exists()  # no hand-written JSON-RPC loop
