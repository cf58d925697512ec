"""Check lengths chosen from the spec (cubridge.spec.lengths): a mod that
differs from its reference only past its position constants fails the spec
check and `cubridge run` on the CPU."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from cubridge.cli import main
from cubridge.spec import SpecError, check_spec, load

SPEC_DIR = Path(__file__).resolve().parents[2] / "examples" / "specs"

HEADER = """\
from cubridge.attention import LLAMA2_7B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

CONFIGS = [LLAMA2_7B]
DTYPES = ["bf16"]
"""

# The example: the mod's radius is 250, the reference's 300. They agree
# on every shape shorter than 251 positions.
RADIUS_SPEC = HEADER + """

def reference(q, k, v):
    q_idx, kv_idx = positions(q, k)
    allowed = (q_idx >= kv_idx) & (q_idx - kv_idx < 300)
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), allowed, v)


def mask_mod(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx < 250)
"""
RADIUS_MOD_LINE = RADIUS_SPEC.splitlines().index("def mask_mod(b, h, q_idx, kv_idx):") + 1


def _write(tmp_path: Path, text: str, name: str = "spec.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_radius_250_vs_300_fails_spec_check_with_the_mods_line(tmp_path, capsys):
    path = _write(tmp_path, RADIUS_SPEC, "radius.py")
    with pytest.raises(SpecError) as err:
        check_spec(load(path))
    assert err.value.location == f"{path}:{RADIUS_MOD_LINE}"
    assert "mods disagree with the reference" in err.value.message
    assert main(["spec", "check", str(path)]) == 1
    assert f"radius.py:{RADIUS_MOD_LINE}" in capsys.readouterr().err


def test_radius_250_vs_300_fails_cubridge_run_before_transfer(tmp_path, capsys):
    path = _write(tmp_path, RADIUS_SPEC, "radius.py")
    out = tmp_path / "run"
    assert main(["run", str(path), "--out", str(out), "--no-bench"]) == 1
    err = capsys.readouterr().err
    assert f"radius.py:{RADIUS_MOD_LINE}" in err and "mods disagree" in err
    assert "target_cuir.py" not in err
    assert not (out / "target_cuir.py").exists()  # blamed before any stage ran


def test_long_case_exceeds_twice_the_largest_constant(tmp_path):
    from cubridge.spec.lengths import MIN_LONG, integer_constants, long_check_shapes, long_length

    assert integer_constants(load(_write(tmp_path, RADIUS_SPEC))) >= {250, 300}
    window = load(SPEC_DIR / "sliding_window_1024.py")  # WINDOW = 1024 at module level
    assert 1024 in integer_constants(window)
    (shape,) = long_check_shapes(window.configs, window)
    assert shape.sk > 2048 and shape.sq > 2048 and shape.sq != shape.sk
    assert shape.sk % 64 and shape.sq % 64  # not tile multiples
    causal = load(SPEC_DIR / "causal.py")
    assert long_length(causal) >= MIN_LONG
    blockwise = load(SPEC_DIR / "causal_blockwise.py")  # 512-blocks
    assert long_length(blockwise) > 1024


def test_constants_of_spec_helpers_count_and_sentinels_do_not(tmp_path):
    from cubridge.spec.lengths import integer_constants, long_length

    path = _write(tmp_path, HEADER + """
import torch

HUGE = 10**9  # "no limit": a sentinel, not a position


def band(q_idx, kv_idx):
    return (q_idx - kv_idx).abs() < 700


def reference(q, k, v):
    q_idx, kv_idx = positions(q, k)
    allowed = band(q_idx, kv_idx) & (kv_idx < HUGE)
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), allowed, v)


def mask_mod(b, h, q_idx, kv_idx):
    return band(q_idx, kv_idx) & (kv_idx < HUGE)
""")
    spec = load(path)
    assert 700 in integer_constants(spec) and 10**9 not in integer_constants(spec)
    assert long_length(spec) > 1400
    summary = check_spec(spec)
    assert summary.long_shapes[0].sk > 1400
    assert any(line.startswith("long case") and "700" in line for line in summary.lines())


def test_long_case_is_capped(tmp_path):
    from cubridge.spec.lengths import MAX_LONG, long_length

    path = _write(tmp_path, HEADER + """

