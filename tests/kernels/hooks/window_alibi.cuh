// Test hooks: causal sliding window of 100 keys, ALiBi-style bias from a
// per-head slope table (aux tensor 0, float32 [Hq]). Exercises score_mod,
// mask_mod, a non-zero kv_block_range lower bound and EMPTY/FULL/PARTIAL blocks.
#pragma once
#include "hook_types.cuh"

namespace cubridge_hooks {
using cubridge::AuxArgs;
using cubridge::BlockKind;
using cubridge::KvRange;
using cubridge::Normalizer;

constexpr int kWindow = 100;
constexpr bool kHasScoreMod = true;
constexpr bool kHasMaskMod = true;
constexpr Normalizer kNormalizer = Normalizer::Softmax;

CUBRIDGE_HD float score_mod(float s, int, int h, int q, int k, const AuxArgs& aux) {
  return s + cubridge::aux_load<float>(aux, 0, h) * static_cast<float>(k - q);
}
CUBRIDGE_HD bool mask_mod(int, int, int q, int k, const AuxArgs&) {
  return q >= k && q - k < kWindow;
}
CUBRIDGE_HD float activation(float s) { return s; }
CUBRIDGE_HD KvRange kv_block_range(int, int, int q_start, int q_end, int block_n,
                                   int num_kv_blocks, const AuxArgs&) {
  const int first_key = q_start - kWindow + 1 > 0 ? q_start - kWindow + 1 : 0;
  const int hi = (q_end + block_n - 1) / block_n;
  return {first_key / block_n, hi < num_kv_blocks ? hi : num_kv_blocks};
}
CUBRIDGE_HD BlockKind block_kind(int, int, int q_start, int q_end, int k_start, int k_end,
                                 const AuxArgs&) {
  if (k_start > q_end - 1 || k_end - 1 <= q_start - kWindow) return BlockKind::Empty;
  if (k_end - 1 <= q_start && k_start > q_end - 1 - kWindow) return BlockKind::Full;
  return BlockKind::Partial;
}
}  // namespace cubridge_hooks
