"""The expert kernel library: one `LibraryKernel` per entry.

An entry is a directory holding `metadata.json` (read by `read_metadata`), the
CUDA source with its hook points, the spec of what it computes and a CuIR
program (named in the metadata as "module:Class"). Entries are found in
cubridge/kernels/, in the directories named by $CUBRIDGE_KERNEL_DIRS
(os.pathsep-separated folders of entries) and through `register_kernel`.
A directory without metadata.json (a CuIR program still waiting for its CUDA
kernel) is not an entry. Choosing an entry for a device and a spec is
cubridge.kernels.selection's.

    kernel = get_kernel(name)                      # by name (`--kernel NAME`)
    compiled = kernel.compile(128, torch.bfloat16, "sm_90a", hooks_header=text)
    runnable = kernel.launchable(128, torch.bfloat16, "sm_90a", hooks_header=text)

An entry that needs more than the metadata says (its own tile-config type, a
different launch ABI, another hook-table tile) ships `kernel.py` with a
subclass of `LibraryKernel` named in the metadata's "class" field; `launch`
builds the parameter struct and grid of one launch, `config_type` is its
tile-config dataclass, `compile_defines` its macros, `table_block` the tile of
the host-side block tables its hooks read.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import json
import math
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch

from cubridge.attention import default_scale
from cubridge.build.arch import check_supported, parse_arch
from cubridge.build.attention_op import (
    AttentionKernel,
    KernelInfo,
    call_attention_fwd,
    check_inputs,
    register,
)
from cubridge.build.compile import CompiledKernel, compile_cuda
from cubridge.build.driver import device_arch, require_cuda_device
from cubridge.kernels.abi import FwdParams, Launch, fill_fwd_params
from cubridge.modules import load_module_from_path
from cubridge.spec.loader import load

KERNELS_DIR = Path(__file__).resolve().parent
KERNEL_DIRS_ENV = "CUBRIDGE_KERNEL_DIRS"
_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}
NORMALIZERS = ("softmax", "elementwise")


@dataclass(frozen=True)
class TileConfig:
    """Tiling of a warp-tiled kernel for one head dim (the names of its CuIR
    constructor arguments): a CTA of `num_warps` warps computes `block_m` query
    rows against key blocks of `block_n` through `stages` K/V slots."""

    block_m: int
    block_n: int
    num_warps: int
    stages: int

    def cuir_kwargs(self) -> dict[str, Any]:
        """The CuIR program's constructor arguments for this tiling."""
        return dataclasses.asdict(self)

    @property
    def table_rows(self) -> int:
        """Query rows the kernel classifies key blocks for at once (one warp's)."""
        return self.block_m // self.num_warps


