"""How fa_sm90 is launched: TMA tensor maps made on the host through the CUDA
driver (cuTensorMapEncodeTiled), the `Sm90Params` struct that carries them
ahead of the library's FwdParams fields, and a persistent grid with its tile
schedule. Mirrors `Sm90Params` in fa_sm90.cu (layout checked by a compile test)."""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Sequence

import torch

from cubridge.build.attention_op import KernelInfo
from cubridge.build.driver import current_raw_stream
from cubridge.build.errors import LaunchError
from cubridge.kernels.abi import FwdParams, Launch, fill_fwd_params
from cubridge.kernels.fast_divide import FastDivisor, fast_divisor

# TMA box inner sizes: one swizzle span of 16-bit elements (the kernel's panel widths,
# `cubridge_tile_panels`: 64 with the 128-byte swizzle, 32 with the 64-byte one)
SWIZZLE_OF_PANEL = {64: 3, 32: 2}  # CU_TENSOR_MAP_SWIZZLE_128B, ..._64B
ROWS_PER_CONSUMER = 64   # the epilogue stores 64-row boxes per consumer warpgroup
L2_SECTION_BYTES = 24 << 20  # K/V bytes of the heads scheduled together (H100 L2: 50 MB)
SECTION_WAVES = 1  # waves of tiles per schedule section (section_ab.py varies it)

# cuda.h enums (CUtensorMapDataType, ...Swizzle, ...L2promotion)
_DATA_TYPE = {torch.float16: 6, torch.bfloat16: 9}
_L2_PROMOTION_256B = 3


class TensorMap(ctypes.Structure):
    """CUtensorMap: 128 opaque bytes (128-byte aligned in the kernel's parameters)."""

    _fields_ = [("opaque", ctypes.c_uint64 * 16)]


_SCHEDULE_FIELDS = [("num_m_blocks", ctypes.c_int), ("num_tiles", ctypes.c_int),
                    ("section", ctypes.c_int), ("tile_counter", ctypes.c_void_p),
                    ("by_section_tiles", FastDivisor), ("by_section", FastDivisor),
                    ("by_heads_q", FastDivisor), ("by_group", FastDivisor)]


def _params_struct() -> type[ctypes.Structure]:
    fields = [*((f"tma_{t}", TensorMap) for t in "qkvo"), ("p", FwdParams), *_SCHEDULE_FIELDS]

    class Head(ctypes.Structure):
        _fields_ = fields

    pad = -ctypes.sizeof(Head) % 128  # CUtensorMap is alignas(128) in CUDA 13 headers

    class Sm90Params(ctypes.Structure):
        """The tensor maps, the FwdParams every entry takes (as `p`), the tile schedule,
        and Q's map in boxes of one consumer's rows (the one-Q-buffer builds' loads)."""

        _fields_ = [*fields, ("_pad", ctypes.c_uint8 * pad), ("tma_q_rows", TensorMap)]

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


def tensor_map(t: torch.Tensor, box_rows: int, what: str, panel_cols: int = 64) -> TensorMap:
    """A 4-D map over t [B, H, S, D] (last dim contiguous) as (D, S, H, B), boxes of
    `panel_cols` columns (64: 128-byte swizzled, 32: 64-byte) x `box_rows` rows, zero
    fill out of bounds."""
    if t.dtype not in _DATA_TYPE:
        raise LaunchError(f"fa_sm90: {what} has dtype {t.dtype}; TMA maps take bf16 or fp16")
    if panel_cols not in SWIZZLE_OF_PANEL:
        raise LaunchError(f"fa_sm90: the kernel's {what} tiles have {panel_cols}-column panels; "
                          f"the launcher encodes {sorted(SWIZZLE_OF_PANEL)}")
    return _encoded(t.data_ptr(), t.dtype, tuple(t.shape), t.stride(), t.element_size(),
                    box_rows, what, panel_cols)


@functools.lru_cache(maxsize=256)
def _encoded(ptr: int, dtype: torch.dtype, shape: tuple[int, ...], stride: tuple[int, ...],
             elem: int, box_rows: int, what: str, panel_cols: int = 64) -> TensorMap:
    """The map is a function of these alone: repeated launches on the same tensors
    (a training or decoding loop) reuse it instead of encoding it again."""
    b, h, s, d = shape
    strides = []
    for size, step, outer in ((s, stride[2], d), (h, stride[1], d * s), (b, stride[0], d * s * h)):
        # a dimension of size 1 is only ever indexed at 0: any legal stride will do
        strides.append((step if size > 1 else outer) * elem)
    if any(x % 16 or x >= 1 << 40 for x in strides) or ptr % 16:
        raise LaunchError(f"fa_sm90: {what} strides {stride} (bytes {strides}) or its data "
                          "pointer are not 16-byte aligned, as TMA requires")
    tmap = TensorMap()
    rc = _encode_tiled()(
        ctypes.byref(tmap), _DATA_TYPE[dtype], 4, ctypes.c_void_p(ptr),
        (ctypes.c_uint64 * 4)(d, s, h, b), (ctypes.c_uint64 * 3)(*strides),
        (ctypes.c_uint32 * 4)(panel_cols, box_rows, 1, 1), (ctypes.c_uint32 * 4)(1, 1, 1, 1),
        0, SWIZZLE_OF_PANEL[panel_cols], _L2_PROMOTION_256B, 0)
    if rc != 0:
        raise LaunchError(f"fa_sm90: cuTensorMapEncodeTiled failed for {what} (CUresult {rc}; "
                          f"shape {shape}, strides {stride}, box {panel_cols} x {box_rows})")
    return tmap


