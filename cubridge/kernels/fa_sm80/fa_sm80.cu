// fa_sm80: a FlashAttention-2-class forward kernel for Ampere-class tensor
// cores (mma.sync m16n8k16, ldmatrix, cp.async), also run on Hopper.
//
// One CTA computes one query block of kBlockM rows for one (batch, query head).
// Each warp owns kWarpRows consecutive rows (kMTiles slabs of 16). Q stays in
// shared memory and is read with ldmatrix at each k-step; K and V stream
// through two shared-memory slots each:
//
//   iteration i (key block n_i, slot i % 2):
//     wait K(n_i)      | issue V(n_{i+1})  | S = Q K^T, mask, online softmax
//     wait V(n_i)      | issue K(n_{i+2})  | O += P V   (P stays in registers)
//
// so every load is issued a full phase before it is needed. The variant's logic
// enters only through the hooks of "cubridge_hooks.cuh" (docs/hooks.md):
// kv_block_range bounds the key loop; before the loop every key block in it is
// classified per warp, in parallel, into a shared-memory visit list of the live
// blocks, so EMPTY blocks are never loaded; a warp skips the blocks EMPTY for
// its rows, runs FULL ones unmasked, and masks PARTIAL ones and the tails per
// element.
//
// Entry points: fa_sm80_fwd, and fa_sm80_fwd_long for key ranges longer than
// the visit list (its blocks past the list are classified in the loop).
// Build-time macros: CUBRIDGE_HEAD_DIM (the tile's, 64, 128 or 256, required),
// CUBRIDGE_HEAD_DIM_DATA (the problem's, a multiple of 8 up to the tile's; default
// the tile's), CUBRIDGE_DTYPE_FP16 (else bf16), CUBRIDGE_BLOCK_M, CUBRIDGE_BLOCK_N,
// CUBRIDGE_NUM_WARPS (<= 8), CUBRIDGE_VISIT_CAP.
#include "fwd_params.cuh"
#include "hook_types.cuh"
#include "sm80_primitives.cuh"
#include "cubridge_hooks.cuh"

#ifndef CUBRIDGE_HEAD_DIM
#error "fa_sm80: compile with -DCUBRIDGE_HEAD_DIM=64, 128 or 256"
#endif
#ifndef CUBRIDGE_BLOCK_M
#define CUBRIDGE_BLOCK_M 128
#endif
#ifndef CUBRIDGE_BLOCK_N
#define CUBRIDGE_BLOCK_N 64
#endif
#ifndef CUBRIDGE_NUM_WARPS
#define CUBRIDGE_NUM_WARPS 4
#endif
#ifndef CUBRIDGE_HEAD_DIM_DATA
#define CUBRIDGE_HEAD_DIM_DATA CUBRIDGE_HEAD_DIM
#endif

namespace fa_sm80 {
using namespace cubridge;
using namespace cubridge::sm80;
namespace hooks = cubridge_hooks;

#if defined(CUBRIDGE_DTYPE_FP16)
using Element = __half;
#else
using Element = __nv_bfloat16;
#endif

constexpr int kHeadDim = CUBRIDGE_HEAD_DIM;
// A head dim narrower than the tile (Phi-3's 96 on the 128 tile, 32 on 64): shared rows
// keep the tile's width and swizzle, the copies read the problem's columns only and
// zero-fill up to whole k-steps, and the products and O stop at the last such k-step.
constexpr int kDataDim = CUBRIDGE_HEAD_DIM_DATA;
constexpr int kDataSteps = (kDataDim + 15) / 16;  // 16-column k-steps holding data
constexpr int kBlockM = CUBRIDGE_BLOCK_M;
constexpr int kBlockN = CUBRIDGE_BLOCK_N;
constexpr int kNumWarps = CUBRIDGE_NUM_WARPS;
constexpr int kStages = 2;  // K/V shared-memory slots (the pipeline above assumes 2)
constexpr int kThreads = 32 * kNumWarps;
constexpr int kWarpRows = kBlockM / kNumWarps;
constexpr int kMTiles = kWarpRows / 16;  // 16-row MMA slabs per warp
constexpr int kNTiles = kBlockN / 8;     // 8-key column tiles of S
constexpr int kDTiles = kHeadDim / 8;    // 8-wide column tiles of O
constexpr int kQkSteps = kDataSteps;     // k-steps of Q K^T
constexpr int kPvSteps = kBlockN / 16;   // k-steps of P V
// O's column tiles that hold data: all kDTiles at the tile's own head dim (whatever
// sets them), the problem's columns rounded to whole k-steps below it
constexpr int kDataDTiles = kDataDim == kHeadDim ? kDTiles : 2 * kDataSteps;
constexpr int kChunks = kHeadDim / 8;    // 16-byte chunks per tile row
constexpr int kTileBytesQ = kBlockM * kHeadDim * sizeof(Element);
constexpr int kTileBytesKv = kBlockN * kHeadDim * sizeof(Element);
constexpr int kSmemBytes = kTileBytesQ + 2 * kStages * kTileBytesKv;
#ifndef CUBRIDGE_VISIT_CAP
#define CUBRIDGE_VISIT_CAP 2048
#endif
// Key blocks a CTA's visit list holds (Sk up to 131072 at block_n 64); the rest
// are classified on the fly. Tests lower it to cover that path.
constexpr int kVisitCap = CUBRIDGE_VISIT_CAP;
constexpr float kLn2 = 0.6931471805599453f;
constexpr float kLog2e = 1.4426950408889634f;

static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256,
              "head dim must be 64, 128 or 256");
