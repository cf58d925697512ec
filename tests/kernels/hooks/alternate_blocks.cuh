// Test hooks: only keys in even 64-key groups take part; kv_block_range is the
// whole sequence and block_kind marks odd groups EMPTY, so the kernel must skip
// them inside its range (and prefetch the next non-EMPTY block).
#pragma once
#include "hook_types.cuh"

namespace cubridge_hooks {
using cubridge::AuxArgs;
using cubridge::BlockKind;
using cubridge::KvRange;
using cubridge::Normalizer;

constexpr bool kHasScoreMod = false;
constexpr bool kHasMaskMod = true;
constexpr Normalizer kNormalizer = Normalizer::Softmax;

CUBRIDGE_HD float score_mod(float s, int, int, int, int, const AuxArgs&) { return s; }
CUBRIDGE_HD bool mask_mod(int, int, int, int k, const AuxArgs&) { return (k / 64) % 2 == 0; }
CUBRIDGE_HD float activation(float s) { return s; }
CUBRIDGE_HD KvRange kv_block_range(int, int, int, int, int, int num_kv_blocks, const AuxArgs&) {
  return {0, num_kv_blocks};
}
CUBRIDGE_HD BlockKind block_kind(int, int, int, int, int k_start, int k_end, const AuxArgs&) {
  const int first = k_start / 64;
  const int last = (k_end - 1) / 64;
  if (first == last) return first % 2 == 0 ? BlockKind::Full : BlockKind::Empty;
  return BlockKind::Partial;
}
}  // namespace cubridge_hooks
