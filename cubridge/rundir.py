"""The run directory: every stage's artifact on disk, keyed by content.

A run directory (`runs/<spec>-<hash>/`) holds the spec snapshot, each IR
program, each CUDA source, compiler logs, verification results and benchmark
JSON. `manifest.json` records each finished stage with the hash of its inputs,
so a rerun with unchanged inputs reuses the stage's artifacts instead of
recomputing them, and an interrupted run resumes at the first unfinished stage.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The artifacts both paths to a kernel write (docs/architecture.md lists who writes each).
SPEC_CHECK_FILE = "spec_check.txt"  # `cubridge spec check`'s findings (the first stage)
SPEC_FILE = "spec.py"  # the spec snapshot
PLAN_FILE = "plan.json"  # the route (rules | llm, why, the kernel) and the rules' hook plan
TARGET_FILE = "target_cuir.py"  # the verified target CuIR
SOURCE_FILE = "kernel.cu"  # the CUDA source the cubins are built from
HOOKS_FILE = "cubridge_hooks.cuh"  # the hooks header they are built with
AUX_MANIFEST_FILE = "aux_manifest.json"  # which AuxArgs slot holds which tensor
LOWER_FILE = "lower.json"  # the library entry, the builds, whether the source was edited
KERNEL_MODULE = "kernel.py"  # `attention(q, k, v, **aux)` of the finished run


def lower_record(kernel: str, path: str, builds: list[dict[str, Any]], *,
                 source_edited: bool, spec: str, **extra: Any) -> dict[str, Any]:
    """The content of lower.json, the same keys on both paths (plus `extra`);
    `spec`: the spec's name (the snapshot spec.py would take the file's stem
    for one without NAME)."""
    return {"kernel": kernel, "path": path, "spec": spec, "source": SOURCE_FILE,
            "source_edited": source_edited, "hooks": HOOKS_FILE, "builds": builds, **extra}


def content_hash(*parts: str | bytes) -> str:
    """A short, stable hash of the given parts (order matters)."""
    h = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()[:16]


@dataclass
class StageRecord:
    name: str
    key: str
    seconds: float
    summary: str
    artifacts: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)


class RunDir:
    """A run directory with a manifest of finished stages."""

    def __init__(self, path: Path, log: Callable[[str], None] | None = None) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self._log = log or (lambda line: print(line, file=sys.stderr, flush=True))
        self._manifest_path = self.path / "manifest.json"
        self.stages: dict[str, StageRecord] = {}
        if self._manifest_path.exists():
            raw = json.loads(self._manifest_path.read_text())
            self.stages = {name: StageRecord(**rec) for name, rec in raw.get("stages", {}).items()}

    def file(self, name: str) -> Path:
        return self.path / name

    def write(self, name: str, content: str | bytes) -> Path:
        """Write an artifact atomically (a crash never leaves half a file)."""
        target = self.path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".tmp")
        if isinstance(content, bytes):
            tmp.write_bytes(content)
        else:
            tmp.write_text(content)
        tmp.replace(target)
        return target

    def cached(self, stage: str, key: str) -> StageRecord | None:
        """The record of `stage` if it finished with the same input key and its
        artifacts are still on disk."""
        rec = self.stages.get(stage)
        if rec is None or rec.key != key:
            return None
        if not all((self.path / a).exists() for a in rec.artifacts):
            return None
        return rec

    @contextmanager
    def stage(self, name: str, key: str) -> Iterator[StageRecord]:
        """Run a stage: the body fills `rec.summary`, `rec.artifacts` and
        `rec.data`; on success the record is saved and one line is printed.
        On failure nothing is recorded, so a rerun retries the stage."""
        rec = StageRecord(name=name, key=key, seconds=0.0, summary="")
        start = time.perf_counter()
        try:
            yield rec
        except BaseException as exc:
            took = time.perf_counter() - start
            self._log(f"[{name}] failed after {took:.1f}s: {type(exc).__name__}: {exc}")
            raise
        rec.seconds = time.perf_counter() - start
        self.stages[name] = rec
        self._save()
        self._log(f"[{name}] {rec.summary} ({rec.seconds:.1f}s)")

    def run_stage(self, name: str, key: str, body: Callable[[StageRecord], None]) -> StageRecord:
        """Run `body(rec)` as stage `name`, or reuse the record when the stage
        already finished with the same key (a one-line 'cached' note)."""
        cached = self.cached(name, key)
        if cached is not None:
            self._log(f"[{name}] cached: {cached.summary}")
            return cached
        with self.stage(name, key) as rec:
            body(rec)
        return rec

    def log(self, line: str) -> None:
        self._log(line)

    def _save(self) -> None:
        raw = {"stages": {name: vars(rec) for name, rec in self.stages.items()}}
        self.write("manifest.json", json.dumps(raw, indent=2, default=str))