static_assert(kBlockM % (16 * kNumWarps) == 0, "each warp owns whole 16-row slabs");
static_assert(kBlockN % 16 == 0, "key blocks are whole MMA k-steps");
static_assert(kChunks >= 8, "the XOR swizzle spans 8 chunks");
static_assert(kDataDim % 8 == 0 && kDataDim >= 8 && kDataDim <= kHeadDim,
              "the problem's head dim is a multiple of 8 up to the tile's");
static_assert(kNumWarps <= 8, "a key block's per-warp kinds fill 16 bits");
static_assert(kBlockM <= kThreads && kBlockN <= kThreads, "one thread per staged position");

// mask_mod's staged reads (docs/hooks.md): values of the key-only reads of each
// key block and the query-only reads of the query block, in shared memory.
// Headers that provide them define CUBRIDGE_HOOKS_STAGED_READS (generated ones
// do); with others (the library's, hand-written ones) nothing is staged.
#ifdef CUBRIDGE_HOOKS_STAGED_READS
constexpr int kKeyStaged = hooks::kKeyStaged;
constexpr int kRowStaged = hooks::kRowStaged;
__device__ __forceinline__ uint32_t key_staged(int i, int b, int h, int k, const AuxArgs& aux) {
  return hooks::key_staged(i, b, h, k, aux);
}
__device__ __forceinline__ uint32_t row_staged(int i, int b, int h, int q, const AuxArgs& aux) {
  return hooks::row_staged(i, b, h, q, aux);
}
__device__ __forceinline__ bool mask_mod_staged(int b, int h, int q, int k, Staged rows,
                                                Staged keys, const AuxArgs& aux) {
  return hooks::mask_mod_staged(b, h, q, k, rows, keys, aux);
}
#else
constexpr int kKeyStaged = 0;
constexpr int kRowStaged = 0;
__device__ __forceinline__ uint32_t key_staged(int, int, int, int, const AuxArgs&) { return 0u; }
__device__ __forceinline__ uint32_t row_staged(int, int, int, int, const AuxArgs&) { return 0u; }
__device__ __forceinline__ bool mask_mod_staged(int b, int h, int q, int k, Staged, Staged,
                                                const AuxArgs& aux) {
  return hooks::mask_mod(b, h, q, k, aux);
}
#endif
constexpr bool kStagedMask = kKeyStaged + kRowStaged > 0;
// A mask that derives terms from the key alone (a 2-D or 3-D position's coordinates:
// divisions, clamps) has its bits evaluated keys outer, so those terms die after
// their column; other masks rows outer, where comparisons of q and k fold into
// immediates (keys outer cost the LLM path's MLA build 64 B of spills).
#ifdef CUBRIDGE_HOOKS_MASK_KEY_TERMS
constexpr bool kMaskKeysOuter = true;
#else
constexpr bool kMaskKeysOuter = false;
#endif
constexpr int kKeyStagedRows = kKeyStaged > 0 ? kKeyStaged : 1;
constexpr int kRowStagedRows = kRowStaged > 0 ? kRowStaged : 1;

// Kernel parameters (kernels/common/fwd_params.cuh; mirrored by cubridge/kernels/abi.py).
using FwdParams = FwdParamsOf<Element>;

// Shared tiles of kHeadDim-wide rows: chunk c of row r lives at chunk c ^ (r % 8),
// so the 8 rows an ldmatrix reads at one logical chunk hit 8 distinct bank groups.
constexpr int kRowBytes = kHeadDim * sizeof(Element);

__device__ __forceinline__ uint32_t swizzled(uint32_t tile, int row, int chunk) {
  return tile + row * kRowBytes + ((chunk ^ (row & 7)) << 4);
}

