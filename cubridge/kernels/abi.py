"""The launch ABI the library's attention kernels share, mirrored with ctypes.

Every entry takes one by-value parameter struct. Its common part is
`FwdParams` (pointers, strides, sizes, scales and the hooks' `AuxArgs`; see
kernels/common/hook_types.cuh and each kernel's source); a kernel may put more
in front of it (the Hopper entry's TMA descriptors) by defining its own struct
and overriding `LibraryKernel.launch` (`tensor_map_params(n)` builds the struct
of a kernel taking n CUtensorMaps first). `Launch` is what one launch needs:
the entry point, grid, block, dynamic shared memory and that struct.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from cubridge.build.errors import LaunchError

MAX_AUX = 8  # cubridge::kMaxAux
MAX_AUX_RANK = 4  # cubridge::kMaxAuxRank


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


FWD_PARAMS_FIELDS = [
    ("q", ctypes.c_void_p), ("k", ctypes.c_void_p), ("v", ctypes.c_void_p),
    ("o", ctypes.c_void_p), ("lse", ctypes.c_void_p),
    *[(f"{t}_{s}_stride", ctypes.c_int64) for t in "qkvo" for s in ("batch", "head", "row")],
    ("batch", ctypes.c_int), ("heads_q", ctypes.c_int), ("heads_k", ctypes.c_int),
    ("seqlen_q", ctypes.c_int), ("seqlen_k", ctypes.c_int),
    ("scale", ctypes.c_float), ("scale_log2", ctypes.c_float),
    ("aux", AuxArgs),
]


class FwdParams(ctypes.Structure):
    """The forward pass's parameters (`FwdParams` in the kernels' sources).
    A kernel with more parameters ahead of these builds its struct with
    `FWD_PARAMS_FIELDS` at the end and fills them with `fill_fwd_params`."""

    _fields_ = FWD_PARAMS_FIELDS


TENSOR_MAP_BYTES = 128  # sizeof(CUtensorMap)
TENSOR_MAP_ALIGN = 128  # CUtensorMap is alignas(128) in the CUDA 13 headers (64 in 12.x)


def tensor_map_params(num_maps: int, name: str = "TmaFwdParams") -> type[ctypes.Structure]:
    """The parameter struct of a kernel that takes `num_maps` TMA descriptors
    (CUtensorMap, 128 bytes, 128-byte aligned) ahead of the FwdParams fields:
    `maps[i]` holds descriptor i's bytes (cuTensorMapEncodeTiled fills them), and
    the struct is padded to a multiple of 128 bytes as the CUDA struct is."""
    fields: list[tuple[str, object]] = [
        ("maps", (ctypes.c_uint8 * TENSOR_MAP_BYTES) * num_maps), *FWD_PARAMS_FIELDS]

    class Unpadded(ctypes.Structure):
        _fields_ = fields

    pad = -ctypes.sizeof(Unpadded) % TENSOR_MAP_ALIGN
    if pad:
        fields.append(("_pad", ctypes.c_uint8 * pad))
    return type(name, (ctypes.Structure,), {"_fields_": fields})


@dataclass
class Launch:
    """Everything one kernel launch takes."""

    entry: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem_bytes: int
    params: ctypes.Structure


def pack_aux(aux: Sequence[torch.Tensor], seqlen_q: int, seqlen_k: int) -> AuxArgs:
    """AuxArgs for up to 8 aux tensors of rank <= 4 (sizes/strides in elements)."""
    if len(aux) > MAX_AUX:
        raise LaunchError(f"at most {MAX_AUX} aux tensors are supported, got {len(aux)}")
    packed = AuxArgs()
    packed.num, packed.seqlen_q, packed.seqlen_k = len(aux), seqlen_q, seqlen_k
    for i, t in enumerate(aux):
        rank = t.dim()
        if rank > MAX_AUX_RANK:
            raise LaunchError(f"aux tensor {i} has rank {rank}; at most {MAX_AUX_RANK}")
        slot = packed.t[i]
        slot.data = t.data_ptr()
        # (whole-slice writes: this runs on every call, per aux tensor)
        slot.size[:rank] = t.shape
        slot.stride[:rank] = t.stride()
    return packed


def fill_fwd_params(p: ctypes.Structure, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    out: torch.Tensor, lse: torch.Tensor, scale: float,
                    aux: Sequence[torch.Tensor]) -> ctypes.Structure:
    """Set the FwdParams fields of `p` (a FwdParams, or a struct that ends with them)."""
    b, hq, sq, _ = q.shape
    _, hk, sk, _ = k.shape
    p.q, p.k, p.v, p.o, p.lse = (t.data_ptr() for t in (q, k, v, out, lse))
    p.q_batch_stride, p.q_head_stride, p.q_row_stride, _ = q.stride()
    p.k_batch_stride, p.k_head_stride, p.k_row_stride, _ = k.stride()
    p.v_batch_stride, p.v_head_stride, p.v_row_stride, _ = v.stride()
    p.o_batch_stride, p.o_head_stride, p.o_row_stride, _ = out.stride()
    p.batch, p.heads_q, p.heads_k, p.seqlen_q, p.seqlen_k = b, hq, hk, sq, sk
    p.scale = scale
    p.scale_log2 = scale * math.log2(math.e)
    p.aux = pack_aux(aux, sq, sk)
    return p
