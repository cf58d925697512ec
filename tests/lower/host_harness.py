"""Compile a generated hook header into hook_harness.cpp and run it on the host."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from cubridge.lower.hook_header import HookHeader

HARNESS = Path(__file__).with_name("hook_harness.inc")
COMMON = Path(__file__).resolve().parents[2] / "cubridge" / "kernels" / "common"


def compiler() -> list[str] | None:
    """g++ for the host program (fast; CUBRIDGE_HD is plain inline there), else
    nvcc. device_compile checks the device side with nvcc."""
    if shutil.which("g++"):
        return ["g++", "-x", "c++", "-std=c++17", "-O1", "-Wall", "-Werror"]
    if shutil.which("nvcc"):
        return ["nvcc", "-x", "cu", "-arch=sm_80", "-std=c++17", "-O1"]
    return None


def run_program(header_text: str, program: str, workdir: Path,
                defines: tuple[str, ...] = ()) -> list[str]:
    """Compile `program` (which includes cubridge_hooks.cuh) against a generated
    header on the host and run it: its stdout, split into words. Skips the test
    where no host compiler exists."""
    import pytest

    cc = compiler()
    if cc is None:
        pytest.skip("no host C++ compiler (g++) or nvcc")
    (workdir / "cubridge_hooks.cuh").write_text(header_text)
    (workdir / "main.cpp").write_text(program)
    exe = workdir / "main"
    subprocess.run([*cc, *defines, f"-I{COMMON}", f"-I{workdir}", str(workdir / "main.cpp"),
                    "-o", str(exe)], check=True)
    return subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split()


def _renamed(header: HookHeader, i: int) -> str:
    """The header with its namespace renamed, so many fit in one program (the
    hooks themselves are byte for byte what lowering generated)."""
    text = header.text.replace("#pragma once", "")
    assert text.count("namespace cubridge_hooks {") == 1
    return text.replace("namespace cubridge_hooks {", f"namespace cubridge_hooks_{i} {{")


_PRELUDE = """#include <cstdio>
#include <cstdlib>
#include <vector>

#include "hook_types.cuh"

// Deterministic scores in [-10, 10], computed identically by scores() in Python.
static float score_at(int b, int h, int q, int k) {
  const int x = (q * 7919 + k * 104729 + b * 31 + h * 17) % 2001;
  return static_cast<float>(x - 1000) / 100.0f;
}

static int read_i32(FILE* f) {
  int v;
  if (fread(&v, sizeof v, 1, f) != 1) {
    fprintf(stderr, "short input\\n");
    exit(2);
  }
  return v;
}
"""


def build(headers: list[HookHeader], workdir: Path) -> Path:
    """One host program evaluating every header: `harness INDEX IN OUT bm bn`."""
    workdir.mkdir(parents=True, exist_ok=True)
    parts = [_PRELUDE]
    for i, h in enumerate(headers):
        parts += [_renamed(h, i), f"#define HOOKS_NS cubridge_hooks_{i}",
                  f"#define RUN_FN run_{i}", f'#include "{HARNESS}"', "#undef HOOKS_NS",
                  "#undef RUN_FN"]
    table = ", ".join(f"run_{i}" for i in range(len(headers)))
    parts.append(f"""
int main(int argc, char** argv) {{
  if (argc != 7) return 2;
  int (*runs[])(const char*, const char*, int, int, bool) = {{{table}}};
  return runs[atoi(argv[1])](argv[2], argv[3], atoi(argv[4]), atoi(argv[5]), atoi(argv[6]));
}}""")
    src = workdir / "harness.cpp"
    src.write_text("\n".join(parts))
    cmd = compiler()
    assert cmd is not None
    exe = workdir / "harness"
    proc = subprocess.run([*cmd, f"-I{COMMON}", str(src), "-o", str(exe)],
                          capture_output=True, text=True)
    if proc.returncode:
        raise AssertionError(f"compiling the generated hooks failed:\n{proc.stderr[-6000:]}")
    return exe


def device_compile(headers: list[HookHeader], workdir: Path) -> None:
    """Compile every header for sm_80 and sm_90a in one translation unit, with a
    kernel calling each hook so none is skipped."""
    parts = ['#include "hook_types.cuh"']
    for i, h in enumerate(headers):
        affine = ("  s += kScoreOut * score_core(kScoreIn * out[0], 0, 0, q, k, aux);\n"
                  if "CUBRIDGE_HOOKS_SCORE_AFFINE" in h.text else "")
        if "kExponentBias" in h.text:  # sigmoid headers
            affine += "  s += activation_of_exponent(out[0] + kExponentBias);\n"
        if "CUBRIDGE_HOOKS_SIGMOID_EXPONENT" in h.text:
            affine += "  s += score_offset(0, 0, q, k, aux) * kScoreIn;\n"
        parts += [_renamed(h, i), f"""
