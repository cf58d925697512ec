"""How fa_sm90 is launched: TMA tensor maps made on the host through the CUDA
driver (cuTensorMapEncodeTiled), the `Sm90Params` struct that carries them
before the library's `FwdParams`, and a persistent grid with its tile schedule.
Mirrors `Sm90Params` in fa_sm90.cu (layout checked by a compile test)."""

from __future__ import annotations

import ctypes
import functools
import math
from collections.abc import Sequence

import torch

from cubridge.build.attention_op import AttentionKernel, FwdParams, pack_aux
from cubridge.build.driver import load_cubin, require_cuda_device
from cubridge.build.errors import LaunchError

PANEL_COLS = 64          # TMA box inner size: one 128-byte swizzle span of 16-bit elements
ROWS_PER_CONSUMER = 64   # the epilogue stores 64-row boxes per consumer warpgroup
L2_SECTION_BYTES = 24 << 20  # K/V bytes of the heads scheduled together (H100 L2: 50 MB)
SECTION_WAVES_MASKED = 3     # waves of tiles per schedule section under a mask

# cuda.h enums (CUtensorMapDataType, ...Swizzle, ...L2promotion)
_DATA_TYPE = {torch.float16: 6, torch.bfloat16: 9}
_SWIZZLE_128B = 3
_L2_PROMOTION_256B = 3


class TensorMap(ctypes.Structure):
    """CUtensorMap: 128 opaque bytes (64-byte aligned in the kernel's parameters)."""

    _fields_ = [("opaque", ctypes.c_uint64 * 16)]


def _params_struct() -> type[ctypes.Structure]:
    head = 4 * ctypes.sizeof(TensorMap) + ctypes.sizeof(FwdParams) + 3 * ctypes.sizeof(ctypes.c_int)
    pad = -head % 64  # sizeof a struct holding 64-byte aligned members is a multiple of 64

    class Sm90Params(ctypes.Structure):
        _fields_ = [
            ("tma_q", TensorMap), ("tma_k", TensorMap), ("tma_v", TensorMap), ("tma_o", TensorMap),
            ("p", FwdParams),
            ("num_m_blocks", ctypes.c_int), ("num_tiles", ctypes.c_int), ("section", ctypes.c_int),
            ("_pad", ctypes.c_uint8 * pad),
        ]

    return Sm90Params


Sm90Params = _params_struct()


@functools.cache
def _encode_tiled():
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        raise LaunchError(f"fa_sm90 needs the CUDA driver library (libcuda.so.1): {exc}") from exc
    fn = lib.cuTensorMapEncodeTiled
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p,
                   ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint64),
                   ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint32),
                   ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    return fn


def tensor_map(t: torch.Tensor, box_rows: int, what: str) -> TensorMap:
    """A 4-D map over t [B, H, S, D] (last dim contiguous) as (D, S, H, B), boxes of
    64 columns x `box_rows` rows, 128-byte swizzled, zero fill out of bounds."""
    if t.dtype not in _DATA_TYPE:
        raise LaunchError(f"fa_sm90: {what} has dtype {t.dtype}; TMA maps take bf16 or fp16")
    b, h, s, d = t.shape
    elem = t.element_size()
    dims = (d, s, h, b)
    strides = []
    for size, stride, outer in ((s, t.stride(2), d), (h, t.stride(1), d * s),
                                (b, t.stride(0), d * s * h)):
        # a dimension of size 1 is only ever indexed at 0: any legal stride will do
        strides.append((stride if size > 1 else outer) * elem)
    bad = [x for x in strides if x % 16 or x >= 1 << 40]
    if bad or t.data_ptr() % 16:
        raise LaunchError(f"fa_sm90: {what} strides {t.stride()} (bytes {strides}) or its data "
                          "pointer are not 16-byte aligned, as TMA requires")
    tmap = TensorMap()
    rc = _encode_tiled()(
        ctypes.byref(tmap), _DATA_TYPE[t.dtype], 4, ctypes.c_void_p(t.data_ptr()),
        (ctypes.c_uint64 * 4)(*dims), (ctypes.c_uint64 * 3)(*strides),
        (ctypes.c_uint32 * 4)(PANEL_COLS, box_rows, 1, 1), (ctypes.c_uint32 * 4)(1, 1, 1, 1),
        0, _SWIZZLE_128B, _L2_PROMOTION_256B, 0)
    if rc != 0:
        raise LaunchError(f"fa_sm90: cuTensorMapEncodeTiled failed for {what} (CUresult {rc}; "
                          f"shape {tuple(t.shape)}, strides {t.stride()}, box 64 x {box_rows})")
    return tmap


