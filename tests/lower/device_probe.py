"""Builds a small CUDA probe of the hook helpers (hook_helpers.cuh, hook_trig.cuh,
with hook_types.cuh) for the GPU accuracy tests, and runs it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

import cubridge.kernels as kernels
import cubridge.lower.hook_header as hook_header

INCLUDES = [Path(hook_header.__file__).parent, Path(kernels.__file__).parent / "common"]


def build_probe(tmp_path: Path, source: str, flags: list[str]) -> Path:
    """The probe `source` compiled for this machine's GPU (skips without nvcc)."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not found")
    src, exe = tmp_path / "probe.cu", tmp_path / "probe"
    src.write_text(source)
    subprocess.run([nvcc, "-O3", "-arch=native", *flags, *(f"-I{d}" for d in INCLUDES),
                    str(src), "-o", str(exe)], check=True, capture_output=True, text=True)
    return exe


def run_probe(exe: Path, *args: str) -> list[float]:
    """The numbers the probe prints."""
    out = subprocess.run([str(exe), *args], check=True, capture_output=True, text=True).stdout
    return [float(x) for x in out.split()]