// Where one lane points ldmatrix inside a swizzled tile. The lane addresses row
// `lane_row` (+ a multiple of 8) at logical chunk 2*step + chunk_bit; since the
// swizzle only permutes chunks within aligned groups of 8, the lane's byte offset
// for step s is offset[s % 4] + 128 * (s / 4): four registers, the rest immediates.
struct LdsmLane {
  uint32_t offset[4];
};

__device__ __forceinline__ LdsmLane ldsm_lane(int lane_row, int chunk_bit) {
  LdsmLane l;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    l.offset[i] = lane_row * kRowBytes + (((2 * i + chunk_bit) ^ (lane_row & 7)) << 4);
  }
  return l;
}

// Address of this lane's ldmatrix row for k-step `step`, `row0` (a multiple of 8)
// rows into the tile.
__device__ __forceinline__ uint32_t ldsm_addr(uint32_t tile, const LdsmLane& l, int row0,
                                              int step) {
  return tile + row0 * kRowBytes + (step / 4) * 128 + l.offset[step % 4];
}

// Start copying rows [row0, row0 + kRows) of one head into a shared tile; rows at
// or past num_rows are zero-filled (never read from global memory). Each thread
// copies one fixed chunk column of every kRowsPerPass-th row, so the per-row
// offsets are a base plus compile-time multiples (few live registers). With 512-byte
// rows (the 256 tile) a pass is 4 rows and the swizzle phase alternates between two.
template <int kRows>
__device__ __forceinline__ void load_tile_async(uint32_t tile, const Element* head,
                                                int64_t row_stride, int row0, int num_rows) {
  constexpr int kRowsPerPass = kThreads / kChunks;
  static_assert(kThreads % kChunks == 0 && kRowsPerPass % 4 == 0, "two swizzle phases at most");
  static_assert(kRows % kRowsPerPass == 0, "tile copy splits evenly over threads");
  const int tid = opaque(threadIdx.x);  // recomputed per call: frees registers in the loop
  const int r0 = tid / kChunks;
  const int c = tid % kChunks;
  // Chunks past the last k-step are never read; those past the data but in it, zeros.
  if constexpr (2 * kDataSteps < kChunks) {
    if (c >= 2 * kDataSteps) return;
  }
  const Element* src = head + row0 * row_stride + r0 * row_stride + c * 8;
  const int64_t pass_stride = kRowsPerPass * row_stride;
  const uint32_t dst_even = swizzled(tile, r0, c);
  const uint32_t dst_odd = swizzled(tile, r0 + kRowsPerPass, c) - kRowsPerPass * kRowBytes;
  // (a chunk past the problem's columns is zero-filled as rows past num_rows are)
  const int rows_left = kDataDim == kHeadDim || c < kDataDim / 8 ? num_rows - row0 - r0 : 0;
#pragma unroll
  for (int i = 0; i < kRows / kRowsPerPass; ++i) {
    const bool valid = i * kRowsPerPass < rows_left;
    const uint32_t dst = kRowsPerPass % 8 == 0 || i % 2 == 0 ? dst_even : dst_odd;
    cp_async_16(dst + i * kRowsPerPass * kRowBytes, valid ? src + i * pass_stride : head, valid);
  }
}

// S[kWarpRows x kBlockN] = Q_warp K^T for this warp's rows. For Q (A operand)
// the four matrices are (rows 0-7, 8-15) x (chunks 2s, 2s+1); for K (B operand,
// stored key-major) they are (chunk 2s, 2s+1) x (keys 0-7, 8-15).
__device__ __forceinline__ void gemm_qk(float (&s)[kMTiles][kNTiles][4], uint32_t q_tile,
                                        uint32_t k_tile, int warp, const LdsmLane& a_lane,
                                        const LdsmLane& k_lane) {
#pragma unroll
  for (int kk = 0; kk < kQkSteps; ++kk) {
    uint32_t a[kMTiles][4];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
      ldmatrix_x4(a[mt], ldsm_addr(q_tile, a_lane, warp * kWarpRows + mt * 16, kk));
    }
#pragma unroll
    for (int np = 0; np < kNTiles / 2; ++np) {
      uint32_t b[4];
      ldmatrix_x4(b, ldsm_addr(k_tile, k_lane, np * 16, kk));
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        mma_16816<Element>(s[mt][2 * np], a[mt], b[0], b[1]);
        mma_16816<Element>(s[mt][2 * np + 1], a[mt], b[2], b[3]);
      }
    }
  }
}

