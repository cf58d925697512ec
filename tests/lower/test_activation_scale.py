"""The sigmoid normaliser's fp16 activation scale: a generated sigmoid header
defines CUBRIDGE_HOOKS_ACTIVATION_SCALE (2^15) and returns 2^15 sigmoid(x) only in
fp16 builds of kernels that divide O back (CUBRIDGE_KERNEL_ACTIVATION_SCALE:
fa_sm90); elsewhere it is the plain sigmoid."""

from __future__ import annotations

import math

import pytest
from hook_variants import VARIANTS
from host_harness import run_program

from cubridge.kernels import list_kernels
from cubridge.lower.hook_header import generate_header
from cubridge.transfer.hooks import plan_hooks

PROGRAM = """#include <cstdio>
#include "hook_types.cuh"
#include "cubridge_hooks.cuh"
int main() {
#ifdef CUBRIDGE_HOOKS_ACTIVATION_SCALE
  printf("%.1f", (double)CUBRIDGE_HOOKS_ACTIVATION_SCALE);
#else
  printf("none");
#endif
  const float xs[] = {-30.f, -8.f, -1.f, 0.f, 2.f, 30.f};
  for (float x : xs) printf(" %.9e", (double)cubridge_hooks::activation(x));
  // the exponent form a kernel folds its scale into (kExponentBias: -15 when scaled)
  for (float x : xs) {
    const float t = -1.4426950408889634f * x + cubridge_hooks::kExponentBias;
    printf(" %.9e", (double)cubridge_hooks::activation_of_exponent(t));
  }
  printf("\\n");
  return 0;
}
"""
XS = [-30.0, -8.0, -1.0, 0.0, 2.0, 30.0]


@pytest.mark.slow
@pytest.mark.parametrize("defines, scale", [
    ([], None), (["-DCUBRIDGE_DTYPE_FP16"], None), (["-DCUBRIDGE_KERNEL_ACTIVATION_SCALE"], None),
    (["-DCUBRIDGE_DTYPE_FP16", "-DCUBRIDGE_KERNEL_ACTIVATION_SCALE"], 32768.0)],
    ids=["bf16", "fp16-other-kernel", "bf16-fa_sm90", "fp16-fa_sm90"])
def test_sigmoid_is_scaled_only_where_the_kernel_divides_back(tmp_path, defines, scale):
    out = run_program(generate_header(plan_hooks(VARIANTS["sigmoid_causal"])).text, PROGRAM,
                      tmp_path, tuple(defines))
    assert out[0] == ("none" if scale is None else f"{scale:.1f}")
    # (the exponent form rounds -x log2(e) to float first: ~2e-6 relative at |x| = 30)
    for i, (x, got) in enumerate(zip(XS + XS, map(float, out[1:]), strict=True)):
        want = (scale or 1.0) / (1.0 + math.exp(-x))
        assert got == pytest.approx(want, rel=1e-6 if i < len(XS) else 1e-5, abs=1e-30), x


@pytest.mark.parametrize("kernel", list_kernels(), ids=lambda k: k.name)
def test_a_kernel_that_takes_the_scale_declares_it_before_the_hooks(kernel):
    """The header only sees the declaration if it comes first; a kernel without it
    gets the plain sigmoid (its own tests check that it divides O back)."""
    source = kernel.source.read_text()
    if "CUBRIDGE_KERNEL_ACTIVATION_SCALE" not in source:
        return
    assert source.index("#define CUBRIDGE_KERNEL_ACTIVATION_SCALE 1") < source.index(
        '#include "cubridge_hooks.cuh"')
    assert "CUBRIDGE_HOOKS_ACTIVATION_SCALE" in source  # and reads the header's scale
