// The forward-attention parameters every library kernel receives (docs/hooks.md,
// "What every library kernel exports"); mirrored field for field by the ctypes
// `FwdParams` in cubridge/kernels/abi.py.
#pragma once
#include <cstdint>

#include "hook_types.cuh"

namespace cubridge {

template <typename Element>
struct FwdParamsOf {
  const Element* q;
  const Element* k;
  const Element* v;
  Element* o;
  float* lse;  // [batch, heads_q, seqlen_q], contiguous
  int64_t q_batch_stride, q_head_stride, q_row_stride;
  int64_t k_batch_stride, k_head_stride, k_row_stride;
  int64_t v_batch_stride, v_head_stride, v_row_stride;
  int64_t o_batch_stride, o_head_stride, o_row_stride;
  int batch, heads_q, heads_k, seqlen_q, seqlen_k;
  float scale;       // applied to Q K^T before score_mod
  float scale_log2;  // scale * log2(e), folded into exp2 when there is no score_mod
  AuxArgs aux;
};

}  // namespace cubridge
