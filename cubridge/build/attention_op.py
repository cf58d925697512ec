"""Attention kernels of the library as PyTorch ops.

Every library attention kernel exports `cubridge_kernel_info` (block sizes,
threads, shared memory, normaliser), and its library entry says how to launch
it (`LibraryKernel.launch`: parameter struct and grid, cubridge.kernels.abi),
so one launcher and one `torch.library` custom op, `cubridge::attention_fwd`,
serve them all. The op has a fake (meta) implementation, so it traces under
torch.compile; the kernel to run is named by its cubin's cache key."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from cubridge.build.compile import CompiledKernel
from cubridge.build.driver import load_cubin, require_cuda_device
from cubridge.build.errors import LaunchError

NORMALIZERS = {0: "softmax", 1: "elementwise"}


MAX_KEY_BLOCKS = 0xFFFF  # key blocks per sequence of kernels with a visit list


@dataclass(frozen=True)
class KernelInfo:
    """Launch facts the cubin states about itself (`cubridge_kernel_info`)."""

    block_m: int
    block_n: int
    threads: int
    smem_bytes: int
    normalizer: str
    head_dim: int
    stages: int
    # Key blocks the entry lists per CTA (`cubridge_visit_cap`); past that the
    # launcher takes the `<entry>_long` variant. None: the kernel has one entry.
    visit_cap: int | None = None
    # Columns of the Q/K and of the V/O tiles' swizzled shared-memory panels
    # (`cubridge_tile_panels`; TMA kernels encode their boxes with them). None: the
    # kernel states none.
    panel_cols: tuple[int, int] | None = None

    @classmethod
    def from_bytes(cls, raw: bytes, visit_cap: int | None = None,
                   panel_cols: tuple[int, int] | None = None) -> KernelInfo:
        v = [int.from_bytes(raw[4 * i:4 * i + 4], "little", signed=True) for i in range(7)]
        if v[4] not in NORMALIZERS:
            raise LaunchError(f"cubridge_kernel_info names unknown normaliser {v[4]}")
        return cls(v[0], v[1], v[2], v[3], NORMALIZERS[v[4]], v[5], v[6], visit_cap, panel_cols)

    def entry_for(self, entry: str, seqlen_k: int) -> str:
        """The entry point that handles Sk keys."""
        blocks = (seqlen_k + self.block_n - 1) // self.block_n
        if self.visit_cap is None:
            return entry
        if blocks > MAX_KEY_BLOCKS:  # a visit-list entry holds the block in 16 bits
            raise LaunchError(f"Sk = {seqlen_k} is {blocks} key blocks of {self.block_n}; "
                              f"this kernel handles at most {MAX_KEY_BLOCKS}")
        return f"{entry}_long" if blocks > self.visit_cap else entry


# (info, q, k, v, out, lse, scale, aux) -> cubridge.kernels.abi.Launch: a library
# entry's launch ABI (LibraryKernel.launch).
LaunchABI = Callable[..., Any]


@dataclass
class AttentionKernel:
    """A compiled library attention kernel for one head dim and dtype, with its
    entry's launch ABI."""

    compiled: CompiledKernel
    entry: str
    head_dim: int
    dtype: torch.dtype
    launch: LaunchABI
    _info: dict[int, KernelInfo] = field(default_factory=dict)  # by device index
    _modules: dict[int, Any] = field(default_factory=dict)  # loaded cubins, by device index

    def info(self, device: torch.device) -> KernelInfo:
        """Read once per device (a device-to-host copy), then cached."""
        device = require_cuda_device(device)
        if device.index not in self._info:
            module = load_cubin(self.compiled.key, self.compiled.cubin_path, device)
            raw = module.read_global("cubridge_kernel_info", 28)
            cap = None
            if module.has_global("cubridge_visit_cap"):
                cap = int.from_bytes(module.read_global("cubridge_visit_cap", 4), "little")
            panels = None
            if module.has_global("cubridge_tile_panels"):
                words = module.read_global("cubridge_tile_panels", 8)
                panels = (int.from_bytes(words[:4], "little"), int.from_bytes(words[4:], "little"))
            self._info[device.index] = KernelInfo.from_bytes(raw, cap, panels)
        return self._info[device.index]

    def normalizer(self, device: torch.device) -> str:
        return self.info(device).normalizer

    def run(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
            aux: Sequence[torch.Tensor], out: torch.Tensor, lse: torch.Tensor) -> None:
        """Launch into `out` and `lse` (already checked by check_inputs)."""
        device = require_cuda_device(q.device)
        launch = self.launch(self.info(device), q, k, v, out, lse, scale, aux)
        module = self._modules.get(device.index)
        if module is None:
            module = self._modules[device.index] = load_cubin(
                self.compiled.key, self.compiled.cubin_path, device)
        function = module.function(launch.entry)
        if torch.cuda.current_device() == device.index:
            function.launch(launch.grid, launch.block, launch.smem_bytes, launch.params)
        else:
            with torch.cuda.device(device):
                function.launch(launch.grid, launch.block, launch.smem_bytes, launch.params)


