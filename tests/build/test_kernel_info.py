"""The launch facts a cubin states about itself, and the entry point the
launcher picks from them (no GPU needed)."""

from __future__ import annotations

import struct

import pytest

from cubridge.build.attention_op import MAX_KEY_BLOCKS, KernelInfo, LaunchError


def _info(visit_cap: int | None) -> KernelInfo:
    raw = struct.pack("<7i", 128, 64, 128, 98304, 0, 128, 2)
    return KernelInfo.from_bytes(raw, visit_cap)


def test_info_is_read_from_the_cubin_constants():
    info = _info(2048)
    assert (info.block_m, info.block_n, info.threads, info.smem_bytes) == (128, 64, 128, 98304)
    assert info.normalizer == "softmax" and info.head_dim == 128 and info.stages == 2
    with pytest.raises(LaunchError, match="unknown normaliser 7"):
        KernelInfo.from_bytes(struct.pack("<7i", 128, 64, 128, 0, 7, 128, 2))


def test_long_key_ranges_take_the_long_entry_point():
    info = _info(2048)
    assert info.entry_for("fa_sm80_fwd", 2048 * 64) == "fa_sm80_fwd"
    assert info.entry_for("fa_sm80_fwd", 2048 * 64 + 1) == "fa_sm80_fwd_long"
    assert info.entry_for("fa_sm80_fwd", 1) == "fa_sm80_fwd"


def test_kernels_without_a_visit_list_keep_one_entry():
    assert _info(None).entry_for("lowered_fwd", 10**7) == "lowered_fwd"


def test_too_many_key_blocks_is_a_clear_error():
    info = _info(2048)
    assert info.entry_for("fa_sm80_fwd", MAX_KEY_BLOCKS * 64) == "fa_sm80_fwd_long"
    with pytest.raises(LaunchError, match=r"Sk = 4194241 is 65536 key blocks of 64"):
        info.entry_for("fa_sm80_fwd", MAX_KEY_BLOCKS * 64 + 1)
