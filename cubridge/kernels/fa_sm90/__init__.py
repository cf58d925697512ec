"""fa_sm90: our FlashAttention-3-class Hopper forward kernel (fa_sm90.cu: TMA,
warp-specialised producer and wgmma consumer warpgroups, a persistent grid),
compiled on first use and run as the `cubridge::attention_fwd` torch op.

    out, lse = attention(q, k, v, causal=True)                    # library default hooks
    out, lse = attention(q, k, v, hooks_header=text, aux=[table])  # a lowered variant

q [B,Hq,Sq,D], k/v [B,Hk,Sk,D] (cubridge.attention conventions), bf16 or fp16,
D in {64, 128}, sm_90a only. lse is None for elementwise normalisers."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from cubridge.build.arch import parse_arch
from cubridge.build.attention_op import check_inputs, register
from cubridge.build.compile import CompiledKernel, compile_cuda
from cubridge.build.driver import device_arch, require_cuda_device
from cubridge.build.errors import UnsupportedArchError
from cubridge.kernels.fa_sm90.launch import Sm90AttentionKernel

NAME = "fa_sm90"
ENTRY = "fa_sm90_fwd"
SOURCE = Path(__file__).with_name("fa_sm90.cu")
HEAD_DIMS = (64, 128)
DTYPES = (torch.bfloat16, torch.float16)


@dataclass(frozen=True)
class Sm90TileConfig:
    """Tiling of fa_sm90: block_m rows per CTA (64 per consumer warpgroup), block_n
    keys per K/V block, stages slots in the K/V ring."""

    block_m: int
    block_n: int
    stages: int

    @property
    def consumer_warpgroups(self) -> int:
        return self.block_m // 64


CONFIGS = {64: Sm90TileConfig(128, 128, 2), 128: Sm90TileConfig(128, 128, 2)}


def compile_for(head_dim: int, dtype: torch.dtype, arch: str = "sm_90a", *, causal: bool = False,
                hooks_header: str | None = None, source: str | None = None,
                config: Sm90TileConfig | None = None) -> CompiledKernel:
    """Compile (or fetch from the cache) fa_sm90 for one head dim and dtype. Needs
    nvcc, not a GPU; sm_90a only (wgmma, setmaxnreg)."""
    if head_dim not in HEAD_DIMS:
        raise ValueError(f"{NAME}: head dim {head_dim} not supported (have {HEAD_DIMS})")
    if dtype not in DTYPES:
        raise TypeError(f"{NAME}: dtype {dtype} not supported (have {DTYPES})")
    if parse_arch(arch) != (9, 0, "a"):
        raise UnsupportedArchError(f"kernel {NAME} (wgmma, TMA, setmaxnreg) runs on sm_90a "
                                   f"(H100/H200) only; this target is {arch}")
    if causal and hooks_header is not None:
        raise ValueError(f"{NAME}: causal=True applies to the default hooks only; a generated "
                         "hooks header states its own mask")
    cfg = config or CONFIGS[head_dim]
    defines: dict[str, str | int] = {
        "CUBRIDGE_HEAD_DIM": head_dim,
        "CUBRIDGE_BLOCK_M": cfg.block_m,
        "CUBRIDGE_BLOCK_N": cfg.block_n,
        "CUBRIDGE_STAGES": cfg.stages,
        "CUBRIDGE_CAUSAL": int(causal),
    }
    if dtype == torch.float16:
        defines["CUBRIDGE_DTYPE_FP16"] = 1
    if source is None:
        return compile_cuda(SOURCE, arch=arch, hooks_header=hooks_header, defines=defines)
    return compile_cuda(source, arch=arch, hooks_header=hooks_header, defines=defines,
                        include_dirs=[SOURCE.parent])


@functools.cache
def kernel_for(head_dim: int, dtype: torch.dtype, arch: str, causal: bool = False,
               hooks_header: str | None = None, source: str | None = None,
               config: Sm90TileConfig | None = None) -> Sm90AttentionKernel:
    compiled = compile_for(head_dim, dtype, arch, causal=causal, hooks_header=hooks_header,
                           source=source, config=config)
    return Sm90AttentionKernel(compiled, ENTRY, head_dim, dtype)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None = None,
              causal: bool = False, hooks_header: str | None = None,
              aux: Sequence[torch.Tensor] | Mapping[str, torch.Tensor] | None = None,
              out: torch.Tensor | None = None, lse: torch.Tensor | None = None,
              source: str | None = None, config: Sm90TileConfig | None = None
              ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Forward attention; returns (out, lse). `aux` tensors are passed to the hooks
    in order (AuxArgs.t[0..]). With `out`/`lse` given the kernel writes into them
    (eager only); otherwise it runs as the torch op."""
    aux_list = [] if aux is None else list(aux.values()) if isinstance(aux, Mapping) else list(aux)
    check_inputs(q, k, v, HEAD_DIMS, DTYPES, aux_list, what=NAME)
    scale = 1.0 / math.sqrt(q.shape[3]) if scale is None else float(scale)
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"{NAME}: scale must be a positive finite number, got {scale}")
    device = require_cuda_device(q.device)
    kernel = kernel_for(q.shape[3], q.dtype, device_arch(device), causal, hooks_header, source,
                        config)
    key = register(kernel)
    if out is None and lse is None:
        out, lse = torch.ops.cubridge.attention_fwd(q, k, v, aux_list, scale, key)
    else:
        b, hq, sq, _ = q.shape
        out = torch.empty_like(q) if out is None else out
        lse = q.new_empty((b, hq, sq), dtype=torch.float32) if lse is None else lse
        kernel.run(q, k, v, scale, aux_list, out, lse)
    return out, (lse if kernel.normalizer(device) == "softmax" else None)