// O += P V, with P (already rounded to Element) as register A-fragments. V is
// read transposed: matrices (keys 0-7, 8-15) x (chunks 2dp, 2dp+1), which is the
// same lane pattern as Q's.
__device__ __forceinline__ void gemm_pv(float (&o)[kMTiles][kDTiles][4],
                                        const uint32_t (&p)[kMTiles][kPvSteps][4],
                                        uint32_t v_tile, const LdsmLane& v_lane) {
#pragma unroll
  for (int kk = 0; kk < kPvSteps; ++kk) {
#pragma unroll
    for (int dp = 0; dp < kDataDTiles / 2; ++dp) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, ldsm_addr(v_tile, v_lane, kk * 16, dp));
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        mma_16816<Element>(o[mt][2 * dp], p[mt][kk], b[0], b[1]);
        mma_16816<Element>(o[mt][2 * dp + 1], p[mt][kk], b[2], b[3]);
      }
    }
  }
}

// The allowed-pair mask of one masked key block for this thread's scores, as
// bits: word mt, bit 16 * half + 2 * j + e for s[mt][j][2 * half + e]. It is
// evaluated before S is live, so mask_mod (index arithmetic, aux reads) runs
// while only O holds registers, and S then needs just these kMTiles words.
// Covers mask_mod and, with kTail, the key tail (k >= Sk) and rows past Sq.
static_assert(kNTiles * 2 * 2 <= 32, "one 32-bit mask word per 16-row slab");

// With staged reads, `rows` holds the query block's values (from row q_start)
// and `keys` key block k0's.
template <bool kTail>
__device__ __forceinline__ void block_mask(uint32_t (&bits)[kMTiles], const FwdParams& p, int b,
                                           int h, int row0, int k0, int lane,
                                           const uint32_t* rows, const uint32_t* keys,
                                           int q_start) {
  const int g = lane >> 2;
  const int k_first = opaque(k0 + 2 * (lane & 3));  // (opaque: see scores_to_logits)
  // Pair (row q, key k)'s bit, at 16 * half + 2 * j + e of bits[mt].
  auto allowed_at = [&](int q, int k) {
    // Only blocks holding the query or key tail pay for bounds and clamps;
    // elsewhere q and k stay affine in the lane, which the compiler folds
    // into immediates (one compare per element for q - k < w).
    const int qc = kTail ? min(q, p.seqlen_q - 1) : q;
    const int kc = kTail ? min(k, p.seqlen_k - 1) : k;
    bool allowed = kTail ? k < p.seqlen_k : true;
    if constexpr (hooks::kHasMaskMod) {
      if constexpr (kTail) allowed = allowed & (q < p.seqlen_q);
      // Evaluated on every element and combined without short-circuit, so the
      // hook's aux reads are unconditional: no branch per element, and reads
      // shared by elements (q-side, scalars) are loaded once.
      if constexpr (kStagedMask) {
        allowed = allowed & mask_mod_staged(b, h, qc, kc, Staged{rows + (qc - q_start), kBlockM},
                                            Staged{keys + (kc - k0), kBlockN}, p.aux);
      } else {
        allowed = allowed & hooks::mask_mod(b, h, qc, kc, p.aux);
      }
    }
    return static_cast<uint32_t>(allowed);
  };
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) bits[mt] = 0;
  if constexpr (kMaskKeysOuter) {
#pragma unroll
    for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            bits[mt] |= allowed_at(row0 + mt * 16 + g + 8 * half, k_first + (j * 8 + e))
                        << (16 * half + 2 * j + e);
          }
        }
      }
    }
  } else {
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
#pragma unroll
        for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            bits[mt] |= allowed_at(row0 + mt * 16 + g + 8 * half, k_first + (j * 8 + e))
                        << (16 * half + 2 * j + e);
          }
        }
      }
    }
  }
}

