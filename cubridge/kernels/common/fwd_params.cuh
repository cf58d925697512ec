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

// Launch facts a kernel states about itself, read by the host from the cubin
// (docs/hooks.md): block_m, block_n, threads, dynamic shared-memory bytes,
// normaliser (from the hooks header), head dim, stages. One use per kernel source.
#define CUBRIDGE_EXPORT_KERNEL_INFO(block_m, block_n, threads, smem_bytes, head_dim, stages)  \
  extern "C" __constant__ int cubridge_kernel_info[7] = {                                      \
      (block_m), (block_n), (threads), (smem_bytes),                                           \
      static_cast<int>(cubridge_hooks::kNormalizer), (head_dim), (stages)}
