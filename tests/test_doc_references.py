"""Docs inside the repo: no source, doc or script refers to a file outside it
(the project's own words are docs/benchmark.md and docs/architecture.md).
Recorded measurements (bench/results/) keep the words they were written with."""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUTSIDE = re.compile(r"BENCHMARK\.md|DESIGN\.md|\.\./shared|shared/(?:BENCHMARK|DESIGN)")
SKIP = {"bench/results", "runs", "node_modules"}
SUFFIXES = {".py", ".md", ".sh", ".toml", ".txt", ".cfg", ".yml", ".yaml", ".cu", ".cuh"}


def _text_files():
    for top, dirs, files in os.walk(ROOT):
        rel_top = Path(top).relative_to(ROOT).as_posix()
        dirs[:] = [d for d in dirs if not d.startswith((".", "__"))
                   and f"{rel_top}/{d}".removeprefix("./") not in SKIP]
        for name in files:
            if Path(name).suffix in SUFFIXES:
                yield Path(top) / name


def test_nothing_refers_to_files_outside_the_repo():
    found = []
    for path in sorted(_text_files()):
        if path == Path(__file__).resolve():
            continue
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if OUTSIDE.search(line):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not found, "\n".join(found)