// Turn raw Q K^T values into the normaliser's input: scale, score_mod, the
// activation of elementwise normalisers, and (when `kMasked`) the precomputed
// mask: masked scores become -inf for softmax, 0 for elementwise normalisers.
// `kTail`: the block holds the query or key tail (then also kMasked).
template <bool kMasked, bool kTail>
__device__ __forceinline__ void scores_to_logits(float (&s)[kMTiles][kNTiles][4],
                                                 const uint32_t (&bits)[kMTiles],
                                                 const FwdParams& p, int b, int h, int row0,
                                                 int k0, int lane) {
  const int g = lane >> 2;
  const int k_first = opaque(k0 + 2 * (lane & 3));  // the thread's first key column
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int q = row0 + mt * 16 + g + 8 * half;
      // Rows past Sq are discarded and keys past Sk masked; only tail blocks clamp them
      // (hooks never index aux out of bounds). Elsewhere q and k stay affine in the lane
      // and k_first is opaque, so its adds cannot wrap: a read at a key folds its address.
      const int q_hook = kTail ? min(q, p.seqlen_q - 1) : q;
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int k = k_first + (j * 8 + e);
          float& x = s[mt][j][2 * half + e];
          if constexpr (hooks::kHasScoreMod) {
            x = hooks::score_mod(x * p.scale, b, h, q_hook, kTail ? min(k, p.seqlen_k - 1) : k,
                                 p.aux);
          }
          if constexpr (hooks::kNormalizer == Normalizer::Elementwise) {
            x = hooks::activation(hooks::kHasScoreMod ? x : x * p.scale);
          }
          if constexpr (kMasked) {
            const bool allowed = (bits[mt] >> (16 * half + 2 * j + e)) & 1u;
            if constexpr (hooks::kNormalizer == Normalizer::Softmax) {
              x = allowed ? x : -INFINITY;
            } else {
              x = allowed ? x : 0.f;
            }
          }
        }
      }
    }
  }
}

// Online softmax over one key block: update row max and sum, rescale O, and
// leave exp2(s * to_log2 - max * to_log2) in s.
__device__ __forceinline__ void online_softmax(float (&s)[kMTiles][kNTiles][4],
                                               float (&o)[kMTiles][kDTiles][4],
                                               float (&row_max)[kMTiles][2],
                                               float (&row_sum)[kMTiles][2], float to_log2) {
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float mx = row_max[mt][half];
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) {
        mx = fmaxf(mx, fmaxf(s[mt][j][2 * half], s[mt][j][2 * half + 1]));
      }
      mx = quad_max(mx);
      // A row with nothing allowed yet keeps max -inf; use 0 so exp2 gives 0, not NaN.
      const float max_scaled = mx == -INFINITY ? 0.f : mx * to_log2;
      const float rescale = fast_exp2(row_max[mt][half] * to_log2 - max_scaled);
      row_max[mt][half] = mx;
      float sum = row_sum[mt][half] * rescale;
#pragma unroll
      for (int dt = 0; dt < kDTiles; ++dt) {
        o[mt][dt][2 * half] *= rescale;
        o[mt][dt][2 * half + 1] *= rescale;
      }
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = s[mt][j][2 * half + e];
          x = fast_exp2(fmaf(x, to_log2, -max_scaled));
          sum += x;
        }
      }
      row_sum[mt][half] = sum;
    }
  }
}

// S accumulators (m16n8 C layout) -> m16n8k16 A-fragments of P, rounded to Element.
__device__ __forceinline__ void probs_to_fragments(const float (&s)[kMTiles][kNTiles][4],
                                                   uint32_t (&p)[kMTiles][kPvSteps][4]) {
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int kk = 0; kk < kPvSteps; ++kk) {
      p[mt][kk][0] = pack2<Element>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
      p[mt][kk][1] = pack2<Element>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
      p[mt][kk][2] = pack2<Element>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
      p[mt][kk][3] = pack2<Element>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
    }
  }
}

}  // namespace fa_sm80

using fa_sm80::FwdParams;

// Launch facts read by the host from the cubin (cubridge/build/attention_op.py),
// so that the compiled kernel is the single authority on its own configuration:
// block_m, block_n, threads, dynamic smem bytes, normaliser, head dim, stages.
CUBRIDGE_EXPORT_KERNEL_INFO(fa_sm80::kBlockM, fa_sm80::kBlockN, fa_sm80::kThreads, fa_sm80::kSmemBytes,
                            fa_sm80::kHeadDim, fa_sm80::kStages);

namespace fa_sm80 {

// The kernel body. kLongKeys: the key range of a CTA may exceed the visit list
// (more than kVisitCap key blocks), and blocks past it are classified on the fly.
// That is a separate entry point so that the usual one carries none of that code
// (and none of its registers) in its key loop; the launcher picks it by Sk.
template <bool kLongKeys>
__device__ __forceinline__ void attention_fwd(const FwdParams& p) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  // Query blocks run last-first, so that the longest causal rows start first.
  const int m_block = gridDim.x - 1 - blockIdx.x;
  const int h = blockIdx.y;
  const int b = blockIdx.z;
  const int h_kv = h / (p.heads_q / p.heads_k);
  const int q_start = m_block * kBlockM;
  const int q_end = min(q_start + kBlockM, p.seqlen_q);
  const int num_kv_blocks = (p.seqlen_k + kBlockN - 1) / kBlockN;

