"""Attention kernels of the library as PyTorch ops.

Every library attention kernel takes one by-value `FwdParams` struct (see
kernels/fa_sm80/fa_sm80.cu; mirrored here with ctypes) and exports
`cubridge_kernel_info` (block sizes, threads, shared memory, normaliser), so
one launcher and one `torch.library` custom op, `cubridge::attention_fwd`,
serve them all. The op has a fake (meta) implementation, so it traces under
torch.compile; the kernel to run is named by its cubin's cache key."""

from __future__ import annotations

import ctypes
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from cubridge.build.compile import CompiledKernel
from cubridge.build.driver import load_cubin, require_cuda_device
from cubridge.build.errors import LaunchError

MAX_AUX = 8
MAX_AUX_RANK = 4
NORMALIZERS = {0: "softmax", 1: "elementwise"}


class AuxTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("size", ctypes.c_int64 * MAX_AUX_RANK),
        ("stride", ctypes.c_int64 * MAX_AUX_RANK),
    ]


class AuxArgs(ctypes.Structure):
    _fields_ = [
        ("t", AuxTensor * MAX_AUX),
        ("num", ctypes.c_int),
        ("seqlen_q", ctypes.c_int),
        ("seqlen_k", ctypes.c_int),
    ]


class FwdParams(ctypes.Structure):
    _fields_ = [
        ("q", ctypes.c_void_p), ("k", ctypes.c_void_p), ("v", ctypes.c_void_p),
        ("o", ctypes.c_void_p), ("lse", ctypes.c_void_p),
        *[(f"{t}_{s}_stride", ctypes.c_int64)
          for t in "qkvo" for s in ("batch", "head", "row")],
        ("batch", ctypes.c_int), ("heads_q", ctypes.c_int), ("heads_k", ctypes.c_int),
        ("seqlen_q", ctypes.c_int), ("seqlen_k", ctypes.c_int),
        ("scale", ctypes.c_float), ("scale_log2", ctypes.c_float),
        ("aux", AuxArgs),
    ]


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

    @classmethod
    def from_bytes(cls, raw: bytes, visit_cap: int | None = None) -> KernelInfo:
        v = [int.from_bytes(raw[4 * i:4 * i + 4], "little", signed=True) for i in range(7)]
        if v[4] not in NORMALIZERS:
            raise LaunchError(f"cubridge_kernel_info names unknown normaliser {v[4]}")
        return cls(v[0], v[1], v[2], v[3], NORMALIZERS[v[4]], v[5], v[6], visit_cap)

    def entry_for(self, entry: str, seqlen_k: int) -> str:
        """The entry point that handles Sk keys."""
        blocks = (seqlen_k + self.block_n - 1) // self.block_n
        if self.visit_cap is None:
            return entry
        if blocks > MAX_KEY_BLOCKS:  # a visit-list entry holds the block in 16 bits
            raise LaunchError(f"Sk = {seqlen_k} is {blocks} key blocks of {self.block_n}; "
                              f"this kernel handles at most {MAX_KEY_BLOCKS}")
        return f"{entry}_long" if blocks > self.visit_cap else entry