def schedule_section(heads_q: int, heads_k: int, seqlen_k: int, head_dim: int,
                     elem_bytes: int, num_m_blocks: int, num_ctas: int,
                     masked: bool = False) -> int:
    """(batch, head) pairs per section of the tile order (whole GQA groups).

    Tiles run section by section, query blocks last-first inside one. Without a
    mask a section is about one wave of tiles (num_ctas / num_m_blocks heads): the
    CTAs that run together then read the same K/V blocks at the same time. With
    one (tiles of unequal length) it is three waves: measured on an H100, one
    wave gives +6% full attention but -9% causal (MHA, S = 4096), three waves
    keep causal where twelve heads had it. Never more K/V than the L2 budget."""
    group = heads_q // heads_k
    kv_bytes = 2 * seqlen_k * head_dim * elem_bytes * heads_k // heads_q  # per q head
    wave = max(1, round(num_ctas / max(num_m_blocks, 1))) * (SECTION_WAVES_MASKED if masked else 1)
    budget = max(1, L2_SECTION_BYTES // max(kv_bytes * group, 1))
    groups = max(1, min(-(-wave // group), budget))
    return group * groups


@functools.cache
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


class Sm90AttentionKernel(AttentionKernel):
    """A compiled fa_sm90: the launch builds tensor maps and runs a persistent grid."""

    @staticmethod
    def masked(module) -> bool:
        """Whether the build's hooks mask (`cubridge_sm90_masked` in the cubin)."""
        return module.read_global("cubridge_sm90_masked", 4) != bytes(4)

    def run(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
            aux: Sequence[torch.Tensor], out: torch.Tensor, lse: torch.Tensor) -> None:
        device = require_cuda_device(q.device)
        info = self.info(device)
        b, hq, sq, d = q.shape
        _, hk, sk, _ = k.shape
        prm = Sm90Params()
        prm.tma_q = tensor_map(q, info.block_m, "q")
        prm.tma_k = tensor_map(k, info.block_n, "k")
        prm.tma_v = tensor_map(v, info.block_n, "v")
        prm.tma_o = tensor_map(out, ROWS_PER_CONSUMER, "out")
        p = prm.p
        p.q, p.k, p.v, p.o, p.lse = (t.data_ptr() for t in (q, k, v, out, lse))
        for name, t in zip("qkvo", (q, k, v, out), strict=True):
            setattr(p, f"{name}_batch_stride", t.stride(0))
            setattr(p, f"{name}_head_stride", t.stride(1))
            setattr(p, f"{name}_row_stride", t.stride(2))
        p.batch, p.heads_q, p.heads_k, p.seqlen_q, p.seqlen_k = b, hq, hk, sq, sk
        p.scale = scale
        p.scale_log2 = scale * math.log2(math.e)
        p.aux = pack_aux(aux, sq, sk)
        prm.num_m_blocks = (sq + info.block_m - 1) // info.block_m
        prm.num_tiles = b * hq * prm.num_m_blocks
        if prm.num_tiles >= 1 << 31:
            raise LaunchError(f"fa_sm90: {prm.num_tiles} tiles exceed the schedule's int range")
        grid = (min(prm.num_tiles, _sm_count(device.index)), 1, 1)
        module = load_cubin(self.compiled.key, self.compiled.cubin_path, device)
        prm.section = schedule_section(hq, hk, sk, d, q.element_size(), prm.num_m_blocks,
                                       grid[0], self.masked(module))
        with torch.cuda.device(device):
            module.function(self.entry).launch(grid, (info.threads, 1, 1), info.smem_bytes, prm)
