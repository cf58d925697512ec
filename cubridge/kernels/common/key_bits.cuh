// A thread's mask bits of one row of a key block from key sets (docs/hooks.md "Key
// sets"): an interval of keys, and the keys of one residue (or, for a power of two, a
// range of residues) modulo a period. Host and device alike, so that
// tests/kernels/test_key_bits.py checks every bit against its definition on the host.
//
// A thread holds kBlockN / 4 columns of a row: keys k_first + 8j + e for j < kBlockN / 8
// and e < 2, at bit 2j + e of a 32-bit word. interval_bits sets no bit past kBlockN / 4;
// the residue bits may (64-key blocks): a kernel takes them with an interval's.
#pragma once

#include <cstdint>

#include "hook_types.cuh"

namespace cubridge {
namespace key_bits_detail {

CUBRIDGE_HD int min_int(int a, int b) {
#if defined(__CUDA_ARCH__)
  return min(a, b);
#else
  return a < b ? a : b;
#endif
}

// x rotated left by n bits (0 <= n < 32).
CUBRIDGE_HD uint32_t rotate_left(uint32_t x, int n) {
#if defined(__CUDA_ARCH__)
  return __funnelshift_l(x, x, n);
#else
  return n == 0 ? x : (x << n) | (x >> (32 - n));
#endif
}

}  // namespace key_bits_detail

// The bits of a row's pairs whose key lies in [lo, hi]. This thread's columns
// k_first + 8j + e (bit 2j + e) increase with the bit index, so those bits are one
// range: from the first column at or after lo to the last at or before hi.
template <int kBlockN>
CUBRIDGE_HD uint32_t interval_bits(int lo, int hi, int k_first) {
  const int a = lo - k_first, b = hi - k_first;  // in column offsets 8j + e
  const int first = a <= 0 ? 0 : 2 * (a >> 3) + key_bits_detail::min_int(a & 7, 2);
  const int last = key_bits_detail::min_int(2 * (b >> 3) + key_bits_detail::min_int(b & 7, 1),
                                            kBlockN / 4 - 1);
  return first > last ? 0u : (0xffffffffu >> (31 - last)) & (0xffffffffu << first);
}

template <int kBlockN>
CUBRIDGE_HD uint32_t period_range_bits(int period, int phase, int width, int k_first);

// The bits of a row's pairs whose key is phase modulo period (a power of two, a
// constant once inlined). Column k_first + 8j + e (bit 2j + e) is such a key where
// 8j == phase - k_first - e (mod period): none unless that is 0 modulo 8 (or the
// period is at most 8: every j), else every j equal to it / 8 modulo period / 8, a
// constant comb of bits shifted into place.
// A range of residues (width > 1: keys phase + t, 0 <= t < width): period_range_bits.
template <int kBlockN>
CUBRIDGE_HD uint32_t period_bits(int period, int phase, int width, int k_first) {
  if (period <= 1) return 0xffffffffu;
  if (width > 1) return period_range_bits<kBlockN>(period, phase, width, k_first);
  const int j_period = period > 8 ? period / 8 : 1;
  uint32_t comb = 0u;  // bit 2j for every j == 0 (mod j_period)
#pragma unroll
  for (int j = 0; j < kBlockN / 8; ++j) comb |= j % j_period == 0 ? 1u << (2 * j) : 0u;
  uint32_t w = 0u;
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int u = (phase - k_first - e) & (period - 1);  // (two's complement: floor mod)
    const int shift = 2 * (u >> 3);
    w |= ((u & 7) == 0 && shift < 32 ? comb << shift : 0u) << e;
  }
  return w;
}

// The bits of a row's pairs whose key is phase + t modulo period, 0 <= t < width (all
// constants but phase once inlined). A period of a block or more holds at most two runs
// of such keys in the block: two intervals. A shorter one (16 to 64) repeats in the
// thread's 16 columns of a parity e every period / 8: column 8j + e's key is one where
// 8j lies in [a, a + width) modulo period (a = phase - k_first - e), n consecutive j from
// j0 = ceil(a / 8), a run of n bits copied every period / 8 j (times the comb) and
// rotated into place (a periodic word's shift is a rotation). At most 8: every j or none.
template <int kBlockN>
CUBRIDGE_HD uint32_t period_range_bits(int period, int phase, int width, int k_first) {
  if (period >= kBlockN) {
    const int s = k_first + ((phase - k_first) & (period - 1));  // the first run's start
    return interval_bits<kBlockN>(s, s + width - 1, k_first) |
           interval_bits<kBlockN>(s - period, s - period + width - 1, k_first);
  }
  uint32_t w = 0u;
  if (period <= 8) {
#pragma unroll
    for (int e = 0; e < 2; ++e)
      w |= (((k_first + e - phase) & (period - 1)) < width ? 0x55555555u : 0u) << e;
    return w;
  }
  const int j_period = period / 8;
  uint32_t comb = 0u;  // bit 2j for every j == 0 (mod j_period), all 16 j: periodic
#pragma unroll
  for (int j = 0; j < 16; ++j) comb |= j % j_period == 0 ? 1u << (2 * j) : 0u;
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int a = (phase - k_first - e) & (period - 1);
    const int n = ((a + width - 1) >> 3) - ((a + 7) >> 3) + 1;  // multiples of 8 in range
    const int j0 = ((a + 7) >> 3) & (j_period - 1);
    const uint32_t run = n >= j_period ? 0x55555555u : ((1u << (2 * n)) - 1u) & 0x55555555u;
    const uint32_t spread = n >= j_period ? run : run * comb;
    w |= key_bits_detail::rotate_left(spread, 2 * j0) << e;
  }
  return w;
}

// The bits of a row's pairs whose key is phase modulo any period below 2^15 (a
// constant once inlined; period_bits is shorter for powers of two). Column k_first +
// 8j + e is such a key where 8j == u (mod period), u = phase - k_first - e. With g =
// gcd(8, period) and m = period / g that needs g | u, and then 8 / g j == u / g (mod m),
// whose 8 / g has an inverse modulo m (m is odd unless g is 8, and then 8 / g is 1):
// every j == (u / g) (8 / g)^-1 (mod m), the comb of period_bits with m in place of
// period / 8, shifted into place.
template <int kBlockN>
CUBRIDGE_HD uint32_t odd_period_bits(int period, int phase, int k_first) {
  const int g = key_bits_detail::min_int(period & -period, 8);
  const int m = period / g, lift = 8 / g;
  // lift^-1 (mod m): m^-1 == m (mod 8) for odd m (m^2 == 1 mod 8), so m (-m mod lift) + 1
  // is a multiple of lift, and lift times its quotient is 1 modulo m
  const int inverse = (m * (-m & (lift - 1)) + 1) / lift;
  uint32_t comb = 0u;  // bit 2j for every j == 0 (mod m)
#pragma unroll
  for (int j = 0; j < kBlockN / 8; ++j) comb |= j % m == 0 ? 1u << (2 * j) : 0u;
  uint32_t w = 0u;
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int u = phase - k_first - e;
    int r = (u / g) % m;  // (u / g exact where g | u, the only case kept)
    r += r < 0 ? m : 0;
    const int j0 = r * inverse % m;  // (< 2^30 for m < 2^15)
    w |= ((u & (g - 1)) == 0 && j0 < kBlockN / 8 ? comb << (2 * j0) : 0u) << e;
  }
  return w;
}

}  // namespace cubridge
