"""Compile a generated hook header into hook_harness.cpp and run it on the host."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from cubridge.lower.hook_header import HookHeader

HARNESS = Path(__file__).with_name("hook_harness.cpp")
COMMON = Path(__file__).resolve().parents[2] / "cubridge" / "kernels" / "common"


def compiler() -> list[str] | None:
    """g++ for the host program (fast; CUBRIDGE_HD is plain inline there), else
    nvcc. test_headers_compile_for_device checks the device side with nvcc."""
    if shutil.which("g++"):
        return ["g++", "-x", "c++", "-std=c++17", "-O1", "-Wall", "-Werror"]
    if shutil.which("nvcc"):
        return ["nvcc", "-x", "cu", "-arch=sm_80", "-std=c++17", "-O1"]
    return None


def device_compile(headers: list[HookHeader], workdir: Path) -> None:
    """Compile every header for sm_80 and sm_90a in one translation unit (each in
    its own namespace), with a kernel calling each hook so none is skipped."""
    parts = ['#include "hook_types.cuh"']
    for i, h in enumerate(headers):
        text = h.text.replace("#pragma once", "")
        text = text.replace("namespace cubridge_hooks {", f"namespace cubridge_hooks_{i} {{")
        parts += [text, f"""
__global__ void probe_{i}(cubridge::AuxArgs aux, float* out) {{
  using namespace cubridge_hooks_{i};
  const int q = threadIdx.x, k = threadIdx.y;
  float s = score_mod(out[0], 0, 0, q, k, aux) + activation(out[1]);
  s += mask_mod(0, 0, q, k, aux) ? 1.0f : 0.0f;
  s += static_cast<float>(block_kind(0, 0, q, q + 64, k, k + 64, aux));
  s += static_cast<float>(kv_block_range(0, 0, q, q + 64, 64, 4, aux).hi);
  s += kHasScoreMod + kHasMaskMod + static_cast<int>(kNormalizer);
  out[q * 64 + k] = s;
}}"""]
    workdir.mkdir(parents=True, exist_ok=True)
    src = workdir / "all_hooks.cu"
    src.write_text("\n".join(parts))
    cmd = ["nvcc", "-std=c++17", "-c", "-Werror", "all-warnings", f"-I{COMMON}",
           "-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90a,code=sm_90a",
           str(src), "-o", str(workdir / "all_hooks.o")]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        raise AssertionError(f"nvcc failed on the generated hooks:\n{proc.stderr[-6000:]}")


def build(header: HookHeader, workdir: Path) -> Path:
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "cubridge_hooks.cuh").write_text(header.text)
    cmd = compiler()
    assert cmd is not None
    exe = workdir / "harness"
    proc = subprocess.run([*cmd, f"-I{workdir}", f"-I{COMMON}", str(HARNESS), "-o", str(exe)],
                          capture_output=True, text=True)
    if proc.returncode:
        raise AssertionError(f"compiling the hooks of {header.plan.name} failed:\n"
                             f"{proc.stderr}\n--- header ---\n{header.text}")
    return exe


@dataclass
class HookValues:
    score: np.ndarray  # float32 [B, H, Sq, Sk]
    mask: np.ndarray  # bool [B, H, Sq, Sk]
    kinds: np.ndarray  # uint8 [B, H, nq, nk]
    ranges: np.ndarray  # int32 [B, H, nq, 2]
    activation: np.ndarray  # float32 [Sk] of scores[0, 0, 0]


def run(exe: Path, aux: list[torch.Tensor], scores: torch.Tensor, block_m: int, block_n: int,
        workdir: Path) -> HookValues:
    b, h, sq, sk = scores.shape
    inp, out = workdir / f"in_{block_m}_{block_n}.bin", workdir / f"out_{block_m}_{block_n}.bin"
    with open(inp, "wb") as f:
        f.write(np.array([b, h, sq, sk, len(aux)], dtype=np.int32).tobytes())
        for t in aux:
            t = t.contiguous().cpu()
            f.write(np.array([t.element_size(), t.dim(), *t.shape], dtype=np.int32).tobytes())
            f.write(t.view(torch.uint8).numpy().tobytes() if t.dim() else
                    t.reshape(1).view(torch.uint8).numpy().tobytes())
        f.write(scores.float().contiguous().numpy().tobytes())
    subprocess.run([str(exe), str(inp), str(out), str(block_m), str(block_n)], check=True)
    raw = out.read_bytes()
    n = b * h * sq * sk
    nq, nk = -(-sq // block_m), -(-sk // block_n)
    off = 0

    def take(dtype: type, count: int) -> np.ndarray:
        nonlocal off
        arr = np.frombuffer(raw, dtype=dtype, count=count, offset=off)
        off += arr.nbytes
        return arr

    score = take(np.float32, n).reshape(b, h, sq, sk)
    mask = take(np.uint8, n).reshape(b, h, sq, sk).astype(bool)
    kinds = take(np.uint8, b * h * nq * nk).reshape(b, h, nq, nk)
    ranges = take(np.int32, b * h * nq * 2).reshape(b, h, nq, 2)
    act = take(np.float32, sk)
    assert off == len(raw)
    return HookValues(score, mask, kinds, ranges, act)
