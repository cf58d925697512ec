"""Head dims beyond the equal ones each entry has a tile for. Specs whose V head dim
differs from QK's (MLA's 192/128). fa_sm90 builds that
pair as it is (metadata "head_dim_pairs", CUBRIDGE_HEAD_DIM_V), so on Hopper it is
selected as for any head dim it builds; on Ampere no entry builds it, and fa_sm80,
whose build takes CUBRIDGE_HEAD_DIM_V, is the one the LLM path edits. A pair no
entry builds on Hopper (256/128) goes to fa_sm90 for the LLM path to edit. A
`--kernel` entry without a V head dim macro is a clear error."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from cubridge.attention import HeadConfig
from cubridge.kernels import LibraryKernel, choose_for_spec, get_kernel, select_for_spec
from cubridge.spec import load

SPECS = Path(__file__).resolve().parents[2] / "examples" / "specs"


def test_mla_on_hopper_selects_fa_sm90_which_builds_the_pair_as_it_is():
    spec = load(SPECS / "mla.py")
    fa_sm90 = get_kernel("fa_sm90")
    assert select_for_spec(spec, "sm_90a") is fa_sm90 and fa_sm90.takes_head_dim_v
    assert fa_sm90.metadata.supports_dims(192, 128)
    assert not fa_sm90.metadata.supports_dims(256, 128)
    assert str(choose_for_spec(spec, "sm_90a")).startswith(
        "fa_sm90 for sm_90a, D=192/128, bfloat16, softmax: the highest-priority entry")
    # its build: the pair's own tile (one Q buffer: O is staged in it) and both macros
    defines = fa_sm90.compile_defines(192, spec.dtypes[0], head_dim_v=128)
    assert defines["CUBRIDGE_HEAD_DIM"] == 192 and defines["CUBRIDGE_HEAD_DIM_V"] == 128
    assert defines["CUBRIDGE_Q_BUFFERS"] == 1 and defines["CUBRIDGE_BLOCK_N"] == 128
    assert fa_sm90.build_for(192, 128).config == fa_sm90.build_for(192, 128, {}).config


def test_mla_on_ampere_selects_fa_sm80_for_the_llm_path_and_says_why():
    reason = str(choose_for_spec(load(SPECS / "mla.py"), "sm_80"))
    assert reason.startswith("fa_sm80 for sm_80, D=192/128")
    assert "fa_sm80 takes a V head dim apart from QK's (CUBRIDGE_HEAD_DIM_V)" in reason
    assert "QK/V head dims 192/128 not among 64, 128, 256 (QK = V)" in reason


def test_a_pair_no_entry_builds_goes_to_fa_sm90_for_the_llm_path():
    spec = dataclasses.replace(load(SPECS / "mla.py"),
                               configs=[HeadConfig("wide_qk", 16, 16, 256, 128)])
    sel = choose_for_spec(spec, "sm_90a")
    assert sel.kernel.name == "fa_sm90"
    assert "no entry supports the request as it is" in sel.reason
    assert "QK/V head dims 256/128 not among 64, 96, 128, 256 (QK = V)" in sel.reason


def test_equal_head_dims_on_hopper_keep_fa_sm90():
    spec = load(SPECS / "cosine.py")
    chosen = select_for_spec(spec, "sm_90a")
    assert chosen.name == "fa_sm90"
    assert str(choose_for_spec(spec, "sm_90a")).startswith(
        "fa_sm90 for sm_90a, D=128, bfloat16, softmax: the highest-priority entry")


def test_asking_an_entry_without_a_v_head_dim_for_mla_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(LibraryKernel, "takes_head_dim_v",
                        property(lambda self: self.name != "fa_sm80"))
    spec = load(SPECS / "mla.py")
    with pytest.raises(ValueError, match=r"fa_sm80 cannot serve mla: its QK and V head dims "
                       r"differ \(192/128\) .* use fa_sm90"):
        select_for_spec(spec, "sm_90a", "fa_sm80")
    assert select_for_spec(spec, "sm_90a", "fa_sm90").name == "fa_sm90"


def test_head_dims_between_the_tiles_run_on_the_next_wider_build():
    """fa_sm90 pads (metadata "pads_head_dims"): a head dim that is a multiple of 8
    between 64 and 256 runs on the next wider build, whose TMA loads zero-fill the
    columns past it; the cubin is that build's own."""
    import torch

    meta = get_kernel("fa_sm90").metadata
    assert [meta.built_dims(d) for d in (80, 96, 112, 160, 192, 248)] == \
        [(96, 96)] * 2 + [(128, 128)] + [(256, 256)] * 3
    assert [meta.built_dims(d) for d in (48, 100, 264)] == [None, None, None]
    fa_sm90 = get_kernel("fa_sm90")
    assert fa_sm90.compile_defines(80, torch.bfloat16) == fa_sm90.compile_defines(96,
                                                                                torch.bfloat16)
    assert fa_sm90.compile_defines(112, torch.bfloat16) == \
        fa_sm90.compile_defines(128, torch.bfloat16)
    assert fa_sm90.compile_defines(96, torch.bfloat16) != \
        fa_sm90.compile_defines(128, torch.bfloat16)  # (96 has a build of its own)
    assert fa_sm90.config(192) == fa_sm90.config(256) and fa_sm90.table_block(80) == (64, 128)
    spec = load(SPECS / "phi3_mini.py")
    assert str(choose_for_spec(spec, "sm_90a")).startswith(
        "fa_sm90 for sm_90a, D=96, bfloat16, softmax: the highest-priority entry")
    with pytest.raises(ValueError, match="fa_sm90: head dim 100 not supported"):
        fa_sm90.compile_defines(100, torch.bfloat16)