@dataclass(frozen=True)
class KernelMetadata:
    """metadata.json of an entry, checked (errors name the file and field)."""

    name: str
    description: str
    directory: Path
    source: Path
    entry: str
    cuir: str  # "package.module:Class" of the CuIR program
    spec: Path
    min_arch: str
    archs: tuple[str, ...]
    compile_only_archs: tuple[str, ...]
    head_dims: tuple[int, ...]  # QK = V head dims
    dtypes: tuple[torch.dtype, ...]
    normalizers: tuple[str, ...]
    returns_lse: bool
    configs: Mapping[int, Any]  # head dim -> the entry's tile-config type
    defines: Mapping[str, str]  # config field / head_dim / causal / float16 -> macro
    device_note: str  # what the LLM prompts say about the target device
    priority: int  # selection order among entries that fit (higher first)
    kernel_class: str  # "module:Class" of a LibraryKernel subclass, or ""
    # (QK, V) head dims that differ, built by the source as they are (MLA's 192/128),
    # each with its tile config: metadata.json's "head_dim_pairs" ({"192/128": {...}})
    pair_configs: Mapping[tuple[int, int], Any] = dataclasses.field(default_factory=dict)
    # metadata.json's "pads_head_dims": a QK = V head dim that is a multiple of 8
    # between its smallest and largest runs on the next wider build (the source's
    # loads zero-fill the columns past it and its stores skip them, as TMA does);
    # {"from": N}: from N up, below the smallest build too. A source that must be
    # told the problem's head dim names a "head_dim_data" macro in "defines".
    pads_head_dims: bool = False
    pads_from: int = 0  # the smallest head dim padded (0: above the smallest build)

    def built_dims(self, head_dim: int, head_dim_v: int | None = None
                   ) -> tuple[int, int] | None:
        """The (QK, V) head dims of the build that runs these (None: none does)."""
        if head_dim_v not in (None, head_dim):
            return (head_dim, head_dim_v) if (head_dim, head_dim_v) in self.pair_configs \
                else None
        if head_dim in self.head_dims:
            return head_dim, head_dim
        wider = [d for d in sorted(self.head_dims) if d > head_dim]
        if self.pads_head_dims and head_dim % 8 == 0 and wider and \
                head_dim >= self.smallest_padded:
            return wider[0], wider[0]
        return None

    @property
    def smallest_padded(self) -> int:
        """The smallest head dim a padding entry runs on a wider build."""
        return self.pads_from or min(self.head_dims) + 8

    def supports_dims(self, head_dim: int, head_dim_v: int | None = None) -> bool:
        """Whether the source builds these head dims as it is (no edit)."""
        return self.built_dims(head_dim, head_dim_v) is not None

    def dims_text(self) -> str:
        """The head dims the entry builds: "64, 128 (QK = V); QK/V 192/128"."""
        text = f"{', '.join(map(str, self.head_dims))} (QK = V)"
        if self.pads_head_dims:
            text += (f", multiples of 8 from {self.smallest_padded} to "
                     f"{max(self.head_dims)} on the next wider build")
        pairs = ", ".join(f"{d}/{dv}" for d, dv in sorted(self.pair_configs))
        return f"{text}; QK/V {pairs}" if pairs else text

    def config(self, head_dim: int, head_dim_v: int | None = None) -> Any:
        built = self.built_dims(head_dim, head_dim_v)
        if head_dim_v not in (None, head_dim):
            if built is None:
                raise ValueError(f"kernel {self.name}: no tile config for QK/V head dims "
                                 f"{head_dim}/{head_dim_v} (builds {self.dims_text()})")
            return self.pair_configs[built]
        if built is None:
            raise ValueError(f"kernel {self.name}: no tile config for head dim {head_dim} "
                             f"(has {sorted(self.configs)})")
        return self.configs[built[0]]


@dataclass(frozen=True)
class KernelBuild:
    """One build of an entry for a variant: head dims, tile config (the fields of
    the entry's config type) and the default hooks' causal mode. A run compiles
    each build in each of the spec's dtypes; lower.json lists them."""

    head_dim: int
    head_dim_v: int | None = None  # None: equal to head_dim, no macro
    config: tuple[tuple[str, int], ...] = ()  # () : the metadata's config for head_dim
    causal: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"head_dim": self.head_dim, "head_dim_v": self.head_dim_v,
                "config": dict(self.config), "causal": self.causal}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> KernelBuild:
        return cls(int(data["head_dim"]),
                   None if data.get("head_dim_v") is None else int(data["head_dim_v"]),
                   tuple(sorted((str(k), int(v)) for k, v in data.get("config", {}).items())),
                   bool(data.get("causal", False)))

    @property
    def dims(self) -> tuple[int, int]:
        """(QK head dim, V head dim)."""
        return self.head_dim, self.head_dim if self.head_dim_v is None else self.head_dim_v


def header_constant(hooks_header: str, name: str) -> int:
    """`constexpr int name = N;` of a generated hooks header (0 where it has none)."""
    found = re.search(rf"constexpr int {name} = (\d+);", hooks_header)
    return int(found.group(1)) if found else 0


