"""The compiled variant: a spec's kernel built from a library entry, callable
like any attention function and usable inside a model.

    kernel = cubridge.compile("examples/specs/alibi_causal.py")
    out, lse = kernel(q, k, v, **aux)          # aux as the spec's make_aux gives them

Both paths end here. On the rules path the entry's CUDA source is unchanged
and the generated hooks header plugs the variant in; its aux tensors (and the
block tables of data-dependent masks) are packed per call by the hook plan.
On the LLM path the source is the lowering's edited copy, built with the
default hooks, and the aux tensors go to the AuxArgs slots in make_aux's
order. Either way it runs as the entry's `cubridge::attention_fwd` torch op,
so it composes with torch.compile. A floor mask's plan adds a pass after the op
(plain tensor code, where some row may keep no key: cubridge.empty_rows).

A finished run directory holds everything to rebuild it without tracing the
spec again (`load_variant`): spec.py, plan.json, lower.json, kernel.cu and
cubridge_hooks.cuh.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from cubridge.attention import Shape, default_scale
from cubridge.build.attention_op import call_attention_fwd, check_inputs, register
from cubridge.build.compile import CompiledKernel
from cubridge.build.driver import device_arch, require_cuda_device
from cubridge.build.jobs import build_all
from cubridge.kernels import KernelBuild, LibraryKernel, get_kernel
from cubridge.lower.hook_header import HookHeader, generate_header
from cubridge.rundir import (
    AUX_MANIFEST_FILE,
    HOOKS_FILE,
    LOWER_FILE,
    PLAN_FILE,
    SOURCE_FILE,
    SPEC_FILE,
    content_hash,
    lower_record,
)
from cubridge.spec.loader import load
from cubridge.spec.model import Spec
from cubridge.transfer.hooks import example_aux, plan_from_json


class CompiledVariant:
    """attention(q, k, v, scale=None, **aux) -> (out, lse), lse None for
    elementwise normalisers; q/k/v in cubridge.attention's layouts.

    `hooks`: the generated header of the rules path (None: the entry's default
    hooks, the LLM path). `source`: the edited CUDA text of the LLM path (None:
    the entry's own source). The builds are compiled and registered with the
    torch op ahead of the first call (`prepare`), so the call itself is plain
    tensor code that torch.compile traces in full."""

    def __init__(self, spec: Spec, kernel: LibraryKernel, builds: Sequence[KernelBuild], *,
                 hooks: HookHeader | None = None, source: str | None = None) -> None:
        if not builds:
            raise ValueError(f"{spec.name}: a compiled variant needs at least one build")
        self.spec = spec
        self.kernel = kernel
        self.builds = tuple(builds)
        self.hooks = hooks
        self.source = source
        self.aux_order = tuple(example_aux(spec)) if hooks is None else ()
        self._keys: dict[tuple[int, int, torch.dtype], str] = {}

    @property
    def hooks_header(self) -> str | None:
        return self.hooks.text if self.hooks is not None else None

    @property
    def path(self) -> str:
        return "rules" if self.hooks is not None else "llm"

    def aux_manifest(self) -> dict[str, object]:
        """Which AuxArgs slot holds which tensor (aux_manifest.json)."""
        if self.hooks is not None:
            return self.hooks.manifest()
        aux = example_aux(self.spec)
        return {"spec": self.spec.name, "normalizer": self.spec.normalizer,
                "aux": [{"slot": i, "name": n, "dtype": str(t.dtype).removeprefix("torch."),
                         "rank": t.dim(), "source": "spec"}
                        for i, (n, t) in enumerate(aux.items())]}

    def compile(self, arch: str) -> list[tuple[KernelBuild, torch.dtype, CompiledKernel]]:
        """Compile (cached) every build in every dtype of the spec the entry takes,
        the builds at once (cubridge.build.jobs)."""
        wanted = [(build, dtype) for build in self.builds for dtype in self.spec.dtypes
                  if dtype in self.kernel.metadata.dtypes]
        compiled = build_all([functools.partial(
            self.kernel.compile_build, build, dtype, arch, hooks_header=self.hooks_header,
            source=self.source) for build, dtype in wanted])
        return [(build, dtype, c) for (build, dtype), c in zip(wanted, compiled, strict=True)]

    def prepare(self, device: torch.device | str = "cuda") -> CompiledVariant:
        """Compile and register every build on `device`'s architecture."""
        arch = device_arch(require_cuda_device(torch.device(device)))
        for build, dtype, compiled in self.compile(arch):
            runnable = self.kernel.attention_kernel(compiled, build.head_dim, dtype)
            self._keys[(*build.dims, dtype)] = register(runnable)
        return self

    def pack_aux(self, aux: Mapping[str, torch.Tensor], shape: Shape,
                 device: torch.device | str | None = None) -> list[torch.Tensor]:
        """The tensors of the AuxArgs slots for one problem (on `device`)."""
        if self.hooks is not None:
            return self.hooks.pack_aux(aux, shape, device)
        missing = [n for n in self.aux_order if n not in aux]
        if missing:
            raise KeyError(f"{self.spec.name}: aux {missing} not given (takes {self.aux_order})")
        return [aux[n] for n in self.aux_order]

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 scale: float | None = None, **aux: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
            raise ValueError(f"{self.spec.name}: q, k, v must be 4-d [B, H, S, D], got "
                             f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
        if self.spec.self_attention and q.shape[2] != k.shape[2]:
            raise ValueError(f"{self.spec.name}: a self-attention spec (SELF_ATTENTION = True) "
                             f"takes Sq = Sk, got Sq = {q.shape[2]}, Sk = {k.shape[2]}")
        if not self._keys:
            self.prepare(q.device)
        key = self._keys.get((q.shape[3], v.shape[3], q.dtype))
        if key is None:
            raise ValueError(f"{self.spec.name}: no build for D={q.shape[3]}, Dv={v.shape[3]}, "
                             f"{q.dtype} (have {sorted(self._keys, key=str)})")
        shape = Shape(q.shape[0], q.shape[1], k.shape[1], q.shape[2], k.shape[2], q.shape[3],
                      v.shape[3] if v.shape[3] != q.shape[3] else None)
        packed = self.pack_aux(aux, shape, q.device)
        if not torch.compiler.is_compiling() and self.hooks is not None:
            # layout checks read pointers: eager only
            check_inputs(q, k, v, [q.shape[3]], self.spec.dtypes, packed, what=self.spec.name,
                         v_head_dims={q.shape[3]: [v.shape[3]]})
        scale = self.spec.scale if scale is None else scale
        scale = default_scale(q.shape[3]) if scale is None else float(scale)
        out, lse = call_attention_fwd(q, k, v, packed, scale, key)
        if self.hooks is not None:  # (a floor mask's rows with no key: cubridge.empty_rows)
            out, lse = self.hooks.fill_empty_rows(out, lse, v)
        return out, (lse if self.spec.normalizer == "softmax" else None)

    def fingerprint(self) -> str:
        """A content hash of what the cubins are built from (entry, source, hooks,
        builds): the key of the stages that compile and run them."""
        return content_hash(self.kernel.name, self.source or "", self.hooks_header or "",
                            json.dumps([b.to_json() for b in self.builds], sort_keys=True))

    def lower_record(self) -> dict[str, object]:
        """lower.json's common part: the entry, the builds, what was changed."""
        return lower_record(self.kernel.name, self.path, [b.to_json() for b in self.builds],
                            source_edited=self.source is not None, spec=self.spec.name)

    def __repr__(self) -> str:
        how = (f"{self.hooks.plan.classification} block classification, "
               f"{self.hooks.plan.normalizer}" if self.hooks is not None
               else "LLM-lowered source")
        return f"CompiledVariant({self.spec.name!r} on {self.kernel.name}, {how})"


def rules_variant(spec: Spec, kernel: LibraryKernel, hooks: HookHeader) -> CompiledVariant:
    """The rules path's variant: one build per (QK, V) head dims of the spec, the
    entry's tile configs and source, the generated hooks."""
    dims = sorted({(cfg.d, cfg.head_dim_v) for cfg in spec.configs})
    return CompiledVariant(spec, kernel, [kernel.build_for(d, dv) for d, dv in dims],
                           hooks=hooks)


def _spec_name(run_dir: Path, record: dict) -> str | None:
    """The run's spec name (lower.json's; before it kept one, the aux manifest's)."""
    if "spec" in record:
        return str(record["spec"])
    manifest = run_dir / AUX_MANIFEST_FILE
    return json.loads(manifest.read_text()).get("spec") if manifest.is_file() else None


def load_variant(run_dir: str | Path) -> CompiledVariant:
    """The variant of a finished run directory (its kernel.py calls this)."""
    run_dir = Path(run_dir)
    record = json.loads((run_dir / LOWER_FILE).read_text())
    spec = load(run_dir / SPEC_FILE, default_name=_spec_name(run_dir, record))
    kernel = get_kernel(record["kernel"])
    builds = [KernelBuild.from_json(b) for b in record["builds"]]
    source = (run_dir / SOURCE_FILE).read_text() if record["source_edited"] else None
    if record["path"] == "llm":
        return CompiledVariant(spec, kernel, builds, source=source)
    plan = plan_from_json(json.loads((run_dir / PLAN_FILE).read_text())["hooks"], spec)
    header = generate_header(plan)
    # The header that was compiled and verified is the one on disk; the aux
    # slots must still be the ones this version of cubridge would pack.
    saved = json.loads((run_dir / AUX_MANIFEST_FILE).read_text())
    if {k: v for k, v in header.manifest().items() if k != "spec"} != \
            {k: v for k, v in saved.items() if k != "spec"}:
        raise RuntimeError(f"{run_dir}: its aux slots differ from what this version of "
                           "cubridge packs for spec.py; rerun `cubridge run`")
    header = dataclasses.replace(header, text=(run_dir / HOOKS_FILE).read_text())
    return CompiledVariant(spec, kernel, builds, hooks=header, source=source)
