"""The tools that inspect CuIR (`cubridge ir check`, `cubridge llm check`, the
MCP verify_ir / diff_ir) accept a run directory's own target_cuir.py, aux
tensors included."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cubridge.cli import main
from cubridge.kernels.fa_sm80.cuir import FaSm80
from cubridge.spec import load
from cubridge.transfer.hooks import plan_hooks
from cubridge.transfer.target import write_target

SPECS = Path(__file__).resolve().parents[2] / "examples" / "specs"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """target_cuir.py and spec.py as `cubridge run`'s transfer stage writes them
    (relative_position: a table and a 0-d offset as aux)."""
    out = tmp_path_factory.mktemp("run")
    spec_file = SPECS / "relative_position.py"
    shutil.copyfile(spec_file, out / "spec.py")
    write_target(plan_hooks(load(spec_file)), FaSm80, out / "target_cuir.py")
    return out


def test_ir_check_takes_the_aux_from_the_run_directory_spec(run_dir, tmp_path, capsys):
    assert main(["ir", "check", str(run_dir / "target_cuir.py")]) == 0
    assert "Target on sm80: OK" in capsys.readouterr().out
    alone = tmp_path / "target_cuir.py"  # without a spec beside it: say what to pass
    shutil.copyfile(run_dir / "target_cuir.py", alone)
    assert main(["ir", "check", str(alone)]) == 2
    assert "reads aux tensors ['rel_table', 'rel_offset']: pass --spec" in capsys.readouterr().err
    assert main(["ir", "check", str(alone), "--spec", str(run_dir / "spec.py")]) == 0


def test_llm_check_passes_the_rules_transfer_target(run_dir, capsys):
    assert main(["llm", "check", str(run_dir / "target_cuir.py")]) == 0
    assert "passes the static check" in capsys.readouterr().out


@pytest.mark.slow  # the sandboxed executor: seconds
def test_mcp_verify_ir_and_diff_ir_take_the_run_target(run_dir):
    from cubridge.mcp.tools import diff_ir, verify_ir

    table = verify_ir(str(run_dir / "target_cuir.py"), str(run_dir / "spec.py"),
                      sizes=[[1, 65, 129]], seed=0)
    assert table.startswith("PASS: cuir_Target against spec relative_position")
    # as in `cubridge run`: the spec check's long case, in every dtype of the spec
    assert "S1119x1100" in table and "bfloat16" in table and "float16 " in table
    diff = diff_ir(str(run_dir / "target_cuir.py"))
    assert "change stays inside hooks: yes" in diff
