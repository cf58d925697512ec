// Test hooks: causal, sigmoid(s - 2) elementwise normaliser (no max, no LSE).
#pragma once
#include "hook_types.cuh"

namespace cubridge_hooks {
using cubridge::AuxArgs;
using cubridge::BlockKind;
using cubridge::KvRange;
using cubridge::Normalizer;

constexpr bool kHasScoreMod = false;
constexpr bool kHasMaskMod = true;
constexpr Normalizer kNormalizer = Normalizer::Elementwise;

CUBRIDGE_HD float score_mod(float s, int, int, int, int, const AuxArgs&) { return s; }
CUBRIDGE_HD bool mask_mod(int, int, int q, int k, const AuxArgs&) { return q >= k; }
CUBRIDGE_HD float activation(float s) { return 1.0f / (1.0f + expf(2.0f - s)); }
CUBRIDGE_HD KvRange kv_block_range(int, int, int, int q_end, int block_n, int num_kv_blocks,
                                   const AuxArgs&) {
  const int hi = (q_end + block_n - 1) / block_n;
  return {0, hi < num_kv_blocks ? hi : num_kv_blocks};
}
CUBRIDGE_HD BlockKind block_kind(int, int, int q_start, int q_end, int k_start, int k_end,
                                 const AuxArgs&) {
  if (k_start > q_end - 1) return BlockKind::Empty;
  if (k_end - 1 <= q_start) return BlockKind::Full;
  return BlockKind::Partial;
}
}  // namespace cubridge_hooks
