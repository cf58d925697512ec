"""A spec whose V head dim differs from QK's (MLA 192/128): fa_sm90 has no
separate V head dim, so on Hopper the library selects fa_sm80 (whose source
takes CUBRIDGE_HEAD_DIM_V) and says why; asking for fa_sm90 is a clear error."""

from __future__ import annotations

from pathlib import Path

import pytest

from cubridge.kernels import choose_for_spec, get_kernel, select_for_spec
from cubridge.spec import load

SPECS = Path(__file__).resolve().parents[2] / "examples" / "specs"


def test_mla_on_hopper_selects_fa_sm80_and_says_why():
    spec = load(SPECS / "mla.py")
    chosen = select_for_spec(spec, "sm_90a")
    assert chosen.name == "fa_sm80" and chosen.takes_head_dim_v
    assert not get_kernel("fa_sm90").takes_head_dim_v
    reason = str(choose_for_spec(spec, "sm_90a"))
    assert reason.startswith("fa_sm80 for sm_90a, D=192/128")
    assert "fa_sm80 takes a V head dim apart from QK's (CUBRIDGE_HEAD_DIM_V)" in reason
    assert "fa_sm90 has no separate V head dim" in reason


def test_equal_head_dims_on_hopper_keep_fa_sm90():
    spec = load(SPECS / "cosine.py")
    chosen = select_for_spec(spec, "sm_90a")
    assert chosen.name == "fa_sm90"
    assert str(choose_for_spec(spec, "sm_90a")).startswith(
        "fa_sm90 for sm_90a, D=128, bfloat16, softmax: the highest-priority entry")


def test_asking_fa_sm90_for_mla_is_a_clear_error():
    spec = load(SPECS / "mla.py")
    with pytest.raises(ValueError, match=r"fa_sm90 cannot serve mla: its QK and V head dims "
                       r"differ \(192/128\) .* use fa_sm80"):
        select_for_spec(spec, "sm_90a", "fa_sm90")
    assert select_for_spec(spec, "sm_90a", "fa_sm80").name == "fa_sm80"
