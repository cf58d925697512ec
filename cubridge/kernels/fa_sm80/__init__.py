"""fa_sm80: our FlashAttention-2-class forward kernel (fa_sm80.cu), compiled on
first use and run as the `cubridge::attention_fwd` torch op.

    out, lse = attention(q, k, v, causal=True)                    # library default hooks
    out, lse = attention(q, k, v, hooks_header=text, aux=[table])  # a lowered variant

q [B,Hq,Sq,D], k/v [B,Hk,Sk,D] (cubridge.attention conventions), bf16 or fp16,
D in {64, 128}. lse is None for elementwise normalisers (they have none)."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence

import torch

from cubridge.build.arch import check_supported
from cubridge.build.attention_op import AttentionKernel, check_inputs, register
from cubridge.build.compile import CompiledKernel, compile_cuda
from cubridge.build.driver import device_arch, require_cuda_device
from cubridge.kernels import KernelMetadata, TileConfig, load_metadata

NAME = "fa_sm80"


@functools.cache
def metadata() -> KernelMetadata:
    return load_metadata(NAME)


def compile_for(head_dim: int, dtype: torch.dtype, arch: str, *, causal: bool = False,
                hooks_header: str | None = None, source: str | None = None,
                config: TileConfig | None = None) -> CompiledKernel:
    """Compile (or fetch from the cache) the kernel for one head dim, dtype and
    arch. Needs nvcc, not a GPU. `causal` selects the default header's causal
    mode and cannot be combined with a generated `hooks_header`. `source`
    replaces the text of fa_sm80.cu (a patched copy from LLM-driven lowering; it
    must keep the entry name, FwdParams and cubridge_kernel_info). `config`
    overrides metadata.json's tile config (tuning; the cubin reports its own)."""
    meta = metadata()
    if head_dim not in meta.head_dims:
        raise ValueError(f"{NAME}: head dim {head_dim} not supported (have {meta.head_dims})")
    if dtype not in meta.dtypes:
        raise TypeError(f"{NAME}: dtype {dtype} not supported (have {meta.dtypes})")
    if causal and hooks_header is not None:
        raise ValueError(f"{NAME}: causal=True applies to the default hooks only; a generated "
                         "hooks header states its own mask")
    check_supported(arch, meta.min_arch, f"kernel {NAME} (mma.sync, cp.async)")
    cfg = config or meta.config(head_dim)
    if cfg.stages != 2:
        raise ValueError(f"{NAME}: the pipeline has exactly 2 K/V stages, got {cfg.stages}")
    defines: dict[str, str | int] = {
        "CUBRIDGE_HEAD_DIM": head_dim,
        "CUBRIDGE_BLOCK_M": cfg.block_m,
        "CUBRIDGE_BLOCK_N": cfg.block_n,
        "CUBRIDGE_NUM_WARPS": cfg.num_warps,
        "CUBRIDGE_CAUSAL": int(causal),
    }
    if dtype == torch.float16:
        defines["CUBRIDGE_DTYPE_FP16"] = 1
    if source is None:
        return compile_cuda(meta.source, arch=arch, hooks_header=hooks_header, defines=defines)
    return compile_cuda(source, arch=arch, hooks_header=hooks_header, defines=defines,
                        include_dirs=[meta.directory])


@functools.cache
def kernel_for(head_dim: int, dtype: torch.dtype, arch: str, causal: bool = False,
               hooks_header: str | None = None, source: str | None = None,
               config: TileConfig | None = None) -> AttentionKernel:
    """The compiled kernel as a launchable AttentionKernel (cached per process)."""
    compiled = compile_for(head_dim, dtype, arch, causal=causal, hooks_header=hooks_header,
                           source=source, config=config)
    return AttentionKernel(compiled, metadata().entry, head_dim, dtype)


def _aux_list(aux: Sequence[torch.Tensor] | Mapping[str, torch.Tensor] | None
              ) -> list[torch.Tensor]:
    if aux is None:
        return []
    return list(aux.values()) if isinstance(aux, Mapping) else list(aux)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None = None,
              causal: bool = False, hooks_header: str | None = None,
              aux: Sequence[torch.Tensor] | Mapping[str, torch.Tensor] | None = None,
              out: torch.Tensor | None = None, lse: torch.Tensor | None = None,
              source: str | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Forward attention; returns (out, lse). `aux` tensors are passed to the
    hooks in order (AuxArgs.t[0..]). With `out`/`lse` given the kernel writes
    into them directly (eager only); otherwise it runs as a torch op. `source`:
    see compile_for."""
    meta = metadata()
    aux_list = _aux_list(aux)
    check_inputs(q, k, v, meta.head_dims, meta.dtypes, aux_list, what=NAME)
    scale = 1.0 / math.sqrt(q.shape[3]) if scale is None else float(scale)
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"{NAME}: scale must be a positive finite number, got {scale}")
    device = require_cuda_device(q.device)
    kernel = kernel_for(q.shape[3], q.dtype, device_arch(device), causal, hooks_header, source)
    key = register(kernel)
    if out is None and lse is None:
        out, lse = torch.ops.cubridge.attention_fwd(q, k, v, aux_list, scale, key)
    else:
        b, hq, sq, _ = q.shape
        out = torch.empty_like(q) if out is None else out
        lse = q.new_empty((b, hq, sq), dtype=torch.float32) if lse is None else lse
        _check_outputs(q, v, out, lse)
        kernel.run(q, k, v, scale, aux_list, out, lse)
    return out, (lse if kernel.normalizer(device) == "softmax" else None)


def _check_outputs(q: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                   lse: torch.Tensor) -> None:
    b, hq, sq, _ = q.shape
    want = (b, hq, sq, v.shape[3])
    if tuple(out.shape) != want or out.dtype != q.dtype or out.device != q.device:
        raise ValueError(f"{NAME}: out must be {want} {q.dtype} on {q.device}; got "
                         f"{tuple(out.shape)} {out.dtype} on {out.device}")
    if out.stride(3) != 1 or any(s % 8 for s in out.stride()[:3]) or out.data_ptr() % 16:
        raise ValueError(f"{NAME}: out needs a contiguous last dim and 16-byte aligned rows "
                         f"(strides {out.stride()})")
    if tuple(lse.shape) != (b, hq, sq) or lse.dtype != torch.float32 or not lse.is_contiguous():
        raise ValueError(f"{NAME}: lse must be a contiguous float32 tensor of shape "
                         f"{(b, hq, sq)}; got {tuple(lse.shape)} {lse.dtype}")
