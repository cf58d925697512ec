// Types of the hook contract (docs/hooks.md), shared by every kernel of the
// library and by the hook headers that lowering generates.
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define CUBRIDGE_HD __host__ __device__ __forceinline__
#else
#define CUBRIDGE_HD inline
#endif

namespace cubridge {

enum class BlockKind : int { Empty = 0, Full = 1, Partial = 2 };
enum class Normalizer : int { Softmax = 0, Elementwise = 1 };

// Key blocks [lo, hi) that a query block visits.
struct KvRange {
  int lo;
  int hi;
};

// Keys [lo, hi] (inclusive) of one query row, where a mask allows each row a
// union of such intervals (row_interval); lo > hi: none.
struct KeyInterval {
  int lo;
  int hi;
};

// The keys of [lo, hi] equal to phase + t modulo period for 0 <= t < width (period a
// power of two; 1: every key), where a mask allows each row a union of such sets
// (case_key_set); lo > hi: none.
struct KeySet {
  int lo;
  int hi;
  int period;
  int phase;
  int width;
};

constexpr int kMaxAux = 8;
constexpr int kMaxAuxRank = 4;

// One aux tensor as the kernel sees it: sizes and strides in elements.
struct AuxTensor {
  const void* data;
  int64_t size[kMaxAuxRank];
  int64_t stride[kMaxAuxRank];
};

// Everything a hook may read besides its index arguments. Passed by value in
// the kernel's parameters; hooks receive it by const reference.
struct AuxArgs {
  AuxTensor t[kMaxAux];
  int num;
  int seqlen_q;
  int seqlen_k;
};

// 16-bit float aux elements (a bias kept in the model's dtype), read as their bits
// and widened exactly to float where a hook uses them: headers name these instead of
// CUDA's __nv_bfloat16 / __half, so they also compile for the host without CUDA.
struct Bf16 {
  uint16_t bits;
  CUBRIDGE_HD operator float() const {
    const uint32_t u = static_cast<uint32_t>(bits) << 16;  // bf16 is fp32's top half
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
  }
};
struct Fp16 {
  uint16_t bits;
  CUBRIDGE_HD operator float() const {
#if defined(__CUDA_ARCH__)
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(bits));
    return f;
#else
    const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
    const uint32_t exp = (bits >> 10) & 0x1fu, mant = bits & 0x3ffu;
    uint32_t u;
    if (exp == 0x1fu) {
      u = sign | 0x7f800000u | (mant << 13);  // inf, nan
    } else if (exp != 0) {
      u = sign | ((exp + 112u) << 23) | (mant << 13);  // rebias 15 -> 127
    } else {  // zero and subnormals: mant * 2^-24, exact in float
      const float f = static_cast<float>(mant) * 5.9604644775390625e-08f;
      return sign ? -f : f;
    }
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
  }
};

// A 16-bit element given as its pattern (the low half of `bits`; pair reads:
// score_mod_paired), widened as a read of it would be.
template <typename T>
CUBRIDGE_HD float widen16(uint32_t bits) {
  return static_cast<float>(T{static_cast<uint16_t>(bits)});
}

// Staged reads (docs/hooks.md): mask_mod's aux reads that depend on the key
// only (or the query only) are evaluated once per key block (query block) into
// shared memory, 32-bit patterns, read `i` of one position at at[i * stride].
struct Staged {
  const uint32_t* at;
  int stride;
  CUBRIDGE_HD uint32_t operator[](int i) const { return at[i * stride]; }
};

CUBRIDGE_HD uint32_t staged_bits(int v) { return static_cast<uint32_t>(v); }
CUBRIDGE_HD uint32_t staged_bits(bool v) { return v ? 1u : 0u; }
CUBRIDGE_HD uint32_t staged_bits(float v) {
  uint32_t u;
  memcpy(&u, &v, sizeof u);
  return u;
}
template <typename T>
CUBRIDGE_HD T staged_value(uint32_t u);
template <>
CUBRIDGE_HD int staged_value<int>(uint32_t u) { return static_cast<int>(u); }
template <>
CUBRIDGE_HD bool staged_value<bool>(uint32_t u) { return u != 0u; }
template <>
CUBRIDGE_HD float staged_value<float>(uint32_t u) {
  float v;
  memcpy(&v, &u, sizeof v);
  return v;
}

// Typed element read of aux tensor `i` at a multi-index (unused trailing
// indices are 0). Generated hooks use only this to touch aux memory.
template <typename T>
CUBRIDGE_HD T aux_load(const AuxArgs& aux, int i, int64_t i0, int64_t i1 = 0, int64_t i2 = 0,
                       int64_t i3 = 0) {
  const AuxTensor& t = aux.t[i];
  const int64_t off = i0 * t.stride[0] + i1 * t.stride[1] + i2 * t.stride[2] + i3 * t.stride[3];
  return static_cast<const T*>(t.data)[off];
}

// The same read for a tensor of rank `kRank` whose last dimension is contiguous
// (the launcher makes it so: HookHeader.pack_aux). Generated hooks use it: the
// last index, affine in the lane for most hooks, then folds into immediate
// offsets instead of a 64-bit multiply by a runtime stride per element.
template <typename T, int kRank>
CUBRIDGE_HD T aux_load_c(const AuxArgs& aux, int i, int64_t i0, int64_t i1 = 0, int64_t i2 = 0,
                         int64_t i3 = 0) {
  static_assert(kRank >= 1 && kRank <= kMaxAuxRank, "aux rank");
  const AuxTensor& t = aux.t[i];
  // (kRank is a constant: the compiler drops the terms past it)
  const int64_t off = (kRank == 1 ? i0 : i0 * t.stride[0]) +
                      (kRank == 2 ? i1 : kRank > 2 ? i1 * t.stride[1] : 0) +
                      (kRank == 3 ? i2 : kRank > 3 ? i2 * t.stride[2] : 0) + (kRank == 4 ? i3 : 0);
  return static_cast<const T*>(t.data)[off];
}

}  // namespace cubridge
