"""What the stages read of a library kernel: its CUDA source, CuIR program,
spec and, once a lift recorded one, the IR <-> CUDA correspondence."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cubridge.kernels import list_kernels, load_metadata

CORRESPONDENCE = "correspondence.json"


@dataclass(frozen=True)
class LibraryKernel:
    name: str
    directory: Path
    cuda: Path
    cuir: Path
    spec: Path
    entry: str
    ir_class: str  # "package.module:Class" of the CuIR program

    @property
    def correspondence_path(self) -> Path:
        return self.directory / CORRESPONDENCE

    def correspondence(self) -> dict[str, Any] | None:
        path = self.correspondence_path
        return json.loads(path.read_text()) if path.is_file() else None


_IR_CLASSES = {"fa_sm80": "FaSm80", "fa_sm90": "FaSm90"}


def library_kernel(name: str) -> LibraryKernel:
    if name not in list_kernels():
        raise ValueError(f"no library kernel {name!r}; available: {', '.join(list_kernels())}")
    meta = load_metadata(name)
    directory = meta.source.parent
    cls = _IR_CLASSES.get(name, "".join(p.capitalize() for p in name.split("_")))
    return LibraryKernel(name, directory, meta.source, directory / "cuir.py",
                         directory / "spec.py", meta.entry,
                         f"cubridge.kernels.{name}.cuir:{cls}")
