"""The device sine and cosine of generated score hooks (detail::fast_sin /
fast_cos of hook_trig.cuh: sin.approx / cos.approx), measured on the GPU against
float64 sin / cos of the same float32 arguments over |x| <= R. Their absolute
error is small for |x| <= pi and grows with |x| beyond (the hardware's x / (2 pi)
rounds in float32), as slowly as a float32 argument's own rounding grows: a score
term's sin stays far inside the verifier's tolerances over the range scores
have (hook_trig.cuh says why the kernels take these forms)."""

from __future__ import annotations

import math

import pytest
from device_probe import build_probe, run_probe

pytestmark = pytest.mark.gpu

PROBE = r"""
#include <cstdio>
#include <cmath>
#include "hook_types.cuh"
#include "hook_trig.cuh"
__global__ void eval(float* y, int n, float r) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = detail::FUNC(-r + 2.0f * r * i / (n - 1));
}
int main(int argc, char** argv) {
  const int n = 4000001;
  const float r = strtof(argv[1], nullptr);
  float* y;
  cudaMallocManaged(&y, n * sizeof(float));
  eval<<<(n + 255) / 256, 256>>>(y, n, r);
  if (cudaDeviceSynchronize() != cudaSuccess) return 1;
  double worst = 0;
  for (int i = 0; i < n; ++i) {
    const double x = (double)(-r + 2.0f * r * i / (n - 1));
    worst = fmax(worst, fabs(y[i] - REF(x)));
  }
  printf("%.6e\n", worst);
  return 0;
}
"""

# |x| <= R: pi, a scaled score's range, and far past it (scores of 1000 make any
# softmax one-hot). The bound: 2^-20 (MUFU.SIN's own error is about 2^-21) plus R
# 2^-21 for the reduction's x / (2 pi), rounded towards zero in float32 (about R
# 2^-23), eight times the rounding R 2^-24 of the float32 argument itself.
RANGES = [math.pi, 16.0, 256.0, 4096.0]


@pytest.mark.parametrize("func", ["sin", "cos"])
def test_device_sin_and_cos_error_grows_no_faster_than_the_arguments_rounding(tmp_path, func):
    exe = build_probe(tmp_path, PROBE, [f"-DFUNC=fast_{func}", f"-DREF={func}"])
    for r in RANGES:
        (worst,) = run_probe(exe, repr(r))
        assert worst <= 2.0**-20 + r * 2.0**-21, (func, r, worst)