def reference(q, k, v):
    q_idx, kv_idx = positions(q, k)
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), q_idx - kv_idx < 100000, v)
""")
    assert long_length(load(path)) <= MAX_LONG + 1


def test_python_if_on_a_tensor_is_rejected_with_its_line_not_routed(tmp_path, capsys):
    text = HEADER + """

def reference(q, k, v):
    q_idx, kv_idx = positions(q, k)
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), q_idx >= kv_idx, v)


def mask_mod(b, h, q_idx, kv_idx):
    if q_idx >= kv_idx:
        return True
    return False
"""
    path = _write(tmp_path, text, "if_mod.py")
    line = text.splitlines().index("    if q_idx >= kv_idx:") + 1
    assert main(["spec", "check", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"if_mod.py:{line}" in err and "torch.where" in err
    assert main(["run", str(path), "--out", str(tmp_path / "run"), "--no-bench"]) == 1
    captured = capsys.readouterr()
    assert f"if_mod.py:{line}" in captured.err
    assert "LLM" not in captured.err + captured.out  # rejected, not sent to the LLM path


def test_a_python_list_indexed_by_the_head_is_rejected_with_what_to_write(tmp_path, capsys):
    text = HEADER + """
SLOPES = [2.0 ** -(i + 1) for i in range(64)]


def reference(q, k, v):
    q_idx, kv_idx = positions(q, k)
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), q_idx >= kv_idx, v)


def score_mod(score, b, h, q_idx, kv_idx):
    return score - SLOPES[h] * (q_idx - kv_idx)
"""
    path = _write(tmp_path, text, "list_mod.py")
    line = text.splitlines().index("    return score - SLOPES[h] * (q_idx - kv_idx)") + 1
    assert main(["spec", "check", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"list_mod.py:{line}" in err and "keep the values in a torch.tensor" in err


def test_with_both_mods_the_error_names_both_lines(tmp_path):
    text = RADIUS_SPEC.replace(
        "softmax_attention(scaled_scores(q, k), allowed, v)",
        "softmax_attention(30 * torch.tanh(scaled_scores(q, k) / 30), allowed, v)") + """

def score_mod(score, b, h, q_idx, kv_idx):
    return 30 * torch.tanh(score / 30)
"""
    path = _write(tmp_path, "import torch\n" + text, "both.py")
    lines = path.read_text().splitlines()
    with pytest.raises(SpecError) as err:
        check_spec(load(path))
    mask_line = lines.index("def mask_mod(b, h, q_idx, kv_idx):") + 1
    score_line = lines.index("def score_mod(score, b, h, q_idx, kv_idx):") + 1
    assert f"mask_mod at {path}:{mask_line}" in err.value.message
    assert f"score_mod at {path}:{score_line}" in err.value.message
    assert "the long case" in err.value.message and "300" in err.value.message


@pytest.mark.slow
def test_constants_bound_in_closures_and_partials_count(tmp_path):
    from cubridge.spec.lengths import integer_constants

    path = _write(tmp_path, HEADER + """
import functools


def window(radius):
    def allowed(q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx < radius)
    return allowed


def band(width, b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx < width)


ALLOWED = window(900)


def reference(q, k, v):
    q_idx, kv_idx = positions(q, k)
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), ALLOWED(q_idx, kv_idx), v)


mask_mod = functools.partial(band, 1300)
""")
    spec = load(path)
    assert {900, 1300} <= integer_constants(spec)
    with pytest.raises(SpecError, match="the long case") as err:  # they differ past 900 only
        check_spec(spec)
    line = path.read_text().splitlines().index("def band(width, b, h, q_idx, kv_idx):") + 1
    assert err.value.location == f"{path}:{line}"


def test_constants_of_mods_combined_by_and_masks_or_masks_count(tmp_path):
    """FlexAttention's combinators hold the mods in their closures: a window of
    1500 inside or_masks(and_masks(causal, window), sink) makes the long case
    longer than 3000 (it was 1100, which never reaches the window's edge)."""
    from cubridge.spec.lengths import integer_constants, long_length

    path = _write(tmp_path, HEADER + """
from torch.nn.attention.flex_attention import and_masks, or_masks


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def window(b, h, q_idx, kv_idx):
    return q_idx - kv_idx < 1500


def sink(b, h, q_idx, kv_idx):
    return kv_idx < 4


mask_mod = or_masks(and_masks(causal, window), sink)
""")
    spec = load(path)
    assert {4, 1500} <= integer_constants(spec)
    assert long_length(spec) > 3000
