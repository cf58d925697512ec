"""The expert kernel library: one directory per kernel (CUDA source with hook
points, its CuIR program, its spec, metadata.json). This module lists them and
reads their metadata."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

KERNELS_DIR = Path(__file__).resolve().parent
_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class TileConfig:
    """A kernel's tiling for one head dim (the same names as its CuIR config)."""

    block_m: int
    block_n: int
    num_warps: int
    stages: int


@dataclass(frozen=True)
class KernelMetadata:
    name: str
    description: str
    directory: Path
    source: Path
    entry: str
    min_arch: str
    archs: tuple[str, ...]
    compile_only_archs: tuple[str, ...]
    head_dims: tuple[int, ...]
    dtypes: tuple[torch.dtype, ...]
    configs: dict[int, TileConfig]
    defines: dict[str, str]

    def config(self, head_dim: int) -> TileConfig:
        if head_dim not in self.configs:
            raise ValueError(f"kernel {self.name}: no tile config for head dim {head_dim} "
                             f"(has {sorted(self.configs)})")
        return self.configs[head_dim]


def list_kernels() -> list[str]:
    """Names of the library's kernels (directories holding a metadata.json)."""
    return sorted(p.parent.name for p in KERNELS_DIR.glob("*/metadata.json"))


def load_metadata(name: str) -> KernelMetadata:
    """Read and check kernels/<name>/metadata.json; errors name the file and field."""
    path = KERNELS_DIR / name / "metadata.json"
    if not path.is_file():
        raise ValueError(f"no kernel {name!r} in the library (have: {', '.join(list_kernels())})")
    try:
        raw = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: invalid JSON: {exc}") from exc

    def field(key: str) -> object:
        if key not in raw:
            raise ValueError(f"{path}: missing field {key!r}")
        return raw[key]

    unknown = [d for d in field("dtypes") if d not in _DTYPES]  # type: ignore[union-attr]
    if unknown:
        raise ValueError(f"{path}: unknown dtypes {unknown} (known: {sorted(_DTYPES)})")
    source = path.parent / str(field("source"))
    if not source.is_file():
        raise ValueError(f"{path}: source {source.name} does not exist")
    try:
        configs = {int(d): TileConfig(**c) for d, c in field("configs").items()}  # type: ignore[union-attr]
    except TypeError as exc:
        raise ValueError(f"{path}: bad tile config: {exc}") from exc
    head_dims = tuple(int(d) for d in field("head_dims"))  # type: ignore[union-attr]
    missing = [d for d in head_dims if d not in configs]
    if missing:
        raise ValueError(f"{path}: head dims {missing} have no entry in 'configs'")
    return KernelMetadata(
        name=str(field("name")),
        description=str(field("description")),
        directory=path.parent,
        source=source,
        entry=str(field("entry")),
        min_arch=str(field("min_arch")),
        archs=tuple(field("archs")),  # type: ignore[arg-type]
        compile_only_archs=tuple(raw.get("compile_only_archs", ())),
        head_dims=head_dims,
        dtypes=tuple(_DTYPES[d] for d in field("dtypes")),  # type: ignore[union-attr]
        configs=configs,
        defines=dict(raw.get("defines", {})),
    )