@dataclass
class AttentionKernel:
    """A compiled library attention kernel for one head dim and dtype."""

    compiled: CompiledKernel
    entry: str
    head_dim: int
    dtype: torch.dtype
    _info: dict[int, KernelInfo] = field(default_factory=dict)  # by device index

    def info(self, device: torch.device) -> KernelInfo:
        """Read once per device (a device-to-host copy), then cached."""
        device = require_cuda_device(device)
        if device.index not in self._info:
            module = load_cubin(self.compiled.key, self.compiled.cubin_path, device)
            raw = module.read_global("cubridge_kernel_info", 28)
            cap = None
            if module.has_global("cubridge_visit_cap"):
                cap = int.from_bytes(module.read_global("cubridge_visit_cap", 4), "little")
            self._info[device.index] = KernelInfo.from_bytes(raw, cap)
        return self._info[device.index]

    def normalizer(self, device: torch.device) -> str:
        return self.info(device).normalizer

    def run(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
            aux: Sequence[torch.Tensor], out: torch.Tensor, lse: torch.Tensor) -> None:
        """Launch into `out` and `lse` (already checked by check_inputs)."""
        device = require_cuda_device(q.device)
        info = self.info(device)
        module = load_cubin(self.compiled.key, self.compiled.cubin_path, device)
        b, hq, sq, _ = q.shape
        _, hk, sk, _ = k.shape
        p = FwdParams()
        p.q, p.k, p.v, p.o, p.lse = (t.data_ptr() for t in (q, k, v, out, lse))
        for name, t in zip("qkvo", (q, k, v, out), strict=True):
            setattr(p, f"{name}_batch_stride", t.stride(0))
            setattr(p, f"{name}_head_stride", t.stride(1))
            setattr(p, f"{name}_row_stride", t.stride(2))
        p.batch, p.heads_q, p.heads_k, p.seqlen_q, p.seqlen_k = b, hq, hk, sq, sk
        p.scale = scale
        p.scale_log2 = scale * math.log2(math.e)
        p.aux = pack_aux(aux, sq, sk)
        grid = ((sq + info.block_m - 1) // info.block_m, hq, b)
        with torch.cuda.device(device):
            module.function(info.entry_for(self.entry, sk)).launch(
                grid, (info.threads, 1, 1), info.smem_bytes, p)


def pack_aux(aux: Sequence[torch.Tensor], seqlen_q: int, seqlen_k: int) -> AuxArgs:
    """AuxArgs for up to 8 aux tensors of rank <= 4 (sizes/strides in elements)."""
    if len(aux) > MAX_AUX:
        raise LaunchError(f"at most {MAX_AUX} aux tensors are supported, got {len(aux)}")
    packed = AuxArgs()
    packed.num, packed.seqlen_q, packed.seqlen_k = len(aux), seqlen_q, seqlen_k
    for i, t in enumerate(aux):
        if t.dim() > MAX_AUX_RANK:
            raise LaunchError(f"aux tensor {i} has rank {t.dim()}; at most {MAX_AUX_RANK}")
        packed.t[i].data = t.data_ptr()
        for d in range(t.dim()):
            packed.t[i].size[d] = t.shape[d]
            packed.t[i].stride[d] = t.stride(d)
    return packed


def check_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, head_dims: Sequence[int],
                 dtypes: Sequence[torch.dtype], aux: Sequence[torch.Tensor] = (),
                 what: str = "attention") -> None:
    """Clear errors for layouts and dtypes the kernels cannot take (cubridge.attention
    conventions: q [B,Hq,Sq,D], k/v [B,Hk,Sk,D], Hq a multiple of Hk)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise ValueError(f"{what}: {name} must be 4-D [B, H, S, D], got shape {tuple(t.shape)}")
        if t.dtype not in dtypes:
            raise TypeError(f"{what}: {name} has dtype {t.dtype}; supported: "
                            f"{', '.join(str(d) for d in dtypes)}")
        if t.stride(3) != 1:
            raise ValueError(f"{what}: {name} must be contiguous in its last dim "
                             f"(strides {t.stride()})")
        if any(s % 8 for s in t.stride()[:3]) or t.data_ptr() % 16:
            raise ValueError(f"{what}: {name} needs 16-byte aligned rows: data pointer and "
                             "batch/head/row strides multiple of 8 elements "
                             f"(strides {t.stride()})")
        if t.device.type != "cuda":
            raise ValueError(f"{what}: {name} is on {t.device}; the kernel needs CUDA tensors")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"{what}: q, k, v dtypes differ ({q.dtype}, {k.dtype}, {v.dtype})")
    if not (q.device == k.device == v.device):
        raise ValueError(f"{what}: q, k, v are on different devices")
    b, hq, _, d = q.shape
    if d not in head_dims:
        raise ValueError(f"{what}: head dim {d} not supported; supported: {list(head_dims)}")
    if k.shape[0] != b or v.shape[0] != b:
        raise ValueError(f"{what}: batch sizes differ: q {b}, k {k.shape[0]}, v {v.shape[0]}")
    if k.shape[3] != d or v.shape[3] != d:
        raise ValueError(f"{what}: k and v head dims must equal q's ({d}); got "
                         f"{k.shape[3]} and {v.shape[3]}")
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
                          "compile it (cubridge.kernels.fa_sm80.kernel_for) in this process first")
    return _KERNELS[key]


def _output_shapes(q: torch.Tensor, v: torch.Tensor) -> tuple[tuple[int, ...], tuple[int, ...]]:
    b, hq, sq, _ = q.shape
    return (b, hq, sq, v.shape[3]), (b, hq, sq)


@torch.library.custom_op("cubridge::attention_fwd", mutates_args=())
def attention_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, aux: list[torch.Tensor],
                  scale: float, kernel_key: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(out [B,Hq,Sq,Dv] in q's dtype, lse [B,Hq,Sq] fp32) from the kernel `kernel_key`."""
    out_shape, lse_shape = _output_shapes(q, v)
    out = torch.empty(out_shape, dtype=q.dtype, device=q.device)
    lse = torch.empty(lse_shape, dtype=torch.float32, device=q.device)
    registered(kernel_key).run(q, k, v, scale, aux, out, lse)
    return out, lse


@attention_fwd.register_fake
def _attention_fwd_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        aux: list[torch.Tensor], scale: float,
                        kernel_key: str) -> tuple[torch.Tensor, torch.Tensor]:
    out_shape, lse_shape = _output_shapes(q, v)
    return q.new_empty(out_shape), q.new_empty(lse_shape, dtype=torch.float32)