  const Element* q_head = p.q + b * p.q_batch_stride + h * p.q_head_stride;
  const Element* k_head = p.k + b * p.k_batch_stride + h_kv * p.k_head_stride;
  const Element* v_head = p.v + b * p.v_batch_stride + h_kv * p.v_head_stride;

  const uint32_t q_tile = smem_addr(smem);
  const uint32_t k_slots = q_tile + kTileBytesQ;
  const uint32_t v_slots = k_slots + kStages * kTileBytesKv;

  // Q first: its copy overlaps the classification below (wasted only by CTAs with
  // no live key block, rare). It joins the commit group of the first K tile.
  load_tile_async<kBlockM>(q_tile, q_head, p.q_row_stride, q_start, p.seqlen_q);

  const KvRange range =
      hooks::kv_block_range(b, h, q_start, q_end, kBlockN, num_kv_blocks, p.aux);
  const int lo = max(range.lo, 0);
  const int hi = min(range.hi, num_kv_blocks);
  if constexpr (!kLongKeys) {
    if (num_kv_blocks > kVisitCap) __trap();  // the launcher takes fa_sm80_fwd_long
  }
  const int warp_row0 = q_start + warp * kWarpRows;

  // Kinds of key block n for each warp's rows, kNumWarps fields of 2 bits (0: EMPTY
  // for every warp). A warp skips the blocks that are EMPTY for its rows and runs
  // unmasked where they are FULL, so masks pay at warp, not CTA, granularity. The
  // arguments go through opaque() so that the compiler recomputes a hook's
  // query-block terms per call instead of keeping them live across the key loop.
  auto classify = [&](int n) {
    uint32_t kinds = 0;
#pragma unroll
    for (int w = 0; w < kNumWarps; ++w) {
      const int r0 = opaque(q_start) + w * kWarpRows;
      if (r0 < q_end) {
        const BlockKind kind =
            hooks::block_kind(opaque(b), opaque(h), r0, min(r0 + kWarpRows, q_end), n * kBlockN,
                              min((n + 1) * kBlockN, p.seqlen_k), p.aux);
        kinds |= static_cast<uint32_t>(kind) << (2 * w);
      }
    }
    return kinds;
  };

  // The visit list: every key block of [lo, hi) that is live for some warp, in
  // order, as (n << 16) | kinds. All blocks are classified once, in parallel, before
  // the loop: a table-driven block_kind is a global load, and masks with long EMPTY
  // runs (global tokens, shared prefixes) would otherwise be stepped over one by one
  // between the loop's barriers. Blocks past the list's capacity are classified on
  // the fly.
  __shared__ uint32_t visit[kVisitCap];
  __shared__ int live_per_warp[kNumWarps];
  // the list's length, and the first block it does not cover (hi when it covers all);
  // kept in shared memory: registers are the scarce resource in the key loop
  __shared__ int visit_len, scan_from;
  const int listed = max(min(hi - lo, kVisitCap), 0);
  int num_listed = 0;
  for (int base = 0; base < listed; base += kThreads) {
    const int i = base + threadIdx.x;
    const uint32_t kinds = i < listed ? classify(lo + i) : 0u;
    const uint32_t live = __ballot_sync(0xffffffffu, kinds != 0);
    if (lane == 0) live_per_warp[warp] = __popc(live);
    __syncthreads();
    int offset = num_listed;
#pragma unroll
    for (int w = 0; w < kNumWarps; ++w) {
      const int c = live_per_warp[w];
      offset += w < warp ? c : 0;
      num_listed += c;
    }
    if (kinds != 0) {
      visit[offset + __popc(live & ((1u << lane) - 1u))] =
          (static_cast<uint32_t>(lo + i) << 16) | kinds;
    }
    __syncthreads();  // live_per_warp is free again
  }
  if (threadIdx.x == 0) {
    visit_len = num_listed;
    scan_from = lo + listed < hi ? lo + listed : hi;
  }
  // Staged reads: the query block's values once; each key block's values are
  // read from global memory one block ahead, held in registers over an
  // iteration's compute and stored before its last barrier, so their latency is
  // never between barriers.
  __shared__ uint32_t staged_rows[kRowStagedRows][kBlockM];
  __shared__ uint32_t staged_keys[kStages][kKeyStagedRows][kBlockN];
  if constexpr (kRowStaged > 0) {
    if (threadIdx.x < kBlockM) {
      const int q = min(q_start + static_cast<int>(threadIdx.x), p.seqlen_q - 1);
#pragma unroll
      for (int i = 0; i < kRowStaged; ++i) {
        staged_rows[i][threadIdx.x] = row_staged(i, b, h, q, p.aux);
      }
    }
  }
  __syncthreads();
  auto read_staged_keys = [&](int n, uint32_t (&vals)[kKeyStagedRows]) {
    if constexpr (kKeyStaged > 0) {
      if (threadIdx.x < kBlockN && n < hi) {
        const int k = min(n * kBlockN + static_cast<int>(threadIdx.x), p.seqlen_k - 1);
#pragma unroll
        for (int i = 0; i < kKeyStaged; ++i) vals[i] = key_staged(i, b, h, k, p.aux);
      }
    }
  };
  auto store_staged_keys = [&](int slot, const uint32_t (&vals)[kKeyStagedRows]) {
    if constexpr (kKeyStaged > 0) {
      if (threadIdx.x < kBlockN) {
#pragma unroll
        for (int i = 0; i < kKeyStaged; ++i) staged_keys[slot][i][threadIdx.x] = vals[i];
      }
    }
  };
  // The idx-th live block (past the list, with kLongKeys: the first live block
  // after `prev`, classified on the fly), or hi << 16 when none is left.
  auto visit_code = [&](int idx, int prev) -> uint32_t {
    if (idx < visit_len) return visit[idx];
    if constexpr (!kLongKeys) return static_cast<uint32_t>(hi) << 16;
    int n = max(prev + 1, scan_from);
    uint32_t kinds = 0;
    while (n < hi && (kinds = classify(n)) == 0) ++n;
    return (static_cast<uint32_t>(n) << 16) | kinds;
  };
  auto load_k = [&](int n, int slot) {
    if (n < hi) {
      load_tile_async<kBlockN>(k_slots + slot * kTileBytesKv, k_head, p.k_row_stride,
                               n * kBlockN, p.seqlen_k);
    }
    cp_async_commit();  // always commit, so wait counts stay fixed
  };
  auto load_v = [&](int n, int slot) {
    if (n < hi) {
      load_tile_async<kBlockN>(v_slots + slot * kTileBytesKv, v_head, p.v_row_stride,
                               n * kBlockN, p.seqlen_k);
    }
    cp_async_commit();
  };