def read_metadata(path: Path, config_type: type = TileConfig) -> KernelMetadata:
    """Read and check an entry's metadata.json."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: invalid JSON: {exc}") from exc

    def field(key: str) -> Any:
        if key not in raw:
            raise ValueError(f"{path}: missing field {key!r}")
        return raw[key]

    unknown = [d for d in field("dtypes") if d not in _DTYPES]
    if unknown:
        raise ValueError(f"{path}: unknown dtypes {unknown} (known: {sorted(_DTYPES)})")
    directory = path.parent
    source = directory / str(field("source"))
    if not source.is_file():
        raise ValueError(f"{path}: source {source.name} does not exist")
    spec = directory / str(raw.get("spec", "spec.py"))
    if not spec.is_file():
        raise ValueError(f"{path}: spec {spec.name} does not exist")
    cuir = str(field("cuir"))
    if ":" not in cuir:
        raise ValueError(f"{path}: 'cuir' must be 'package.module:Class', got {cuir!r}")
    try:
        configs = {int(d): config_type(**c) for d, c in field("configs").items()}
    except TypeError as exc:
        raise ValueError(f"{path}: bad tile config for {config_type.__name__}: {exc}") from exc
    head_dims = tuple(int(d) for d in field("head_dims"))
    missing = [d for d in head_dims if d not in configs]
    if missing:
        raise ValueError(f"{path}: head dims {missing} have no entry in 'configs'")
    pair_configs = {}
    for dims, c in raw.get("head_dim_pairs", {}).items():
        try:
            d, dv = (int(x) for x in str(dims).split("/"))
        except ValueError:
            raise ValueError(f"{path}: 'head_dim_pairs' keys are QK/V head dims such as "
                             f"'192/128', got {dims!r}") from None
        if d == dv:
            raise ValueError(f"{path}: 'head_dim_pairs' {dims!r} has equal head dims: "
                             "list it in 'head_dims'")
        try:
            pair_configs[(d, dv)] = config_type(**c)
        except TypeError as exc:
            raise ValueError(f"{path}: bad tile config for {config_type.__name__} in "
                             f"'head_dim_pairs' {dims!r}: {exc}") from exc
    if pair_configs and "head_dim_v" not in field("defines"):
        raise ValueError(f"{path}: 'head_dim_pairs' needs a 'head_dim_v' macro in 'defines'")
    normalizers = tuple(raw.get("normalizers", ("softmax",)))
    bad = [n for n in normalizers if n not in NORMALIZERS]
    if bad:
        raise ValueError(f"{path}: unknown normalizers {bad} (known: {list(NORMALIZERS)})")
    defines = dict(field("defines"))
    needed = [k for k in ("head_dim", "float16") if k not in defines]
    if needed:
        raise ValueError(f"{path}: 'defines' names no macro for {needed}")
    pads = raw.get("pads_head_dims", False)
    if isinstance(pads, dict) and not (set(pads) == {"from"} and isinstance(pads["from"], int)
                                       and 8 <= pads["from"] < min(head_dims)
                                       and pads["from"] % 8 == 0):
        raise ValueError(f"{path}: 'pads_head_dims' is true, false or {{\"from\": N}} with N a "
                         f"multiple of 8 below the smallest head dim, got {pads!r}")
    archs = tuple(field("archs"))
    for arch in (*archs, str(field("min_arch"))):
        try:
            parse_arch(arch)
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from exc
    return KernelMetadata(
        name=str(field("name")),
        description=str(field("description")),
        directory=directory,
        source=source,
        entry=str(field("entry")),
        cuir=cuir,
        spec=spec,
        min_arch=str(field("min_arch")),
        archs=archs,
        compile_only_archs=tuple(raw.get("compile_only_archs", ())),
        head_dims=head_dims,
        dtypes=tuple(_DTYPES[d] for d in field("dtypes")),
        normalizers=normalizers,
        returns_lse=bool(raw.get("returns_lse", True)),
        configs=configs,
        defines=defines,
        device_note=str(raw.get("device_note", field("min_arch"))),
        priority=int(raw.get("priority", 0)),
        kernel_class=str(raw.get("class", "")),
        pair_configs=pair_configs,
        pads_head_dims=bool(pads),
        pads_from=int(pads.get("from", 0)) if isinstance(pads, dict) else 0,
    )


def arch_number(arch: str) -> int:
    """sm_90a -> 90, sm_100a -> 100: the order of architectures."""
    major, minor, _ = parse_arch(arch)
    return 10 * major + minor


class LibraryKernel:
    """One library entry: its metadata, CuIR program, spec, tile configs,
    compile defines, compilation, launch ABI and hook-table tile."""

    config_type: ClassVar[type] = TileConfig

    def __init__(self, metadata: KernelMetadata) -> None:
        self.metadata = metadata

    # -- what the entry is -----------------------------------------------------------

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def directory(self) -> Path:
        return self.metadata.directory

    @property
    def source(self) -> Path:
        """The CUDA source with its hook points."""
        return self.metadata.source

    @property
    def entry(self) -> str:
        return self.metadata.entry

    @property
    def spec_path(self) -> Path:
        return self.metadata.spec

    @property
    def ir_class(self) -> str:
        """"package.module:Class" of the CuIR program (what the sandbox imports)."""
        return self.metadata.cuir

    @property
    def cuir_path(self) -> Path:
        """The CuIR program's file (found without importing it)."""
        module = self.ir_class.partition(":")[0]
        found = importlib.util.find_spec(module)
        if found is None or found.origin is None:
            raise ValueError(f"kernel {self.name}: CuIR module {module} not found")
        return Path(found.origin)

    def cuir_class(self) -> type:
        """The CuIR program (a KernelBase subclass)."""
        module, _, cls = self.ir_class.partition(":")
        return getattr(importlib.import_module(module), cls)

    def spec(self) -> Any:
        """The spec of what the kernel computes (cubridge.spec.Spec)."""
        return load(self.spec_path)

    def correspondence(self) -> dict[str, Any] | None:
        """The IR <-> CUDA correspondence a lift recorded, if any."""
        path = self.directory / "correspondence.json"
        return json.loads(path.read_text()) if path.is_file() else None

    def config(self, head_dim: int, head_dim_v: int | None = None) -> Any:
        """The entry's tile config for these head dims (a `config_type`)."""
        return self.metadata.config(head_dim, head_dim_v)

    def default_config(self, head_dim: int, *, masked: bool = True,
                       head_dim_v: int | None = None) -> Any:
        """The config a build gets when none is given: the metadata's, unless the
        entry tiles unmasked builds (its default hooks without causal) otherwise."""
        return self.config(head_dim, head_dim_v)

    def cuir_config(self, head_dim: int, head_dim_v: int | None = None) -> dict[str, Any]:
        """The CuIR program's constructor arguments for these head dims."""
        return self.config(head_dim, head_dim_v).cuir_kwargs()

    def table_block(self, head_dim: int, head_dim_v: int | None = None) -> tuple[int, int]:
        """The tile (query rows, keys) of the host-side block tables the hooks
        read: the rows the kernel classifies at once by its key block."""
        cfg = self.config(head_dim, head_dim_v)
        return cfg.table_rows, cfg.block_n

    # -- selection --------------------------------------------------------------------

    def unsupported(self, *, arch: str | None = None, head_dim: int | None = None,
                    head_dim_v: int | None = None, dtype: torch.dtype | None = None,
                    normalizer: str | None = None) -> str:
        """Why this entry cannot serve the request ("" when it can)."""
        meta = self.metadata
        if arch is not None and arch_number(arch) < arch_number(meta.min_arch):
            return f"needs {meta.min_arch} or newer (have {arch})"
        if head_dim is not None and not meta.supports_dims(head_dim, head_dim_v):
            if head_dim_v in (None, head_dim):
                return f"head dim {head_dim} not among {meta.dims_text()}"
            return f"QK/V head dims {head_dim}/{head_dim_v} not among {meta.dims_text()}"
        if head_dim is None and head_dim_v is not None:
            return f"V head dim {head_dim_v} without a QK head dim"
        if dtype is not None and dtype not in meta.dtypes:
            return f"dtype {dtype} not among {[str(d) for d in meta.dtypes]}"
        if normalizer is not None:
            kind = "softmax" if normalizer == "softmax" else "elementwise"
            if kind not in meta.normalizers:
                return f"normaliser {normalizer} not supported"
        return ""

    @property
    def takes_head_dim_v(self) -> bool:
        """Whether the source takes a V head dim apart from QK's (a head_dim_v
        macro in metadata.json's "defines")."""
        return "head_dim_v" in self.metadata.defines

    # -- compilation ------------------------------------------------------------------

    def compile_defines(self, head_dim: int, dtype: torch.dtype, config: Any = None, *,
                        causal: bool = False, head_dim_v: int | None = None
                        ) -> dict[str, int]:
        """The -D macros of one build, from metadata.json's "defines" map: each
        tile-config field, head_dim (and head_dim_v when given), causal, and
        the float16 flag for fp16. A config field without a macro is fixed by
        the source: it must keep the metadata's value."""
        meta = self.metadata
        if not meta.supports_dims(head_dim) and head_dim_v is None:
            raise ValueError(f"{self.name}: head dim {head_dim} not supported "
                             f"(builds {meta.dims_text()})")
        if dtype not in meta.dtypes:
            raise TypeError(f"{self.name}: dtype {dtype} not supported (have {meta.dtypes})")
        base = self._base_config(head_dim, head_dim_v)
        cfg = config or base
        if not isinstance(cfg, self.config_type):
            raise TypeError(f"{self.name}: tile config must be a {self.config_type.__name__}, "
                            f"got {type(cfg).__name__}")
        macros = meta.defines
        # (a head dim the entry pads builds at the wider one: its loads zero-fill,
        # told the problem's head dim where the source takes it)
        built = meta.built_dims(head_dim, head_dim_v)
        out: dict[str, int] = {macros["head_dim"]: built[0] if built else head_dim}
        if built and built[0] != head_dim and "head_dim_data" in macros:
            out[macros["head_dim_data"]] = head_dim
        if head_dim_v is not None and "head_dim_v" in macros:
            out[macros["head_dim_v"]] = head_dim_v
        for f in dataclasses.fields(cfg):
            value = getattr(cfg, f.name)
            if f.name in macros:
                out[macros[f.name]] = int(value)
            elif value != getattr(base, f.name):
                raise ValueError(f"{self.name}: {f.name} is fixed at {getattr(base, f.name)} "
                                 f"by {self.source.name} (no macro for it), got {value}")
        if "causal" in macros:
            out[macros["causal"]] = int(causal)
        elif causal:
            raise ValueError(f"{self.name}: the default hooks have no causal mode")
        if dtype == torch.float16:
            out[macros["float16"]] = 1
        return out

    def compile(self, head_dim: int, dtype: torch.dtype, arch: str, *, causal: bool = False,
                hooks_header: str | None = None, source: str | None = None,
                config: Any = None, head_dim_v: int | None = None) -> CompiledKernel:
        """Compile (or fetch from the cache) one build. Needs nvcc, not a GPU.
        `causal` selects the default header's causal mode and cannot be combined
        with a generated `hooks_header`. `source` replaces the text of the CUDA
        source (a patched copy from LLM-driven lowering; it must keep the entry
        name, the parameter struct and cubridge_kernel_info). `config` overrides
        the metadata's tile config (tuning; the cubin reports its own)."""
        if causal and hooks_header is not None:
            raise ValueError(f"{self.name}: causal=True applies to the default hooks only; a "
                             "generated hooks header states its own mask")
        check_supported(arch, self.metadata.min_arch, f"kernel {self.name}")
        defines = self.compile_defines(head_dim, dtype, config, causal=causal,
                                       head_dim_v=head_dim_v)
        return self.compile_source(source, arch, hooks_header, defines)

    def compile_source(self, source: str | None, arch: str, hooks_header: str | None,
                       defines: Mapping[str, Any]) -> CompiledKernel:
        """Compile the entry's source (or `source`, a patched copy that includes
        what the entry's directory holds) with these defines."""
        if source is None:
            return compile_cuda(self.source, arch=arch, hooks_header=hooks_header,
                                defines=defines)
        return compile_cuda(source, arch=arch, hooks_header=hooks_header, defines=defines,
                            include_dirs=[self.directory])

    def build_config(self, build: KernelBuild) -> Any:
        """The tile config of a build (a `config_type`)."""
        if not build.config:
            return None
        return self.config_type(**dict(build.config))

    def compile_build(self, build: KernelBuild, dtype: torch.dtype, arch: str, *,
                      hooks_header: str | None = None, source: str | None = None
                      ) -> CompiledKernel:
        """Compile one of a variant's builds in `dtype`."""
        return self.compile(build.head_dim, dtype, arch, causal=build.causal,
                            hooks_header=hooks_header, source=source,
                            config=self.build_config(build), head_dim_v=build.head_dim_v)

    def build_for(self, head_dim: int, head_dim_v: int | None = None,
                  config: Mapping[str, Any] | None = None, causal: bool = False
                  ) -> KernelBuild:
        """A build of this entry: `config` (CuIR constructor arguments, e.g. a
        target program's config) keeps the fields of the entry's config type;
        missing ones come from the metadata."""
        fields = [f.name for f in dataclasses.fields(self.config_type)]
        base = self._base_config(head_dim, head_dim_v)
        chosen = {f: int((config or {}).get(f, getattr(base, f))) for f in fields}
        return KernelBuild(head_dim, None if head_dim_v in (None, head_dim) else head_dim_v,
                           tuple(sorted(chosen.items())), causal)

    def _base_config(self, head_dim: int, head_dim_v: int | None) -> Any:
        """The metadata's config for these head dims; for dims the source does not
        build as they are (an LLM edit's), its config at head_dim or its first."""
        meta = self.metadata
        if meta.supports_dims(head_dim, head_dim_v):
            return meta.config(head_dim, head_dim_v)
        return meta.configs.get(head_dim) or next(iter(meta.configs.values()))

    def attention_kernel(self, compiled: CompiledKernel, head_dim: int,
                         dtype: torch.dtype) -> AttentionKernel:
        """A compiled build as something the `cubridge::attention_fwd` op runs."""
        return AttentionKernel(compiled, self.entry, head_dim, dtype, self.launch)

    def launchable(self, head_dim: int, dtype: torch.dtype, arch: str, *,
                   causal: bool = False, hooks_header: str | None = None,
                   source: str | None = None, config: Any = None,
                   head_dim_v: int | None = None) -> AttentionKernel:
        """The compiled build, launchable (cached per process)."""
        return _launchable(self, head_dim, dtype, arch, causal, hooks_header, source, config,
                           head_dim_v)

    # -- the launch ABI -----------------------------------------------------------------

    def launch(self, info: KernelInfo, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               out: torch.Tensor, lse: torch.Tensor, scale: float,
               aux: Sequence[torch.Tensor]) -> Launch:
        """The entry point, grid, block, shared memory and parameter struct of
        one launch. The default: one FwdParams, one CTA per (query block, query
        head, batch). Override for another struct (TMA descriptors ahead of the
        FwdParams fields) or grid (persistent CTAs)."""
        b, hq, sq, _ = q.shape
        params = fill_fwd_params(FwdParams(), q, k, v, out, lse, scale, aux)
        grid = ((sq + info.block_m - 1) // info.block_m, hq, b)
        return Launch(info.entry_for(self.entry, k.shape[2]), grid, (info.threads, 1, 1),
                      info.smem_bytes, params)

    # -- running it -----------------------------------------------------------------------

    def attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  scale: float | None = None, causal: bool = False,
                  hooks_header: str | None = None, aux: Sequence[torch.Tensor] = (),
                  out: torch.Tensor | None = None, lse: torch.Tensor | None = None,
                  source: str | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Forward attention with this entry; returns (out, lse), lse None for
        elementwise normalisers. `aux` tensors go to the hooks in order
        (AuxArgs.t[0..]). With `out`/`lse` given the kernel writes into them
        (eager only); otherwise it runs as the torch op."""
        aux_list = list(aux.values()) if isinstance(aux, Mapping) else list(aux)
        _eager(_check_inputs)(self, q, k, v, aux_list)
        scale = default_scale(q.shape[3]) if scale is None else float(scale)
        if not (math.isfinite(scale) and scale > 0):
            raise ValueError(f"{self.name}: scale must be a positive finite number, got {scale}")
        kernel, key, softmax = _eager(_registered_launchable)(self, q, v, causal, hooks_header,
                                                              source)
        if out is None and lse is None:
            out, lse = call_attention_fwd(q, k, v, aux_list, scale, key)
        else:
            b, hq, sq, _ = q.shape
            out = torch.empty_like(q) if out is None else out
            lse = q.new_empty((b, hq, sq), dtype=torch.float32) if lse is None else lse
            _check_outputs(self.name, q, v, out, lse)
            kernel.run(q, k, v, scale, aux_list, out, lse)
        return out, (lse if softmax else None)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {self.directory})"


# Eager even under torch.compile (graph breaks): the checks read data pointers,
# and the build is compiled (nvcc, the cache) and registered with the op here; a
# registration traced by Dynamo would only take effect after the graph that
# launches it had run.
def _eager(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn`, kept out of Dynamo's graphs. Without Dynamo imported nothing can be
    compiling, and importing it (seconds) is left to those who use it."""
    return _compiler_disabled(fn) if "torch._dynamo" in sys.modules else fn


@functools.cache
def _compiler_disabled(fn: Callable[..., Any]) -> Callable[..., Any]:
    return torch.compiler.disable(fn)


def _check_inputs(kernel: LibraryKernel, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  aux: list[torch.Tensor]) -> None:
    meta = kernel.metadata
    v_dims: dict[int, list[int]] = {d: [d] for d in meta.head_dims}
    for d, dv in meta.pair_configs:
        v_dims.setdefault(d, []).append(dv)
    if q.dim() == 4 and v.dim() == 4 and meta.supports_dims(q.shape[3], v.shape[3]):
        v_dims.setdefault(q.shape[3], []).append(v.shape[3])  # (a padded head dim)
    check_inputs(q, k, v, meta.head_dims, meta.dtypes, aux, what=kernel.name,
                 v_head_dims=v_dims)


def _registered_launchable(kernel: LibraryKernel, q: torch.Tensor, v: torch.Tensor,
                           causal: bool, hooks_header: str | None, source: str | None
                           ) -> tuple[AttentionKernel, str, bool]:
    """The build for q and v, its op key, and whether it writes an LSE."""
    device = require_cuda_device(q.device)
    dv = v.shape[3] if v.shape[3] != q.shape[3] else None
    built = kernel.launchable(q.shape[3], q.dtype, device_arch(device), causal=causal,
                              hooks_header=hooks_header, source=source, head_dim_v=dv)
    return built, register(built), built.normalizer(device) == "softmax"


@functools.cache
def _launchable(kernel: LibraryKernel, head_dim: int, dtype: torch.dtype, arch: str,
                causal: bool, hooks_header: str | None, source: str | None, config: Any,
                head_dim_v: int | None) -> AttentionKernel:
    compiled = kernel.compile(head_dim, dtype, arch, causal=causal, hooks_header=hooks_header,
                              source=source, config=config, head_dim_v=head_dim_v)
    return kernel.attention_kernel(compiled, head_dim, dtype)


def _check_outputs(what: str, q: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                   lse: torch.Tensor) -> None:
    b, hq, sq, _ = q.shape
    want = (b, hq, sq, v.shape[3])
    if tuple(out.shape) != want or out.dtype != q.dtype or out.device != q.device:
        raise ValueError(f"{what}: out must be {want} {q.dtype} on {q.device}; got "
                         f"{tuple(out.shape)} {out.dtype} on {out.device}")
    if out.stride(3) != 1 or any(s % 8 for s in out.stride()[:3]) or out.data_ptr() % 16:
        raise ValueError(f"{what}: out needs a contiguous last dim and 16-byte aligned rows "
                         f"(strides {out.stride()})")
    if tuple(lse.shape) != (b, hq, sq) or lse.dtype != torch.float32 or not lse.is_contiguous():
        raise ValueError(f"{what}: lse must be a contiguous float32 tensor of shape "
                         f"{(b, hq, sq)}; got {tuple(lse.shape)} {lse.dtype}")


# -- the registry ---------------------------------------------------------------------------

_REGISTERED: dict[str, LibraryKernel] = {}


def _kernel_class(metadata_path: Path) -> type[LibraryKernel]:
    """The entry's LibraryKernel class: metadata "class" ("module:Class", or
    "kernel.py:Class" beside the metadata), else LibraryKernel."""
    ref = json.loads(metadata_path.read_text()).get("class", "") \
        if metadata_path.is_file() else ""
    if not ref:
        return LibraryKernel
    module, _, name = ref.partition(":")
    if module.endswith(".py"):
        loaded = load_module_from_path(metadata_path.parent / module,
                                       f"cubridge_kernel_{metadata_path.parent.name}")
    else:
        loaded = importlib.import_module(module)
    cls = getattr(loaded, name, None)
    if not (isinstance(cls, type) and issubclass(cls, LibraryKernel)):
        raise ValueError(f"{metadata_path}: 'class' {ref!r} is not a LibraryKernel subclass")
    return cls


def load_kernel(directory: Path) -> LibraryKernel:
    """The entry in `directory` (which holds its metadata.json)."""
    path = Path(directory) / "metadata.json"
    if not path.is_file():
        raise ValueError(f"{directory} is not a library entry: it has no metadata.json")
    cls = _kernel_class(path)
    return cls(read_metadata(path, cls.config_type))


def register_kernel(directory: str | Path) -> LibraryKernel:
    """Add the entry in `directory` to the library (for this process)."""
    kernel = load_kernel(Path(directory))
    _REGISTERED[kernel.name] = kernel
    _discovered.cache_clear()
    return kernel


def unregister_kernel(name: str) -> None:
    _REGISTERED.pop(name, None)
    _discovered.cache_clear()


def _search_dirs() -> list[Path]:
    extra = [Path(p) for p in os.environ.get(KERNEL_DIRS_ENV, "").split(os.pathsep) if p]
    return [KERNELS_DIR, *extra]


@functools.cache
def _discovered(search: tuple[Path, ...]) -> dict[str, LibraryKernel]:
    found: dict[str, LibraryKernel] = {}
    for root in search:
        for path in sorted(Path(root).glob("*/metadata.json")):
            kernel = load_kernel(path.parent)
            if kernel.name in found:
                raise ValueError(f"two library entries named {kernel.name!r}: "
                                 f"{found[kernel.name].directory} and {kernel.directory}")
            found[kernel.name] = kernel
    return found


def _library() -> dict[str, LibraryKernel]:
    return {**_discovered(tuple(_search_dirs())), **_REGISTERED}


def list_kernels() -> list[LibraryKernel]:
    """Every entry of the library, by name."""
    return [k for _, k in sorted(_library().items())]


def kernel_names() -> list[str]:
    return sorted(_library())


def get_kernel(name: str) -> LibraryKernel:
    """The entry called `name` (`--kernel NAME`)."""
    library = _library()
    if name not in library:
        raise ValueError(f"no kernel {name!r} in the library (have: {', '.join(sorted(library))})")
    return library[name]
