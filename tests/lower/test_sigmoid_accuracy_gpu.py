"""The device sigmoid of generated hooks (detail::fast_sigmoid, used by the
sigmoid normaliser and by torch.sigmoid in score mods, and fast_sigmoid_2p15,
2^15 sigmoid for fa_sm90's fp16 builds), measured on the GPU against float64
over x in [-30, 30], in bf16 and fp16 builds: its error must be
small relative to the result everywhere, down to sigmoid(-30) ~ 1e-13. A sigmoid
attention row of very negative scores is all tiny weights, and the verifier
judges such an output relative to its own size (the one-SFU-op tanh form, 4e-6
absolute, failed there: bench/results/fa_sm90-ab-2026-11-24-sigmoid/)."""

from __future__ import annotations

import pytest
from device_probe import build_probe, run_probe

pytestmark = pytest.mark.gpu

PROBE = r"""
#include <cstdio>
#include <cmath>
#include "hook_types.cuh"
#include "hook_helpers.cuh"
__global__ void eval(float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = detail::FUNC(ARG(-30.0f + 60.0f * i / (n - 1))) / SCALE;
}
int main() {
  const int n = 6000001;
  float* y;
  cudaMallocManaged(&y, n * sizeof(float));
  eval<<<(n + 255) / 256, 256>>>(y, n);
  if (cudaDeviceSynchronize() != cudaSuccess) return 1;
  double worst_abs = 0, worst_rel = 0;
  for (int i = 0; i < n; ++i) {
    const double x = (double)(-30.0f + 60.0f * i / (n - 1));
    const double t = 1.0 / (1.0 + exp(-x));
    worst_abs = fmax(worst_abs, fabs(y[i] - t));
    worst_rel = fmax(worst_rel, fabs(y[i] - t) / t);
  }
  printf("%.6e %.6e\n", worst_abs, worst_rel);
  return 0;
}
"""


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("func, scale, arg", [
    ("fast_sigmoid", 1, "x"), ("fast_sigmoid_2p15", 32768, "x"),
    # the exponent forms fa_sm90 folds its scale into: t = -x log2(e) (- 15 when scaled)
    ("fast_sigmoid_of_exponent", 1, "-1.4426950408889634f * (x)"),
    ("fast_sigmoid_2p15_of_exponent", 32768, "-1.4426950408889634f * (x) - 15.0f")],
    ids=["sigmoid", "sigmoid_2p15", "of_exponent", "2p15_of_exponent"])
def test_device_sigmoid_error_is_small_relative_to_the_result(tmp_path, dtype, func, scale, arg):
    flags = ["-DCUBRIDGE_DTYPE_FP16"] if dtype == "fp16" else []
    flags += [f"-DFUNC={func}", f"-DSCALE={scale}.0f", f"-DARG(x)=({arg})"]
    worst_abs, worst_rel = run_probe(build_probe(tmp_path, PROBE, flags))
    assert worst_abs <= 1e-6 and worst_rel <= 1e-5, (func, dtype, worst_abs, worst_rel)
