// The library's default hooks (docs/hooks.md): standard softmax attention,
// causal when compiled with -DCUBRIDGE_CAUSAL=1. Lowering replaces this whole
// header with a generated one that defines the same names.
#pragma once
#include "hook_types.cuh"

#ifndef CUBRIDGE_CAUSAL
#define CUBRIDGE_CAUSAL 0
#endif

namespace cubridge_hooks {
using cubridge::AuxArgs;
using cubridge::BlockKind;
using cubridge::KvRange;
using cubridge::Normalizer;

constexpr bool kCausal = CUBRIDGE_CAUSAL != 0;
constexpr bool kHasScoreMod = false;
constexpr bool kHasMaskMod = kCausal;  // causal is the mask q >= k
constexpr Normalizer kNormalizer = Normalizer::Softmax;

CUBRIDGE_HD float score_mod(float s, int, int, int, int, const AuxArgs&) { return s; }

CUBRIDGE_HD bool mask_mod(int, int, int q, int k, const AuxArgs&) { return !kCausal || q >= k; }
#define CUBRIDGE_HOOKS_MASK_INDEX_ONLY 1  // (mask_mod reads no aux: docs/hooks.md)

CUBRIDGE_HD float activation(float s) { return s; }

// Causal: a query block ending at row q_end - 1 needs keys 0..q_end - 1 only.
CUBRIDGE_HD KvRange kv_block_range(int, int, int, int q_end, int block_n, int num_kv_blocks,
                                   const AuxArgs&) {
  if (!kCausal) return {0, num_kv_blocks};
  const int hi = (q_end + block_n - 1) / block_n;
  return {0, hi < num_kv_blocks ? hi : num_kv_blocks};
}

// Causal: FULL below the diagonal, PARTIAL across it, EMPTY above it.
CUBRIDGE_HD BlockKind block_kind(int, int, int q_start, int q_end, int k_start, int k_end,
                                 const AuxArgs&) {
  if (!kCausal) return BlockKind::Full;
  if (k_start > q_end - 1) return BlockKind::Empty;
  if (k_end - 1 <= q_start) return BlockKind::Full;
  return BlockKind::Partial;
}

}  // namespace cubridge_hooks
