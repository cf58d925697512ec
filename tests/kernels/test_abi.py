"""The launch ABI's host side (cubridge/kernels/abi.py): what `pack_aux` and
`fill_fwd_params` write is what the kernels read (sizes, strides in elements,
pointers), for every aux rank and for strided views. These run on every call, so
they are written for speed; these tests hold them to the tensors' layouts."""

from __future__ import annotations

import pytest
import torch

from cubridge.build.errors import LaunchError
from cubridge.kernels.abi import MAX_AUX_RANK, FwdParams, fill_fwd_params, pack_aux


def _aux_of_every_rank() -> list[torch.Tensor]:
    return [torch.tensor(3.0),                               # rank 0
            torch.arange(10, dtype=torch.int32)[::2],        # rank 1, stride 2
            torch.zeros(6, 5, dtype=torch.uint8).t(),        # rank 2, transposed
            torch.zeros(2, 3, 4, dtype=torch.bfloat16),      # rank 3
            torch.zeros(2, 3, 8, 5)[:, :, ::4, 1:]]          # rank 4, sliced


def test_pack_aux_writes_each_tensors_sizes_strides_and_pointer():
    aux = _aux_of_every_rank()
    packed = pack_aux(aux, 100, 200)
    assert (packed.num, packed.seqlen_q, packed.seqlen_k) == (len(aux), 100, 200)
    for i, t in enumerate(aux):
        slot = packed.t[i]
        assert slot.data == t.data_ptr()
        assert list(slot.size) == [*t.shape, *[0] * (MAX_AUX_RANK - t.dim())]
        assert list(slot.stride) == [*t.stride(), *[0] * (MAX_AUX_RANK - t.dim())]
    assert packed.t[len(aux)].data is None and list(packed.t[len(aux)].size) == [0] * 4


def test_pack_aux_rejects_what_the_kernels_cannot_read():
    with pytest.raises(LaunchError, match="rank 5"):
        pack_aux([torch.zeros(1, 1, 1, 1, 1)], 1, 1)
    with pytest.raises(LaunchError, match="at most 8"):
        pack_aux([torch.zeros(1)] * 9, 1, 1)


def test_fill_fwd_params_takes_strides_of_views():
    q = torch.zeros(2, 8, 4, 16).transpose(1, 2)        # [B, H=4, S=8, D] as a view
    k = torch.zeros(2, 2, 6, 16)
    v = torch.zeros(2, 6, 2, 16).transpose(1, 2)
    out = torch.zeros(2, 4, 8, 16)
    lse = torch.zeros(2, 4, 8)
    p = fill_fwd_params(FwdParams(), q, k, v, out, lse, 0.5, [torch.zeros(3)])
    for name, t in zip("qkvo", (q, k, v, out), strict=True):
        assert (getattr(p, f"{name}_batch_stride"), getattr(p, f"{name}_head_stride"),
                getattr(p, f"{name}_row_stride")) == t.stride()[:3]
    assert (p.q, p.k, p.v, p.o, p.lse) == tuple(t.data_ptr() for t in (q, k, v, out, lse))
    assert (p.batch, p.heads_q, p.heads_k, p.seqlen_q, p.seqlen_k) == (2, 4, 2, 8, 6)
    assert p.scale == 0.5 and p.aux.num == 1 and p.aux.seqlen_k == 6