def schedule_section(heads_q: int, heads_k: int, seqlen_k: int, head_dim: int,
                     elem_bytes: int, num_m_blocks: int, num_ctas: int,
                     head_dim_v: int | None = None) -> int:
    """(batch, head) pairs per section of the tile order (whole GQA groups).

    Tiles run section by section, query blocks last-first inside one, and CTAs
    claim them as they free up. A section is about one wave of tiles (num_ctas /
    num_m_blocks heads), so the CTAs running together read the same K/V: measured
    on an H100 against sections of twelve heads, +6% full attention (static
    schedule) and, with tiles claimed as CTAs free up, causal +1% over three waves
    and +6-10% over the static schedule's three (MHA, S = 4096). Never more K/V
    than the L2 budget."""
    group = heads_q // heads_k
    kv_dims = head_dim + (head_dim if head_dim_v is None else head_dim_v)
    kv_bytes = seqlen_k * kv_dims * elem_bytes * heads_k // heads_q  # per q head
    wave_heads = max(1, round(num_ctas / max(num_m_blocks, 1))) * SECTION_WAVES
    budget = max(1, L2_SECTION_BYTES // max(kv_bytes * group, 1))
    return group * max(1, min(-(-wave_heads // group), budget))


@functools.cache
def sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


# The tile counter of each (device, stream): [next, done], zero before a launch. CTAs
# claim tiles past their first from it and the last CTA to finish zeroes it, so the
# launches of one stream (in order) share one and never reset it from the host;
# streams that may run at the same time each have their own. (Not covered: two CUDA
# graphs captured on one stream and replayed at once on different streams.)
_TILE_COUNTERS: dict[tuple[int, int], torch.Tensor] = {}


def tile_counter(device: torch.device) -> torch.Tensor:
    key = (device.index or 0, current_raw_stream(device))
    counter = _TILE_COUNTERS.get(key)
    if counter is None:
        counter = _TILE_COUNTERS[key] = torch.zeros(2, dtype=torch.int32, device=device)
    return counter


def sm90_launch(info: KernelInfo, entry: str, q: torch.Tensor, k: torch.Tensor,
                v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor, scale: float,
                aux: Sequence[torch.Tensor]) -> Launch:
    """One launch of fa_sm90: tensor maps, FwdParams fields, the persistent grid."""
    b, hq, sq, d = q.shape
    _, hk, sk, _ = k.shape
    # (the producer keeps a ring slot's batch and K/V head in 16 bits each)
    if b > 0xFFFF or hk > 0xFFFF:
        raise LaunchError(f"fa_sm90: batch {b} and K/V heads {hk} must each be at most 65535")
    if info.panel_cols is None:  # (an edited source that lost the constant)
        raise LaunchError("fa_sm90: the cubin states no cubridge_tile_panels (the panel "
                          "widths of its shared tiles), so its TMA boxes cannot be encoded")
    qk_cols, v_cols = info.panel_cols
    prm = Sm90Params()
    prm.tma_q = tensor_map(q, info.block_m, "q", qk_cols)
    prm.tma_k = tensor_map(k, info.block_n, "k", qk_cols)
    prm.tma_v = tensor_map(v, info.block_n, "v", v_cols)
    prm.tma_o = tensor_map(out, ROWS_PER_CONSUMER, "out", v_cols)
    prm.tma_q_rows = tensor_map(q, ROWS_PER_CONSUMER, "q", qk_cols)
    fill_fwd_params(prm.p, q, k, v, out, lse, scale, aux)
    prm.num_m_blocks = (sq + info.block_m - 1) // info.block_m
    tiles = b * hq * prm.num_m_blocks
    if tiles >= 1 << 30:  # (claims run up to grid + tiles in an int)
        raise LaunchError(f"fa_sm90: {tiles} tiles exceed the schedule's int range")
    prm.num_tiles = tiles
    grid = (min(tiles, sm_count(q.device.index or 0)), 1, 1)
    prm.section = schedule_section(hq, hk, sk, d, q.element_size(), prm.num_m_blocks, grid[0],
                                   v.shape[3])
    prm.tile_counter = tile_counter(q.device).data_ptr()
    prm.by_section_tiles = fast_divisor(prm.section * prm.num_m_blocks)
    prm.by_section = fast_divisor(prm.section)
    prm.by_heads_q = fast_divisor(hq)
    prm.by_group = fast_divisor(hq // hk)
    return Launch(entry, grid, (info.threads, 1, 1), info.smem_bytes, prm)