def check_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, head_dims: Sequence[int],
                 dtypes: Sequence[torch.dtype], aux: Sequence[torch.Tensor] = (),
                 what: str = "attention",
                 v_head_dims: Mapping[int, Sequence[int]] | None = None) -> None:
    """Clear errors for layouts and dtypes the kernels cannot take (cubridge.attention
    conventions: q [B,Hq,Sq,D], k [B,Hk,Sk,D], v [B,Hk,Sk,Dv], Hq a multiple of Hk).
    Dv is D unless `v_head_dims` maps D to the V head dims taken beside it (then
    `head_dims` may leave D out)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise ValueError(f"{what}: {name} must be 4-D [B, H, S, D], got shape {tuple(t.shape)}")
        if t.dtype not in dtypes:
            raise TypeError(f"{what}: {name} has dtype {t.dtype}; supported: "
                            f"{', '.join(str(d) for d in dtypes)}")
        strides = t.stride()
        if strides[3] != 1:
            raise ValueError(f"{what}: {name} must be contiguous in its last dim "
                             f"(strides {strides})")
        if strides[0] % 8 or strides[1] % 8 or strides[2] % 8 or t.data_ptr() % 16:
            raise ValueError(f"{what}: {name} needs 16-byte aligned rows: data pointer and "
                             "batch/head/row strides multiple of 8 elements "
                             f"(strides {strides})")
        if t.device.type != "cuda":
            raise ValueError(f"{what}: {name} is on {t.device}; the kernel needs CUDA tensors")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"{what}: q, k, v dtypes differ ({q.dtype}, {k.dtype}, {v.dtype})")
    if not (q.device == k.device == v.device):
        raise ValueError(f"{what}: q, k, v are on different devices")
    b, hq, _, d = q.shape
    v_dims = dict(v_head_dims or {})
    if d not in head_dims and d not in v_dims:
        raise ValueError(f"{what}: head dim {d} not supported; supported: "
                         f"{sorted({*head_dims, *v_dims})}")
    if k.shape[0] != b or v.shape[0] != b:
        raise ValueError(f"{what}: batch sizes differ: q {b}, k {k.shape[0]}, v {v.shape[0]}")
    if k.shape[3] != d:
        raise ValueError(f"{what}: k's head dim must equal q's ({d}); got {k.shape[3]}")
    allowed_v = list(v_dims.get(d, (d,)))
    if v.shape[3] not in allowed_v:
        raise ValueError(f"{what}: v's head dim {v.shape[3]} is not one taken with a QK "
                         f"head dim of {d} ({' or '.join(map(str, allowed_v))})")
    if k.shape[1:3] != v.shape[1:3]:
        raise ValueError(f"{what}: k {tuple(k.shape)} and v {tuple(v.shape)} differ in heads "
                         "or length")
    hk = k.shape[1]
    if hq % hk:
        raise ValueError(f"{what}: q heads ({hq}) must be a multiple of kv heads ({hk})")
    if b > 65535 or hq > 65535:
        raise ValueError(f"{what}: batch and q heads must be <= 65535 (grid limit)")
    if q.shape[2] == 0 or k.shape[2] == 0:
        raise ValueError(f"{what}: empty sequence (Sq={q.shape[2]}, Sk={k.shape[2]})")
    for i, t in enumerate(aux):
        if t.device != q.device:
            raise ValueError(f"{what}: aux tensor {i} is on {t.device}, q on {q.device}")


# Attention kernels the op may run, by cubin cache key (a cache of loaded kernels).
_KERNELS: dict[str, AttentionKernel] = {}


def register(kernel: AttentionKernel) -> str:
    """Make a kernel callable through the op; returns the key to pass to it."""
    _KERNELS[kernel.compiled.key] = kernel
    return kernel.compiled.key


def registered(key: str) -> AttentionKernel:
    if key not in _KERNELS:
        raise LaunchError(f"no attention kernel registered under key {key[:12]}...: "
                          "compile it (LibraryKernel.launchable) in this process first")
    return _KERNELS[key]


def _output_shapes(q: torch.Tensor, v: torch.Tensor) -> tuple[tuple[int, ...], tuple[int, ...]]:
    b, hq, sq, _ = q.shape
    return (b, hq, sq, v.shape[3]), (b, hq, sq)


def _attention_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, aux: list[torch.Tensor],
                   scale: float, kernel_key: str) -> tuple[torch.Tensor, torch.Tensor]:
    out_shape, lse_shape = _output_shapes(q, v)
    out = torch.empty(out_shape, dtype=q.dtype, device=q.device)
    lse = torch.empty(lse_shape, dtype=torch.float32, device=q.device)
    registered(kernel_key).run(q, k, v, scale, aux, out, lse)
    return out, lse


@torch.library.custom_op("cubridge::attention_fwd", mutates_args=())
def attention_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, aux: list[torch.Tensor],
                  scale: float, kernel_key: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(out [B,Hq,Sq,Dv] in q's dtype, lse [B,Hq,Sq] fp32) from the kernel `kernel_key`."""
    return _attention_fwd(q, k, v, aux, scale, kernel_key)


def call_attention_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       aux: list[torch.Tensor], scale: float, kernel_key: str
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """`torch.ops.cubridge.attention_fwd` where something may trace, fake or
    differentiate the call (torch.compile, tensor subclasses, inputs that require
    grad); else the op's body directly: the custom op's Python dispatch costs
    about 100 us a call, as long as a small problem's kernel."""
    if (torch.compiler.is_compiling() or type(q) is not torch.Tensor
            or (torch.is_grad_enabled() and (q.requires_grad or k.requires_grad
                                             or v.requires_grad))):
        return _OP(q, k, v, aux, scale, kernel_key)
    return _attention_fwd(q, k, v, aux, scale, kernel_key)


_OP = torch.ops.cubridge.attention_fwd


@attention_fwd.register_fake
def _attention_fwd_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        aux: list[torch.Tensor], scale: float,
                        kernel_key: str) -> tuple[torch.Tensor, torch.Tensor]:
    out_shape, lse_shape = _output_shapes(q, v)
    return q.new_empty(out_shape), q.new_empty(lse_shape, dtype=torch.float32)
