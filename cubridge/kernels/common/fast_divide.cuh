// Division by an integer fixed for a launch, as a multiply-high, an add and a shift
// (Granlund and Montgomery's method for invariant divisors): a few instructions where
// `n / d` with a run-time d takes ~30. The host computes the pair once per launch
// (cubridge/kernels/fast_divide.py, which checks the range it is exact in).
#pragma once

#include <cstdint>

namespace cubridge {

struct FastDivisor {
  uint32_t mul;    // floor(2^32 (2^shift - d) / d) + 1
  uint32_t shift;  // ceil(log2 d)

  // n / d for 0 <= n < 2^31 (the add cannot carry out of 32 bits there).
  __device__ __forceinline__ int divide(int n) const {
    const uint32_t u = static_cast<uint32_t>(n);
    return static_cast<int>((__umulhi(u, mul) + u) >> shift);
  }
};

}  // namespace cubridge
