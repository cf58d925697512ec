"""`cubridge hooks SPEC`: writes the header, manifest and target CuIR; errors are clear."""

from __future__ import annotations

import json
from pathlib import Path

from cubridge.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "specs"


def test_hooks_command_writes_the_artifacts(tmp_path, capsys):
    assert main(["hooks", str(EXAMPLES / "prefix_lm.py"), "--out", str(tmp_path)]) == 0
    header = (tmp_path / "cubridge_hooks.cuh").read_text()
    assert "constexpr bool kHasMaskMod = true;" in header
    manifest = json.loads((tmp_path / "aux_manifest.json").read_text())
    assert manifest["classification"] == "interval"
    assert [a["name"] for a in manifest["aux"]] == ["prefix_len"]
    assert "class Target(FaSm90):" in (tmp_path / "target_cuir.py").read_text()  # sm_90a
    assert "blocks by interval" in capsys.readouterr().out


def test_hooks_command_says_how_each_kernel_sets_the_mask_bits(tmp_path, capsys):
    """The dilated window keeps one residue of keys modulo 2: fa_sm90 sets its bits
    from the header's key sets, fa_sm80 (which takes no such form) per pair."""
    spec = str(EXAMPLES / "dilated_sliding_window.py")
    assert main(["hooks", spec, "--out", str(tmp_path / "a"), "--kernel", "fa_sm90"]) == 0
    assert "mask bits by key sets (a row)" in capsys.readouterr().out
    assert main(["hooks", spec, "--out", str(tmp_path / "b"), "--kernel", "fa_sm80"]) == 0
    assert "mask bits by mask_mod per pair" in capsys.readouterr().out


def test_hooks_command_reports_a_bad_mod(tmp_path, capsys):
    spec = tmp_path / "bad.py"
    spec.write_text(
        "import torch\n"
        "from cubridge.attention import LLAMA2_7B\n"
        "NAME = 'bad'\nDESCRIPTION = 'uses atan'\nCONFIGS = [LLAMA2_7B]\n"
        "SEQ_LENS = [128]\nDTYPES = ['bf16']\n"
        "def reference(q, k, v):\n"
        "    s = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5\n"
        "    return torch.softmax(s + torch.atan(s), -1) @ v\n"
        "def score_mod(score, b, h, q_idx, kv_idx):\n"
        "    return score + torch.atan(score)\n")
    assert main(["hooks", str(spec), "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "torch.atan" in err and f"{spec}:12" in err
