"""common/key_bits.cuh, the bits fa_sm90 sets a masked block's rows from where the
header gives key sets (docs/hooks.md "Key sets"), compiled for the host and checked
bit by bit against their definition (key_bits_check.cpp): intervals, the residues of
powers of two with every width, and one residue of any period below 2^15 (the odd
periods' comb: (u / g) (8 / g)^-1 modulo period / g), for blocks of 64 and 128 keys,
each thread's first column and phases -700..700."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

CHECK = Path(__file__).with_name("key_bits_check.cpp")
COMMON = Path(__file__).resolve().parents[2] / "cubridge" / "kernels" / "common"

# Every period to 40, and more up to the largest a key set takes (row_interval.py's
# MAX_ODD_PERIOD): around powers of two, multiples of 8, 16 and 24, primes.
PERIODS = [*range(1, 41), 41, 48, 56, 63, 72, 96, 100, 127, 129, 192, 255, 257, 384, 500,
           1000, 1023, 1025, 3000, 4095, 4097, 10000, 16383, 16385, 24576, 32767]
POWERS = [1 << i for i in range(21)]


@pytest.fixture(scope="module")
def check(tmp_path_factory) -> Path:
    if shutil.which("g++") is None:
        pytest.skip("no host C++ compiler (g++)")
    exe = tmp_path_factory.mktemp("key_bits") / "key_bits_check"
    subprocess.run(["g++", "-x", "c++", "-std=c++17", "-O2", "-Wall", "-Werror",
                    "-Wno-unknown-pragmas", f"-I{COMMON}", str(CHECK), "-o", str(exe)],
                   check=True)
    return exe


def _counts(check: Path, mode: str, block_n: int, periods: list[int]) -> dict[int, tuple]:
    """{period: (bits checked, wrong, bits that should be set)}."""
    done = subprocess.run([str(check), mode, str(block_n), *map(str, periods)],
                          capture_output=True, text=True, check=True)
    rows = [tuple(map(int, line.split())) for line in done.stdout.splitlines()]
    assert not done.stderr, done.stderr  # (the first wrong bit of each failing period)
    return {row[0]: row[1:] for row in rows}


@pytest.mark.parametrize("block_n", [64, 128])
def test_one_residue_of_any_period(check, block_n):
    counts = _counts(check, "odd", block_n, PERIODS)
    assert sorted(counts) == sorted(PERIODS)
    for period, (checked, wrong, hits) in counts.items():
        assert wrong == 0, (period, wrong, checked)
        assert checked == 6 * 4 * 1401 * block_n // 4 and hits > 0, period


@pytest.mark.slow
@pytest.mark.parametrize("block_n", [64, 128])
def test_residues_of_powers_of_two_with_every_width(check, block_n):
    counts = _counts(check, "power", block_n, POWERS)
    assert sorted(counts) == POWERS
    for period, (checked, wrong, hits) in counts.items():
        assert wrong == 0 and 0 < hits < checked or period == 1, (period, wrong, checked)


@pytest.mark.parametrize("block_n", [64, 128])
def test_intervals(check, block_n):
    ((_, (checked, wrong, hits)),) = _counts(check, "interval", block_n, []).items()
    assert wrong == 0 and 0 < hits < checked
