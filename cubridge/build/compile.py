"""nvcc -> cubin, cached by content: (source, hooks header, every local header,
arch, defines, flags, nvcc version, CUTLASS version). Each artifact directory
keeps the cubin with its ptxas resource report, build log and exact inputs.

The source's and the hooks header's leading comment blocks are left out of the
key (their line count stays in): a generated header's first lines name the spec
and its path, and a spec moved, renamed or checked out elsewhere builds the
same kernel."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from cubridge.build.arch import gencode_flag, parse_arch
from cubridge.build.errors import BuildPartError
from cubridge.build.nvcc import find_nvcc, nvcc_version, run_nvcc
from cubridge.build.resources import KernelResources, parse_ptxas_report

KERNELS_DIR = Path(__file__).resolve().parent.parent / "kernels"
COMMON_DIR = KERNELS_DIR / "common"
DEFAULT_HOOKS_DIR = COMMON_DIR / "default_hooks"
HOOKS_HEADER = "cubridge_hooks.cuh"
BASE_FLAGS = ("-cubin", "-O3", "-std=c++17", "-lineinfo", "-Xptxas=-v")
_FORMAT = 4  # bump when the artifact layout or key recipe changes (4: base flags in the key)
_HEADER_SUFFIXES = (".cuh", ".h", ".hpp", ".cu", ".inl")


def cache_root() -> Path:
    """$CUBRIDGE_CACHE_DIR, else ~/.cache/cubridge."""
    env = os.environ.get("CUBRIDGE_CACHE_DIR")
    return Path(env).expanduser().resolve() if env else Path.home() / ".cache" / "cubridge"


def cutlass_include_dir() -> Path:
    """CuTe/CUTLASS headers shipped by the nvidia-cutlass wheel."""
    try:
        import cutlass_library
    except ImportError as exc:
        raise BuildPartError(
            "CuTe/CUTLASS headers need the nvidia-cutlass package "
            "(pip install nvidia-cutlass==4.2.0.0)"
        ) from exc
    include = Path(cutlass_library.__file__).parent / "source" / "include"
    if not (include / "cute" / "tensor.hpp").is_file():
        raise BuildPartError(f"nvidia-cutlass is installed but has no CuTe headers at {include}")
    return include


@dataclass(frozen=True)
class CompiledKernel:
    """A cubin in the cache, with what ptxas said about each entry function."""

    key: str
    arch: str
    directory: Path
    resources: Mapping[str, KernelResources]
    from_cache: bool

    @property
    def cubin_path(self) -> Path:
        return self.directory / "kernel.cubin"

    def cubin(self) -> bytes:
        return self.cubin_path.read_bytes()

    @property
    def log(self) -> str:
        return (self.directory / "build.log").read_text()

    def resources_of(self, entry: str) -> KernelResources:
        if entry not in self.resources:
            raise BuildPartError(
                f"cubin {self.key[:12]} has no entry function {entry!r} "
                f"(it has: {', '.join(sorted(self.resources)) or 'none'})"
            )
        return self.resources[entry]


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _code_digest(text: str) -> str:
    """Digest of `text` with each line of its leading `//` comment block emptied:
    documentation, not code. The line count stays, so -lineinfo's line table is
    the same for every text that shares the key."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if not line.lstrip().startswith("//"):
            break
        lines[i] = "//"
    return _digest("\n".join(lines).encode())


def _headers_digest(dirs: Sequence[Path]) -> dict[str, str]:
    """Content hash of every header under the include dirs we own (CUTLASS is
    keyed by its package version instead)."""
    found: dict[str, str] = {}
    for i, root in enumerate(dirs):  # relative names: the key is the same on every machine
        for path in sorted(root.rglob("*")):
            if path.is_file() and path.suffix in _HEADER_SUFFIXES:
                found[f"{i}/{path.relative_to(root)}"] = _digest(path.read_bytes())
    return found