def test_fa_sm80_runs_head_dims_from_32_on_its_tiles_told_the_problems():
    """fa_sm80 pads from 8 ("pads_head_dims": {"from": 8}): 8-56 on the 64 tile,
    72-120 on the 128 tile, 136-248 on the 256 tile. Its cp.async copies cannot see the
    tensor's width, so the build is told it (CUBRIDGE_HEAD_DIM_DATA): each such head dim
    has a cubin of its own, and the tiles' own builds get no such macro."""
    import torch

    fa_sm80 = get_kernel("fa_sm80")
    meta = fa_sm80.metadata
    assert [meta.built_dims(d) for d in (8, 16, 40, 56, 64, 72, 96, 120, 128, 136, 192, 256)] \
        == [(64, 64)] * 5 + [(128, 128)] * 4 + [(256, 256)] * 3
    assert [meta.built_dims(d) for d in (4, 36, 100, 264)] == [None] * 4
    assert meta.dims_text() == ("64, 128, 256 (QK = V), multiples of 8 from 8 to 256 on the "
                                "next wider build")
    d96 = fa_sm80.compile_defines(96, torch.bfloat16)
    assert d96["CUBRIDGE_HEAD_DIM"] == 128 and d96["CUBRIDGE_HEAD_DIM_DATA"] == 96
    assert fa_sm80.compile_defines(32, torch.float16)["CUBRIDGE_HEAD_DIM"] == 64
    assert "CUBRIDGE_HEAD_DIM_DATA" not in fa_sm80.compile_defines(128, torch.bfloat16)
    assert "CUBRIDGE_HEAD_DIM_DATA" not in get_kernel("fa_sm90").compile_defines(80, torch.bfloat16)
    assert fa_sm80.config(96) == fa_sm80.config(128) and fa_sm80.table_block(40) == (32, 64)
    # Phi-3 on Ampere now takes the rules path on fa_sm80; D = 48 on Hopper goes to
    # fa_sm80 (fa_sm90's TMA boxes are 64 columns wide at least), and says why
    spec = load(SPECS / "phi3_mini.py")
    on_ampere = str(choose_for_spec(spec, "sm_80"))
    assert on_ampere.startswith("fa_sm80 for sm_80, D=96, bfloat16, softmax: fa_sm90 passed over")
    assert on_ampere.endswith("the highest-priority entry (priority 0) that supports it")
    narrow = dataclasses.replace(spec, configs=[HeadConfig("narrow", 12, 12, 48)])
    chosen = choose_for_spec(narrow, "sm_90a")
    assert chosen.kernel.name == "fa_sm80"
    assert "fa_sm90 passed over (head dim 48 not among 64, 96, 128, 256 (QK = V)" in str(chosen)
