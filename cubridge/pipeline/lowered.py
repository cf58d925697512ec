"""A kernel from the LLM path: the library source as the lowering stage edited
it (`<kernel>_lowered.cu`), compiled per build recorded in `lower.json`, and
called like the hook path's VariantKernel:

    attention(q, k, v, scale=None, **aux) -> (out, lse)   # lse None when elementwise

It runs as the library's torch op (`cubridge::attention_fwd`); aux tensors go
to AuxArgs slots in the order the spec's make_aux returns them, as the
lowering's GPU verifier passed them."""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

from cubridge.spec.model import Spec


class LoweredKernel:
    def __init__(self, spec: Spec, run_dir: Path) -> None:
        from cubridge.kernels import load_metadata
        from cubridge.transfer.hooks import example_aux

        run_dir = Path(run_dir)
        info = json.loads((run_dir / "lower.json").read_text())
        self.spec = spec
        self.meta = load_metadata(info["kernel"])
        self.source_path = run_dir / f"{self.meta.source.stem}_lowered.cu"
        if not self.source_path.is_file():
            raise FileNotFoundError(f"{run_dir}: no {self.source_path.name}; the LLM lowering "
                                    "did not finish (rerun `cubridge run`)")
        self.builds: list[dict[str, int]] = info["builds"]
        self.aux_order = tuple(example_aux(spec))
        self._keys: dict[tuple[int, int, torch.dtype], str] = {}

    def prepare(self, device: torch.device | str = "cuda") -> LoweredKernel:
        """Compile (cached) and register every build in every spec dtype."""
        from cubridge.build import compile_cuda
        from cubridge.build.attention_op import AttentionKernel, register
        from cubridge.build.driver import device_arch, require_cuda_device

        arch = device_arch(require_cuda_device(torch.device(device)))
        source = self.source_path.read_text()
        for build in self.builds:
            for dtype in self.spec.dtypes:
                defines = {k: v for k, v in build.items() if k != "CUBRIDGE_DTYPE_FP16"}
                if dtype == torch.float16:
                    defines["CUBRIDGE_DTYPE_FP16"] = 1
                ck = compile_cuda(source, arch=arch, defines=defines,
                                  include_dirs=[self.meta.directory])
                d, dv = defines["CUBRIDGE_HEAD_DIM"], defines.get(
                    "CUBRIDGE_HEAD_DIM_V", defines["CUBRIDGE_HEAD_DIM"])
                kernel = AttentionKernel(ck, self.meta.entry, d, dtype)
                self._keys[(d, dv, dtype)] = register(kernel)
        return self

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 scale: float | None = None, **aux: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if not self._keys:
            self.prepare(q.device)
        key = self._keys.get((q.shape[-1], v.shape[-1], q.dtype))
        if key is None:
            raise ValueError(f"{self.spec.name}: no lowered build for D={q.shape[-1]}, "
                             f"Dv={v.shape[-1]}, {q.dtype} (have {sorted(self._keys)})")
        missing = [n for n in self.aux_order if n not in aux]
        if missing:
            raise KeyError(f"{self.spec.name}: aux {missing} not given (takes {self.aux_order})")
        scale = self.spec.scale if scale is None else scale
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
        packed = [aux[n] for n in self.aux_order]
        out, lse = torch.ops.cubridge.attention_fwd(q, k, v, packed, scale, key)
        return out, (lse if self.spec.normalizer == "softmax" else None)

    def __repr__(self) -> str:
        return f"LoweredKernel({self.spec.name!r}, {self.source_path.name}, LLM path)"