__global__ void probe_{i}(cubridge::AuxArgs aux, float* out) {{
  using namespace cubridge_hooks_{i};
  const int q = threadIdx.x, k = threadIdx.y;
  float s = score_mod(out[0], 0, 0, q, k, aux) + activation(out[1]);
  s += mask_mod(0, 0, q, k, aux) ? 1.0f : 0.0f;
  s += static_cast<float>(block_kind(0, 0, q, q + 64, k, k + 64, aux));
  s += static_cast<float>(kv_block_range(0, 0, q, q + 64, 64, 4, aux).hi);
  s += kHasScoreMod + kHasMaskMod + static_cast<int>(kNormalizer);
  s += kRowIntervals > 0 ? static_cast<float>(row_interval(0, 0, 0, q, aux).hi) : 0.0f;
  s += kPairReads > 0 ? score_mod_paired(out[0], 0, 0, q, k, pair_row(0, 0, q, aux)[k], aux)
                      : 0.0f;
  s += kMaskPairReads > 0 && mask_mod_paired(0, 0, q, k, mask_pair_row(0, 0, q, aux)[k], aux)
           ? 1.0f : 0.0f;
{affine}  const uint32_t row_vals[4] = {{row_staged(0, 0, 0, q, aux), row_staged(1, 0, 0, q, aux)}};
  const uint32_t key_vals[4] = {{key_staged(0, 0, 0, k, aux), key_staged(1, 0, 0, k, aux)}};
  s += mask_mod_staged(0, 0, q, k, cubridge::Staged{{row_vals, 1}},
                       cubridge::Staged{{key_vals, 1}}, aux) ? kKeyStaged + kRowStaged : 0.0f;
  s += kRunIntervals > 0 && key_value_mask(0, 0, q, cubridge::Staged{{row_vals, 1}},
                                           cubridge::Staged{{key_vals, 1}}, aux)
           ? static_cast<float>(run_interval(0, 0, 0, q, aux).hi) : 0.0f;
  s += kMaskCases > 1 && mask_mod_case<1>(0, 0, q, k, aux) &&
       mask_mod_staged_case<1>(0, 0, q, k, cubridge::Staged{{row_vals, 1}},
                               cubridge::Staged{{key_vals, 1}}, aux)
           ? static_cast<float>(mask_case(0, 0, aux)) : 0.0f;
  s += kKeySetCases > 0 && case_key_sets(0) > 0 ? static_cast<float>(
       case_key_set<0>(0, 0, 0, q, aux).phase) : 0.0f;
  s += static_cast<float>(kKeyGroup);
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


def scores(b: int, h: int, sq: int, sk: int) -> torch.Tensor:
    """The harness's score_at on the grid: float32 [b, h, sq, sk]."""
    bi = torch.arange(b).view(-1, 1, 1, 1)
    hi = torch.arange(h).view(1, -1, 1, 1)
    qi = torch.arange(sq).view(1, 1, -1, 1)
    ki = torch.arange(sk).view(1, 1, 1, -1)
    x = (qi * 7919 + ki * 104729 + bi * 31 + hi * 17) % 2001
    return (x - 1000).float() / 100.0


@dataclass
class HookValues:
    score: np.ndarray | None  # float32 [B, H, Sq, Sk] (grid runs only)
    mask: np.ndarray | None  # bool [B, H, Sq, Sk] (grid runs only)
    kinds: np.ndarray  # uint8 [B, H, nq, nk]
    ranges: np.ndarray  # int32 [B, H, nq, 2]
    activation: np.ndarray  # float32 [Sk] of scores[0, 0, 0]


def run(exe: Path, index: int, aux: list[torch.Tensor], shape: tuple[int, int, int, int],
        block_m: int, block_n: int, workdir: Path, grid: bool = True) -> HookValues:
    """Evaluate header `index` of the program on one problem and one tiling."""
    b, h, sq, sk = shape
    inp = workdir / f"in_{index}_{block_m}_{block_n}.bin"
    out = workdir / f"out_{index}_{block_m}_{block_n}.bin"
    with open(inp, "wb") as f:
        f.write(np.array([b, h, sq, sk, len(aux)], dtype=np.int32).tobytes())
        for t in aux:
            t = t.contiguous().cpu()
            f.write(np.array([t.element_size(), t.dim(), *t.shape], dtype=np.int32).tobytes())
            f.write(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    subprocess.run([str(exe), str(index), str(inp), str(out), str(block_m), str(block_n),
                    str(int(grid))], check=True)
    raw = out.read_bytes()
    n = b * h * sq * sk
    nq, nk = -(-sq // block_m), -(-sk // block_n)
    off = 0

    def take(dtype: type, count: int) -> np.ndarray:
        nonlocal off
        arr = np.frombuffer(raw, dtype=dtype, count=count, offset=off)
        off += arr.nbytes
        return arr

    score = take(np.float32, n).reshape(b, h, sq, sk) if grid else None
    mask = take(np.uint8, n).reshape(b, h, sq, sk).astype(bool) if grid else None
    kinds = take(np.uint8, b * h * nq * nk).reshape(b, h, nq, nk)
    ranges = take(np.int32, b * h * nq * 2).reshape(b, h, nq, 2)
    act = take(np.float32, sk)
    assert off == len(raw)
    return HookValues(score, mask, kinds, ranges, act)