def compile_cuda(
    source: Path | str,
    *,
    arch: str,
    hooks_header: str | None = None,
    defines: Mapping[str, str | int] | None = None,
    include_dirs: Sequence[Path] = (),
    flags: Sequence[str] = (),
    use_cutlass: bool = False,
    cache_dir: Path | None = None,
) -> CompiledKernel:
    """Compile one CUDA source to a cubin for `arch` (e.g. 'sm_80', 'sm_90a').

    `source` is a .cu file (a Path) or source text (a str). `hooks_header` is
    the text of a generated cubridge_hooks.cuh (docs/hooks.md); None uses the
    library default (standard attention, causal with -DCUBRIDGE_CAUSAL=1).
    kernels/common/ is always on the include path, after the hooks and
    `include_dirs`. Raises NvccNotFoundError, CompileError (each error with file
    and line) or UnsupportedArchError."""
    parse_arch(arch)
    defines = dict(defines or {})
    if isinstance(source, Path):
        if not source.is_file():
            raise BuildPartError(f"CUDA source {source} does not exist")
        source_text = source.read_text()
        local_dirs = [source.resolve().parent, *include_dirs]
    else:
        source_text = source
        local_dirs = list(include_dirs)
    hooks_text = hooks_header if hooks_header is not None else (
        DEFAULT_HOOKS_DIR / HOOKS_HEADER).read_text()
    nvcc = find_nvcc()
    recipe = {
        "format": _FORMAT,
        "source": _code_digest(source_text),
        "hooks": _code_digest(hooks_text),
        "generated_hooks": hooks_header is not None,
        "headers": _headers_digest([COMMON_DIR, *local_dirs]),
        "arch": arch,
        "defines": sorted((k, str(v)) for k, v in defines.items()),
        # (the base flags too: a build without -lineinfo must not be served one with it)
        "flags": [*BASE_FLAGS, *flags],
        "nvcc": nvcc_version(nvcc),
        "cutlass": metadata.version("nvidia-cutlass") if use_cutlass else None,
    }
    key = _digest(json.dumps(recipe, sort_keys=True).encode())
    root = cache_dir or cache_root()
    final = root / "cubin" / key[:2] / key
    if _complete(final):
        return _load_artifact(key, arch, final, from_cache=True)
    if final.exists():  # a partial entry (a copy or clean-up cut short): build it again
        shutil.rmtree(final, ignore_errors=True)

    (root / "tmp").mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"{key[:12]}-", dir=root / "tmp"))
    try:
        hooks_dir = DEFAULT_HOOKS_DIR
        rename: dict[str, str] = {}
        if hooks_header is not None:
            hooks_dir = work / "hooks"
            hooks_dir.mkdir()
            (hooks_dir / HOOKS_HEADER).write_text(hooks_header)
            rename[str(hooks_dir / HOOKS_HEADER)] = f"{HOOKS_HEADER} (generated)"
        if isinstance(source, Path):
            source_path = source.resolve()
        else:
            source_path = work / "kernel.cu"
            source_path.write_text(source_text)
            rename[str(source_path)] = "kernel.cu (source text)"
        includes = [hooks_dir, *include_dirs, COMMON_DIR]
        if use_cutlass:
            includes.append(cutlass_include_dir())
        args = [
            *BASE_FLAGS,
            gencode_flag(arch),
            *(f"-D{k}={v}" for k, v in defines.items()),
            *(f"-I{d}" for d in includes),
            *flags,
            "-o", str(work / "kernel.cubin"),
            str(source_path),
        ]
        log = run_nvcc(args, cwd=work, rename=rename)
        resources = parse_ptxas_report(log)
        (work / "build.log").write_text(log)
        (work / "resources.json").write_text(
            json.dumps({n: r.to_json() for n, r in resources.items()}, indent=2))
        (work / "recipe.json").write_text(json.dumps(
            {**recipe, "command": [str(nvcc), *args], "source_name": str(source)
             if isinstance(source, Path) else "<text>"}, indent=2))
        (work / "source.cu").write_text(source_text)
        (work / HOOKS_HEADER).write_text(hooks_text)
        final.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.replace(work, final)
        except OSError:
            if not _complete(final):  # not a concurrent twin: real error
                raise
            return _load_artifact(key, arch, final, from_cache=True)
        return _load_artifact(key, arch, final, from_cache=False)
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)


def _complete(directory: Path) -> bool:
    """A cache entry is usable only with both its cubin and its ptxas report."""
    return (directory / "kernel.cubin").is_file() and (directory / "resources.json").is_file()


def _load_artifact(key: str, arch: str, directory: Path, *, from_cache: bool) -> CompiledKernel:
    raw = json.loads((directory / "resources.json").read_text())
    resources = {name: KernelResources.from_json(r) for name, r in raw.items()}
    return CompiledKernel(key, arch, directory, resources, from_cache)
