"""bench/device_gpu_tests.sh: GPU test groups side by side, one output file each; a
group's arguments split as a shell splits them, so a quoted -k expression stays one
argument."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = '''import pytest

pytestmark = pytest.mark.gpu


def test_alpha():
    pass


def test_beta():
    pass


def test_gamma():
    pass
'''


def test_groups_run_side_by_side_with_quoted_arguments(tmp_path):
    (tmp_path / "test_groups.py").write_text(TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    gpu: needs a GPU\n")
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "OUT": str(out), "CUBRIDGE_COMMIT": "abc"}
    run = subprocess.run(
        ["bash", str(ROOT / "bench" / "device_gpu_tests.sh"),
         'either=test_groups.py -k "alpha or beta"', "one=test_groups.py -k gamma"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "2 passed, 1 deselected" in (out / "gpu_either_abc.txt").read_text()
    assert "1 passed, 2 deselected" in (out / "gpu_one_abc.txt").read_text()
    assert "exit 0" in run.stdout


def test_a_group_that_does_not_split_says_so_and_fails(tmp_path):
    (tmp_path / "test_groups.py").write_text(TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    gpu: needs a GPU\n")
    env = {**os.environ, "OUT": str(tmp_path), "CUBRIDGE_COMMIT": "abc"}
    run = subprocess.run(
        ["bash", str(ROOT / "bench" / "device_gpu_tests.sh"),
         'broken=test_groups.py -k "alpha', "fine=test_groups.py -k beta"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 1
    assert "group broken: its arguments do not split" in run.stdout
    assert not (tmp_path / "gpu_broken_abc.txt").exists()
    assert "group fine=test_groups.py -k beta: exit 0" in run.stdout
    assert "1 passed, 2 deselected" in (tmp_path / "gpu_fine_abc.txt").read_text()