  float o[kMTiles][kDTiles][4];
  float row_max[kMTiles][2];
  float row_sum[kMTiles][2];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt) {
      o[mt][dt][0] = o[mt][dt][1] = o[mt][dt][2] = o[mt][dt][3] = 0.f;
    }
    row_max[mt][0] = row_max[mt][1] = -INFINITY;
    row_sum[mt][0] = row_sum[mt][1] = 0.f;
  }
  // Scores are in natural units after score_mod; otherwise the scale folds into exp2.
  const float to_log2 = hooks::kHasScoreMod ? kLog2e : p.scale_log2;
  const int quarter = lane >> 3;  // which of ldmatrix's four 8x8 matrices this lane addresses
  const LdsmLane row_major_lane = ldsm_lane((lane & 7) + (quarter & 1) * 8, quarter >> 1);
  const LdsmLane key_major_lane = ldsm_lane((lane & 7) + (quarter >> 1) * 8, quarter & 1);

  uint32_t code = visit_code(0, lo - 1);  // the current block, as the list packs it
  if (static_cast<int>(code >> 16) < hi) {
    // Prologue: commit groups [Q + K(n0)], [V(n0)], [K(n1)] (Q's copies were issued
    // first thing).
    load_k(code >> 16, 0);
    load_v(code >> 16, 0);
    uint32_t code_next = visit_code(1, code >> 16);
    load_k(code_next >> 16, 1);
    if constexpr (kKeyStaged > 0) {
      uint32_t first_keys[kKeyStagedRows];
      read_staged_keys(code >> 16, first_keys);
      store_staged_keys(0, first_keys);
      __syncthreads();
    }
    // idx counts the blocks visited so far; its parity is the shared-memory slot
    for (int idx = 0; static_cast<int>(code >> 16) < hi; ++idx) {
      const int slot = idx & 1;
      const int n = code >> 16;
      const int n_next = code_next >> 16;
      const uint32_t kind = (code >> (2 * (opaque(threadIdx.x) / 32))) & 3u;  // this warp's BlockKind
      const bool live = kind != static_cast<uint32_t>(BlockKind::Empty);
      // A block holding the query or key tail is masked for bounds, and clamps.
      const bool tail = (n + 1) * kBlockN > p.seqlen_k || q_start + kBlockM > p.seqlen_q;
      // Build the mask before S is live in registers (a generated mask_mod may
      // read aux tensors, and S leaves no registers spare).
      const bool masked =
          (hooks::kHasMaskMod && kind == static_cast<uint32_t>(BlockKind::Partial)) || tail;
      uint32_t next_keys[kKeyStagedRows];  // staged reads of block n_next
      read_staged_keys(n_next, next_keys);
      uint32_t bits[kMTiles];
      if (live && masked) {
        const uint32_t* keys = &staged_keys[slot][0][0];
        if (tail) {
          block_mask<true>(bits, p, b, h, warp_row0, n * kBlockN, lane, &staged_rows[0][0], keys,
                           q_start);
        } else {
          block_mask<false>(bits, p, b, h, warp_row0, n * kBlockN, lane, &staged_rows[0][0], keys,
                            q_start);
        }
      }

      cp_async_wait<2>();  // K(n) (and Q) landed; V(n), K(n_next) may be in flight
      __syncthreads();
      load_v(n_next, slot ^ 1);

      uint32_t prob[kMTiles][kPvSteps][4];
      if (live) {
        float s[kMTiles][kNTiles][4];
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
          for (int j = 0; j < kNTiles; ++j) s[mt][j][0] = s[mt][j][1] = s[mt][j][2] = s[mt][j][3] = 0.f;
        }
        gemm_qk(s, q_tile, k_slots + slot * kTileBytesKv, warp, row_major_lane, key_major_lane);

        if (tail) {
          scores_to_logits<true, true>(s, bits, p, b, h, warp_row0, n * kBlockN, lane);
        } else if (masked) {
          scores_to_logits<true, false>(s, bits, p, b, h, warp_row0, n * kBlockN, lane);
        } else {
          scores_to_logits<false, false>(s, bits, p, b, h, warp_row0, n * kBlockN, lane);
        }
        if constexpr (hooks::kNormalizer == Normalizer::Softmax) {
          online_softmax(s, o, row_max, row_sum, to_log2);
        }
        probs_to_fragments(s, prob);
      }

      store_staged_keys(slot ^ 1, next_keys);
      cp_async_wait<2>();  // V(n) landed; V(n_next), K(n_next) may be in flight
      __syncthreads();     // ... and every warp is done reading K(n)'s slot
      const uint32_t code_after =
          n_next < hi ? visit_code(idx + 2, n_next) : static_cast<uint32_t>(hi) << 16;
      load_k(code_after >> 16, slot);
      if (live) gemm_pv(o, prob, v_slots + slot * kTileBytesKv, row_major_lane);

      code = code_next;
      code_next = code_after;
    }
  }
  cp_async_commit();  // (Q alone, when no key block was live)
  cp_async_wait<0>();

  // Epilogue: normalise, write O (and the natural-log LSE) for in-range rows.
  const int g = lane >> 2;
  const int t = lane & 3;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = warp_row0 + mt * 16 + g + 8 * half;
      float inv = 1.f;
      float lse = 0.f;
      if constexpr (hooks::kNormalizer == Normalizer::Softmax) {
        const float sum = quad_sum(row_sum[mt][half]);
        inv = sum > 0.f ? 1.f / sum : 0.f;
        lse = sum > 0.f ? (row_max[mt][half] * to_log2 + __log2f(sum)) * kLn2 : -INFINITY;
      }
      if (row < p.seqlen_q) {
        Element* o_row = p.o + b * p.o_batch_stride + h * p.o_head_stride + row * p.o_row_stride;
#pragma unroll
        for (int dt = 0; dt < kDataDTiles; ++dt) {
          if (kDataDim != kHeadDim && dt * 8 >= kDataDim) break;  // (D = 72: not 72-79)
          *reinterpret_cast<uint32_t*>(o_row + dt * 8 + 2 * t) =
              pack2<Element>(o[mt][dt][2 * half] * inv, o[mt][dt][2 * half + 1] * inv);
        }
        if (hooks::kNormalizer == Normalizer::Softmax && t == 0) {
          p.lse[(static_cast<int64_t>(b) * p.heads_q + h) * p.seqlen_q + row] = lse;
        }
      }
    }
  }
}

}  // namespace fa_sm80

// Entry points (grid: query blocks, query heads, batch). The launcher takes the
// _long one when Sk has more key blocks than `cubridge_visit_cap`.
extern "C" __constant__ int cubridge_visit_cap = fa_sm80::kVisitCap;

extern "C" __global__ void __launch_bounds__(fa_sm80::kThreads, 2)
    fa_sm80_fwd(const __grid_constant__ FwdParams p) {
  fa_sm80::attention_fwd<false>(p);
}

extern "C" __global__ void __launch_bounds__(fa_sm80::kThreads, 2)
    fa_sm80_fwd_long(const __grid_constant__ FwdParams p) {
  fa_sm80::attention_fwd<true>(p);
}

