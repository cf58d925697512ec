// fa_sm90: a FlashAttention-3-class forward kernel for Hopper (sm_90a).
//
// A persistent grid: each CTA loops over (batch, head, query block) tiles of
// kBlockM rows, in an order that keeps the heads of one L2-sized section
// together and runs the longest query blocks (causal) first. A CTA's first tile
// is its own index; it claims each later one from a launch-wide counter as it
// frees up, so tiles of unequal length balance across the grid. A CTA holds
// kConsumers + 1 warpgroups:
//
//   producer  (warpgroup 0, few registers): its warp 0 issues the TMA loads of Q
//             once per tile, then K of each visited key block into a ring of
//             kStages slots, each slot guarded by full / empty mbarriers; its
//             warp 1 (the V loader) issues each block's V into the ring once its
//             K has landed.
//   consumers (warpgroups 1..kConsumers, many registers): 64 query rows each.
//             wgmma S = Q K^T (both from shared memory), online softmax in
//             registers, wgmma O += P V with P from registers.
//
// Within a consumer, S of key block j is issued before the PV product of block
// j-1 and its softmax runs while that PV product executes (two commit groups).
// Across consumers, named barriers pass a token round-robin: a consumer issues
// its gemms only while holding it, so one warpgroup's softmax runs while the
// tensor cores work on the other's gemms. The epilogue normalises O, stages it
// in shared memory and writes it with a TMA store (rows past Sq are clipped),
// and writes the LSE.
//
// Variant logic enters only through "cubridge_hooks.cuh" (docs/hooks.md): the
// producer walks the key blocks (kv_block_range, EMPTY blocks per block_kind
// skipped), classifies each for every consumer's 64 rows and passes that with
// the block (BlockInfo), so the consumers evaluate no block hook; a consumer
// masks per element where the block is PARTIAL for its rows or holds a tail.
//
// Build-time macros: CUBRIDGE_HEAD_DIM (64, 96, 128, 192 or 256), CUBRIDGE_HEAD_DIM_V (V's
// and O's: 64, 96, 128 or 256; default CUBRIDGE_HEAD_DIM), CUBRIDGE_BLOCK_M (64 rows per
// consumer: 128 or 192), CUBRIDGE_BLOCK_N, CUBRIDGE_STAGES, CUBRIDGE_Q_BUFFERS,
// CUBRIDGE_DTYPE_FP16.
#include <type_traits>

#include "fast_divide.cuh"
#include "fwd_params.cuh"
#include "hook_types.cuh"
#include "key_bits.cuh"
#include "sm80_primitives.cuh"
#include "sm90_primitives.cuh"
#include "sm90_wgmma.cuh"
// This kernel divides O by a header's CUBRIDGE_HOOKS_ACTIVATION_SCALE in its
// epilogue, so a header may scale a bounded activation up (docs/hooks.md).
#define CUBRIDGE_KERNEL_ACTIVATION_SCALE 1
#include "cubridge_hooks.cuh"

#ifndef CUBRIDGE_HEAD_DIM
#error "fa_sm90: compile with -DCUBRIDGE_HEAD_DIM=64, 96, 128, 192 or 256"
#endif
#ifndef CUBRIDGE_BLOCK_M
#define CUBRIDGE_BLOCK_M 128
#endif
#ifndef CUBRIDGE_BLOCK_N
#define CUBRIDGE_BLOCK_N 128
#endif
#ifndef CUBRIDGE_STAGES
#define CUBRIDGE_STAGES 2
#endif

namespace fa_sm90 {
using namespace cubridge;
using namespace cubridge::sm90;
namespace hooks = cubridge_hooks;

#if defined(CUBRIDGE_DTYPE_FP16)
using Element = __half;
#else
using Element = __nv_bfloat16;
#endif
using FwdParams = FwdParamsOf<Element>;

constexpr int kHeadDim = CUBRIDGE_HEAD_DIM;  // of q and k: the S = Q K^T reduction
// Of v and out (O's accumulators, its staging and store): MLA's 128 beside a QK
// head dim of 192; the QK head dim where none is given.
#ifndef CUBRIDGE_HEAD_DIM_V
#define CUBRIDGE_HEAD_DIM_V CUBRIDGE_HEAD_DIM
#endif
constexpr int kHeadDimV = CUBRIDGE_HEAD_DIM_V;
constexpr int kBlockM = CUBRIDGE_BLOCK_M;
constexpr int kBlockN = CUBRIDGE_BLOCK_N;
constexpr int kStages = CUBRIDGE_STAGES;
// Q tiles in shared memory: with two, the next tile's Q loads while this one runs.
#ifndef CUBRIDGE_Q_BUFFERS
#define CUBRIDGE_Q_BUFFERS 2
#endif
constexpr int kQBuffers = CUBRIDGE_Q_BUFFERS;
// With one Q buffer (D = 256, QK/V 192/128: two Q tiles, the K/V ring and O's staging
// tile do not fit 227 KB) O is staged in the tile's own Q buffer, each consumer in its
// own rows once its last S product retired; its rows of the next tile then load after
// its store (kQSlots).
constexpr bool kOInQ = kQBuffers == 1;
constexpr int kRowsPerConsumer = 64;  // wgmma's M
constexpr int kConsumers = kBlockM / kRowsPerConsumer;
constexpr int kThreads = 128 * (kConsumers + 1);
// Q's barriers and words: per Q buffer, or with one buffer per consumer's rows of it
// (each consumer reads only its own 64 rows, so the next tile's rows of one consumer
// load once that consumer's store has read them, while the other still works).
constexpr int kQSlots = kOInQ ? kConsumers : kQBuffers;
constexpr int kQkSteps = kHeadDim / 16;  // k-steps of S = Q K^T
constexpr int kPvSteps = kBlockN / 16;   // k-steps of O += P V
constexpr int kSAcc = kBlockN / 2;       // S accumulators per thread
constexpr int kOAcc = kHeadDimV / 2;     // O accumulators per thread
// Registers per thread after reallocation: the producer gives up what consumers take.
#ifndef CUBRIDGE_PRODUCER_REGS
#define CUBRIDGE_PRODUCER_REGS (kConsumers == 2 ? 40 : 32)
#endif
constexpr int kProducerRegs = CUBRIDGE_PRODUCER_REGS;
constexpr int kConsumerRegs = (65536 / 128 - kProducerRegs) / kConsumers / 8 * 8;
constexpr float kLn2 = 0.6931471805599453f;
constexpr float kLog2e = 1.4426950408889634f;

static_assert(kHeadDim == 64 || kHeadDim == 96 || kHeadDim == 128 || kHeadDim == 192 ||
                  kHeadDim == 256,
              "QK head dim must be 64, 96, 128, 192 or 256");
static_assert(kHeadDimV == 64 || kHeadDimV == 96 || kHeadDimV == 128 || kHeadDimV == 256,
              "V head dim must be 64, 96, 128 or 256 (wgmma n of O += P V)");
static_assert(!(kQBuffers == 1) || (kHeadDimV <= kHeadDim && kHeadDimV % 64 == 0),
              "O is staged in its tile's Q buffer: the V head dim must fit the QK one, "
              "in the same 128-byte swizzled panels");
static_assert(kQBuffers == 1 || kQBuffers == 2, "one or two Q buffers");
static_assert(kBlockM % kRowsPerConsumer == 0 && (kConsumers == 2 || kConsumers == 3),
              "block_m is 2 or 3 consumer warpgroups of 64 rows");
static_assert(kBlockN % 16 == 0 && kBlockN <= 192, "key blocks are whole k-steps, wgmma n <= 192");
static_assert(kStages >= 2, "the K/V ring needs at least two slots");
static_assert(128 * kProducerRegs + 128 * kConsumers * kConsumerRegs <= 65536,
              "register reallocation exceeds the register file");
// The launch allocates kLaunchRegs a thread (what __launch_bounds__(kThreads, 1) leaves),
// and setmaxnreg moves registers only within that allocation: the consumers' increase
// must come from what the producer warpgroup releases, or their setmaxnreg.inc waits
// forever (48 producer registers did: bench/results/fa_sm90-ab-2026-11-27-walker/).
constexpr int kLaunchRegs = 65536 / kThreads / 8 * 8;
static_assert(kConsumers * (kConsumerRegs - kLaunchRegs) <= kLaunchRegs - kProducerRegs,
              "the consumers claim more registers than the producer releases");

// Shared tiles are stored as kPanels column panels, each [rows x kSwizzleBytes] with
// that swizzle (what TMA writes and wgmma reads): 64 elements a row with the 128-byte
// swizzle where the width is a multiple of 64, else 32 with the 64-byte one (D = 96:
// three panels, so that no product runs over zero-filled columns). Q and K tiles are
// kHeadDim wide, V and O tiles kHeadDimV.
template <int kRows, int kCols = kHeadDim>
struct SwizzledTile {
  static constexpr int kSwizzleBytes = kCols % 64 == 0 ? 128 : 64;
  static constexpr int kPanelCols = kSwizzleBytes / 2;  // 16-bit elements a panel row
  static constexpr int kPanels = kCols / kPanelCols;
  static constexpr int kPanelBytes = kRows * kSwizzleBytes;
  static constexpr int kAtomBytes = 8 * kSwizzleBytes;  // 8 rows: one swizzle pattern
  static constexpr int kBytes = kPanels * kPanelBytes;
  static_assert(kCols % 32 == 0, "tiles are whole 32- or 64-column panels");
  alignas(1024) Element data[kRows * kCols];

  __device__ __forceinline__ uint32_t base() const { return smem_addr(data); }
  __device__ __forceinline__ void* panel(int p) {
    return reinterpret_cast<char*>(data) + p * kPanelBytes;
  }
};
using QTile = SwizzledTile<kBlockM>;
using KTile = SwizzledTile<kBlockN>;
using VTile = SwizzledTile<kBlockN, kHeadDimV>;
using OTile = SwizzledTile<kBlockM, kHeadDimV>;
// The host reads the panel widths to encode its tensor maps' boxes and swizzles.
extern "C" __constant__ int cubridge_tile_panels[2] = {QTile::kPanelCols, VTile::kPanelCols};

// mask_mod's staged reads (docs/hooks.md): the key-only reads of each key block
// are loaded by the producer warp into a shared ring beside K (so a masked block
// reads them from shared memory, not with a global load per element), and the
// query-only reads of a consumer's two rows are loaded into registers once per
// tile. Headers that provide them define CUBRIDGE_HOOKS_STAGED_READS (generated
// ones do); with others nothing is staged.
#ifdef CUBRIDGE_HOOKS_STAGED_READS
constexpr int kKeyStagedReads = hooks::kKeyStaged;
constexpr int kRowStagedReads = hooks::kRowStaged;
#else
constexpr int kKeyStagedReads = 0;
constexpr int kRowStagedReads = 0;
#endif
// Headers whose mask_mod reads no aux define CUBRIDGE_HOOKS_MASK_INDEX_ONLY: their
// mask is evaluated before the block's S product is issued (mask_bits).
#ifdef CUBRIDGE_HOOKS_MASK_INDEX_ONLY
constexpr bool kMaskIndexOnly = true;
#else
constexpr bool kMaskIndexOnly = false;
#endif
// Plain attention (no mask_mod, no score_mod, softmax: full attention, GQA, MQA).
// - Its steady blocks are all of the unmasked class: the walk visits key blocks from
//   the last down, so only a tile's first block can hold keys past Sk, and rows past
//   Sq need no masking there (no hook reads their indices; Q's rows past Sq are zero
//   filled and their O and LSE are not stored).
// - Its steady loop runs two blocks a turn with P in two arrays that trade roles by
//   block (kAlternatingP), so the fast path's P is never copied (take_fragments: 32
//   PRMTs a block, 8.5% of causal's steady-loop stall samples): full attention +3% to
//   +19% at S = 1024-8192 (NOTES.md, "P in two arrays for plain attention"). Others
//   keep the copy: the two-block form spilled there (masked 2-28 B, ALiBi's score_mod
//   32 B). CUBRIDGE_ALTERNATING_P=0/1 overrides it (A/B).
constexpr bool kPlainSteady = !hooks::kHasMaskMod && !hooks::kHasScoreMod &&
                             hooks::kNormalizer == Normalizer::Softmax;
#ifdef CUBRIDGE_ALTERNATING_P
constexpr bool kAlternatingP = CUBRIDGE_ALTERNATING_P != 0;
#else
// (at D = 256 the second array spills beside O's 128 accumulators; with a QK head dim
// past 128 (192 / 128) O is staged in Q, which its boundary was not built beside)
constexpr bool kAlternatingP = kPlainSteady && kHeadDim <= 128;
#endif
// Headers whose score_mod is A * core(B * s) (soft-capping) say so: under softmax
// B folds into the score scale and A into the exp2 factor, two multiplies fewer
// per score; the row max and LSE are kept in core units times A (A > 0).
#ifdef CUBRIDGE_HOOKS_SCORE_AFFINE
constexpr bool kScoreAffine = hooks::kHasScoreMod && hooks::kNormalizer == Normalizer::Softmax;
__device__ __forceinline__ float score_core(float s, int b, int h, int q, int k,
                                            const AuxArgs& aux) {
  return hooks::score_core(s, b, h, q, k, aux);
}
#else
constexpr bool kScoreAffine = false;
__device__ __forceinline__ float score_core(float s, int b, int h, int q, int k,
                                            const AuxArgs& aux) {
  return hooks::score_mod(s, b, h, q, k, aux);
}
#endif
// A sigmoid header's affine score_mod (one that is not linear, e.g. soft-capped):
// B folds into the scale, A and the exponent's -log2(e) into one FFMA on the core,
// sigmoid(A core(B s)) = activation_of_exponent(kExponentBias - A log2(e) core).
#if defined(CUBRIDGE_HOOKS_SCORE_AFFINE) && defined(CUBRIDGE_HOOKS_ACTIVATION_OF_EXPONENT)
constexpr bool kSigmoidOfAffine =
    hooks::kHasScoreMod && hooks::kNormalizer == Normalizer::Elementwise;
__device__ __forceinline__ float sigmoid_of_core(float core) {
  return hooks::activation_of_exponent(
      fmaf(core, -kLog2e * hooks::kScoreOut, hooks::kExponentBias));
}
// m (kExponentBias - t) for sigmoid_of_core's t: sigmoid_weights' input.
__device__ __forceinline__ float sigmoid_input_of_core(float core, float m) {
  return core * (kLog2e * hooks::kScoreOut * m);
}
#else
constexpr bool kSigmoidOfAffine = false;
__device__ __forceinline__ float sigmoid_of_core(float core) { return core; }
__device__ __forceinline__ float sigmoid_input_of_core(float core, float) { return core; }
#endif
#ifdef CUBRIDGE_HOOKS_SCORE_AFFINE
constexpr float kScoreIn = kScoreAffine || kSigmoidOfAffine ? hooks::kScoreIn : 1.f;
constexpr float kScoreOut = kScoreAffine ? hooks::kScoreOut : 1.f;
#else
constexpr float kScoreIn = 1.f;
constexpr float kScoreOut = 1.f;
#endif
// Headers whose score_mod is R(b, h, q) * s, a factor of the score no key changes,
// say so (a per-head temperature, SSMax's s[h] log(q + 1)): under softmax the
// scores stay raw, as without a score_mod, and |R| folds into each row's exp2 factor
// (RowScale, once a tile) instead of two multiplies a score. A row with R < 0 takes
// its scores negated (exact); only a warp holding such a row pays for it.
#ifdef CUBRIDGE_HOOKS_SCORE_ROW_FACTOR
constexpr bool kScoreRowFactor =
    hooks::kHasScoreMod && hooks::kNormalizer == Normalizer::Softmax;
__device__ __forceinline__ float score_row_factor(int b, int h, int q, const AuxArgs& aux) {
  return hooks::score_row_factor(b, h, q, aux);
}
#else
constexpr bool kScoreRowFactor = false;
__device__ __forceinline__ float score_row_factor(int, int, int, const AuxArgs&) { return 1.f; }
#endif

// Sigmoid headers whose score_mod is B * s + C say so: the scale, B and the
// exponent's -log2(e) then fold into one FFMA per score.
#ifdef CUBRIDGE_HOOKS_SIGMOID_EXPONENT
constexpr bool kSigmoidExponent = hooks::kNormalizer == Normalizer::Elementwise;
__device__ __forceinline__ float sigmoid_weight(float s, float k1, int b, int h, int q, int k,
                                                const AuxArgs& aux) {
  return hooks::activation_of_exponent(
      fmaf(s, k1, fmaf(-kLog2e, hooks::score_offset(b, h, q, k, aux), hooks::kExponentBias)));
}
constexpr float kSigmoidScoreIn = hooks::kScoreIn;
// m (kExponentBias - t) for sigmoid_weight's t: sigmoid_weights' input.
__device__ __forceinline__ float sigmoid_input(float s, float k1, float m, int b, int h, int q,
                                               int k, const AuxArgs& aux) {
  return fmaf(s, -k1 * m, (kLog2e * m) * hooks::score_offset(b, h, q, k, aux));
}
#else
constexpr bool kSigmoidExponent = false;
__device__ __forceinline__ float sigmoid_weight(float s, float, int, int, int, int,
                                                const AuxArgs&) {
  return s;
}
constexpr float kSigmoidScoreIn = 1.f;
__device__ __forceinline__ float sigmoid_input(float s, float, float, int, int, int, int,
                                               const AuxArgs&) {
  return s;
}
#endif

// Headers that scale their elementwise activation up (fp16 sigmoid: weights kept
// above fp16's subnormal range when P is rounded) say by how much; O is divided
// back in the epilogue.
#ifdef CUBRIDGE_HOOKS_ACTIVATION_SCALE
constexpr float kActivationScale = CUBRIDGE_HOOKS_ACTIVATION_SCALE;
#else
constexpr float kActivationScale = 1.f;
#endif

// Sigmoid weights with one SFU op where the block allows it. w = C sigmoid(y) (C =
// kActivationScale) is 1 / (1 + e^-y) on the SFU: ex2 and rcp, two ops per score,
// which bound sigmoid kernels. Two one-op forms, each exact enough only in a range:
// - tail (every weight small, e^y <= 1/16): w = C (u - u^2 + u^3), u = e^y, relative
//   error u^3 <= 2.4e-4 (sigmoid_causal: y = s - log S);
// - tanh (every weight >= C / 256): w = C (1 + tanh(y / 2)) / 2; tanh.approx's
//   absolute error (4e-6, bench/results/fa_sm90-ab-2026-11-24-sigmoid/) is then
//   within 1e-3 of w (soft-capped sigmoids: y = 30 tanh(s / 30)).
// A warp takes the form its last block allowed and checks the block against that
// form's range; a block outside it (any row of very negative scores) is redone with
// the two-op form, which also picks the next block's form. The input is v = m y /
// ln 2 with m = 1 (tail: u = 2^v) or ln 2 / 2 (tanh: y / 2 = v). Only unmasked
// steady blocks take this path; masked ones and a tile's first keep the two-op form,
// but for a soft-capped sigmoid's first block (first_block_poly_cap).
// CUBRIDGE_SIGMOID_ONE_SFU=0 keeps the two-op form everywhere (A/B).
#ifndef CUBRIDGE_SIGMOID_ONE_SFU
#define CUBRIDGE_SIGMOID_ONE_SFU 1
#endif
constexpr bool kSigmoidOneSfu =
    CUBRIDGE_SIGMOID_ONE_SFU && (kSigmoidExponent || kSigmoidOfAffine) && kConsumers == 2;
enum SigmoidForm : int { kSigmoidTail = 0, kSigmoidTanh = 1, kSigmoidExact = 2 };
// A form is left only after two blocks in a row fall outside its range: a lone row of
// high scores (sigmoid_causal at S = 1024: a score above 4.2 in 3% of the blocks)
// costs one redo, not a detour through the two-op form. Bit kSigmoidStrike of the
// state holds the first miss.
constexpr int kSigmoidStrike = 4;
#ifdef CUBRIDGE_HOOKS_ACTIVATION_OF_EXPONENT
__device__ __forceinline__ float two_op_sigmoid(float t) { return hooks::activation_of_exponent(t); }
constexpr float kSigmoidExponentBias = hooks::kExponentBias;
#else
__device__ __forceinline__ float two_op_sigmoid(float t) { return t; }
constexpr float kSigmoidExponentBias = 0.f;
#endif
__device__ __forceinline__ float sigmoid_input_scale(int form) {
  return (form & ~kSigmoidStrike) == kSigmoidTanh ? 0.5f * kLn2 : 1.f;
}
__device__ __forceinline__ float tanh_approx(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
// A soft-capped sigmoid (score_mod A tanh(B s), A >= kPolyCapMinOut: caps of 30, 50)
// in the tanh form takes its cap's tanh on the FMA pipe, as the Taylor polynomial
// p(z) = z - z^3 / 3 + 2 z^5 / 15 of z = B s: one SFU op a score instead of two
// (comb: +3% to +7%, NOTES.md "A soft cap's tanh as a polynomial"). p increases
// everywhere and p(z) >= tanh(z) for z > 0, so the form's own check (every weight
// >= C / 256) bounds z from below where p is exact enough, and above it p only moves
// weights already within 1 - sigmoid(A tanh z) of C towards C: the weight's relative
// error is <= 5e-5 at A = 24, 1.3e-5 at A = 30 (float64 scan,
// tests/lower/test_score_affine.py). The scores stay as they are, so a block outside
// the range is redone from them with the two-op form. CUBRIDGE_POLY_CAP=0 turns it
// off (A/B). (Under softmax the same polynomial was slower: NOTES.md.)
#ifndef CUBRIDGE_POLY_CAP
#define CUBRIDGE_POLY_CAP 1
#endif
constexpr float kPolyCapMinOut = 24.f;  // (tests/lower/test_score_affine.py reads it)
#ifdef CUBRIDGE_HOOKS_CORE_TANH
constexpr float kCapOut = hooks::kScoreOut, kCapIn = hooks::kScoreIn;  // A, B
constexpr bool kPolyCap =
    CUBRIDGE_POLY_CAP && kSigmoidOneSfu && kSigmoidOfAffine && kCapOut >= kPolyCapMinOut;
#else
constexpr float kCapOut = 1.f, kCapIn = 1.f;
constexpr bool kPolyCap = false;
#endif

template <int kReads>
struct StagedKeyRing {
  alignas(16) uint32_t v[kStages][kReads][kBlockN];  // (read four keys at a time)
  __device__ __forceinline__ void set(int slot, int i, int k, uint32_t x) { v[slot][i][k] = x; }
  __device__ __forceinline__ const uint32_t* slot(int s) const { return &v[s][0][0]; }
};
template <>
struct StagedKeyRing<0> {
  __device__ __forceinline__ void set(int, int, int, uint32_t) {}
  __device__ __forceinline__ const uint32_t* slot(int) const { return nullptr; }
};

// Pair reads (docs/hooks.md): score_mod's read of a 16-bit aux tensor at [..., k]
// with its other indices of (b, h, q), such as a dense bias[b, h, q, k]. Read per
// score after the wait for S, its latency was exposed in every block and its 64
// values a thread spilled (0.67x of Flex Triton). Here each warp copies its 16 rows
// of a block's keys into shared memory with cp.async as soon as it knows the block
// (its K has landed), and reads them back after the wait for S with ldmatrix, which
// hands each thread exactly its accumulator positions' pairs of keys (NOTES.md,
// "Pair reads staged by the consumers"). A consumer's rows take 16 KB a block: in
// its O staging rows where a block has as many keys as the head dim (D = 128: the
// ring and O leave no room for more), else in a tile of their own. A tile's first
// block reads them from global memory: its copy would land in O's rows before the
// previous tile's store has read them. CUBRIDGE_PAIR_STAGED=0 turns it off (A/B).
// Where neither fits (QK/V 192/128: 208 KB of tiles) the pairs are read as written.
#ifndef CUBRIDGE_PAIR_STAGED
#define CUBRIDGE_PAIR_STAGED 1
#endif
constexpr int kElementTileBytes =  // Q buffers, the K/V ring, O's staging tile
    2 * (kQBuffers * kBlockM * kHeadDim + kStages * kBlockN * (kHeadDim + kHeadDimV) +
         (kOInQ ? 0 : kBlockM * kHeadDimV));
constexpr bool kPairRowsFit = (kBlockN == kHeadDimV && !kOInQ) ||  // in O's rows
                              kElementTileBytes + 2 * kBlockM * kBlockN + 8 * 1024 <= 227 * 1024;
#ifdef CUBRIDGE_HOOKS_PAIR_READS
constexpr bool kPairStaged = CUBRIDGE_PAIR_STAGED && hooks::kPairReads > 0 &&
                             hooks::kHasScoreMod && !kScoreAffine && !kSigmoidOfAffine &&
                             !kSigmoidExponent && kPairRowsFit;
__device__ __forceinline__ const uint16_t* pair_row(int b, int h, int q, const AuxArgs& aux) {
  return hooks::pair_row(b, h, q, aux);
}
__device__ __forceinline__ float score_mod_paired(float s, int b, int h, int q, int k,
                                                  uint32_t pair, const AuxArgs& aux) {
  return hooks::score_mod_paired(s, b, h, q, k, pair, aux);
}
#else
constexpr bool kPairStaged = false;
__device__ __forceinline__ const uint16_t* pair_row(int, int, int, const AuxArgs&) {
  return nullptr;
}
__device__ __forceinline__ float score_mod_paired(float s, int, int, int, int, uint32_t,
                                                  const AuxArgs&) {
  return s;
}
#endif
// (a consumer's pair rows are its O staging rows)
constexpr bool kPairInO = kBlockN == kHeadDimV && !kOInQ;
static_assert(!kPairStaged || kBlockN % 16 == 0, "pair rows are copied 16 keys a lane-pair");
template <bool kOwnTile>
struct PairTile {  // kBlockM rows of kBlockN 16-bit values, laid out as O's staging
  alignas(1024) uint16_t data[kBlockM * kBlockN];
  __device__ __forceinline__ uint32_t base() const { return smem_addr(data); }
};
template <>
struct PairTile<false> {
  __device__ __forceinline__ uint32_t base() const { return 0u; }
};
// O's staging tile for the epilogue's TMA store: a tile of its own, or none where O
// is staged in the tile's Q buffer (kOInQ; o_staging below).
template <bool kOwnTile>
struct OStagingTile : SwizzledTile<kBlockM, kHeadDimV> {};
template <>
struct OStagingTile<false> {  // (base(): read only under staging switches off here)
  __device__ __forceinline__ uint32_t base() const { return 0u; }
};

template <int kKeyReads>
struct SharedStorageOf {
  SwizzledTile<kBlockM> q[kQBuffers];
  SwizzledTile<kBlockN> k[kStages];
  SwizzledTile<kBlockN, kHeadDimV> v[kStages];
  OStagingTile<!kOInQ> o;  // epilogue staging for the TMA store (kOInQ: in q[])
  uint64_t q_full[kQSlots], q_empty[kQSlots];
  uint64_t k_full[kStages], k_empty[kStages];
  uint64_t v_full[kStages], v_empty[kStages];
  // Written by the producer before the arrival that completes the matching
  // barrier (k_full / q_full), read by the consumers after waiting on it: the
  // classification of each visited key block (BlockInfo) and whether a tile
  // visits any key block at all.
  uint32_t block_info[kStages];
  uint32_t kv_batch_head[kStages];  // the producer's own: (batch << 16 | K/V head) per slot
  int tile_index[kQSlots];  // the schedule index of the tile in each Q slot; -1: no more
  int tile_live[kQSlots];
  StagedKeyRing<kKeyReads> staged_keys;  // key-only mask reads per ring slot
  PairTile<kPairStaged && !kPairInO> pair;  // pair reads' rows (else in o's rows)
};
// Staged only when the key ring fits beside the tiles (+ 1 KB of alignment slack;
// else mask_mod reads as written).
constexpr bool kStagedKeysFit = sizeof(SharedStorageOf<kKeyStagedReads>) + 1024 <= 227 * 1024;
constexpr bool kStagedMask = kKeyStagedReads + kRowStagedReads > 0 && kStagedKeysFit;
constexpr int kKeyStaged = kStagedMask ? kKeyStagedReads : 0;
constexpr int kRowStaged = kStagedMask ? kRowStagedReads : 0;
using SharedStorage = SharedStorageOf<kKeyStaged>;


__device__ __forceinline__ uint32_t key_staged(int i, int b, int h, int k, const AuxArgs& aux) {
#ifdef CUBRIDGE_HOOKS_STAGED_READS
  if constexpr (kStagedMask) return hooks::key_staged(i, b, h, k, aux);
#endif
  return 0u;
}
__device__ __forceinline__ uint32_t row_staged(int i, int b, int h, int q, const AuxArgs& aux) {
#ifdef CUBRIDGE_HOOKS_STAGED_READS
  if constexpr (kStagedMask) return hooks::row_staged(i, b, h, q, aux);
#endif
  return 0u;
}
__device__ __forceinline__ bool mask_mod_staged(int b, int h, int q, int k, Staged rows,
                                                Staged keys, const AuxArgs& aux) {
#ifdef CUBRIDGE_HOOKS_STAGED_READS
  if constexpr (kStagedMask) return hooks::mask_mod_staged(b, h, q, k, rows, keys, aux);
#endif
  return hooks::mask_mod(b, h, q, k, aux);
}

constexpr int kSmemBytes = sizeof(SharedStorage) + 1024;  // + alignment slack
static_assert(kSmemBytes <= 227 * 1024, "tiles exceed the 227 KB of shared memory a CTA may use");

// Named barriers (0 is __syncthreads): the mma token of each consumer, and each
// consumer warpgroup's own barrier for the epilogue.
constexpr int kMmaTokenBarrier = 1;                          // + consumer index
constexpr int kEpilogueBarrier = kMmaTokenBarrier + kConsumers;  // + consumer index

// Kernel parameters: tensor maps first (64-byte aligned), then the FwdParams every
// library kernel takes, then the tile schedule. Mirrored by kernels/fa_sm90/launch.py.
struct Sm90Params {
  CUtensorMap tma_q, tma_k, tma_v, tma_o;  // 4-D (D, S, H, B); boxes 64 x rows
  FwdParams p;
  int num_m_blocks;  // query blocks per (batch, head)
  int num_tiles;     // batch * heads_q * num_m_blocks
  int section;       // (batch, head) pairs per L2 section of the schedule
  // [next, done]: CTAs past their first tile take the next one of the schedule
  // from `next`; the last CTA to finish zeroes both for the next launch.
  int* tile_counter;
  // The schedule's divisors (tile_at runs on the producer's and the consumers' way
  // from one tile to the next, where ~30-instruction divisions cost ~1,000 cycles a
  // tile on the producer's crowded SMSP: fa_sm90-ab-2026-11-27-fastdiv).
  cubridge::FastDivisor by_section_tiles;  // section * num_m_blocks
  cubridge::FastDivisor by_section;        // section
  cubridge::FastDivisor by_heads_q;        // p.heads_q
  cubridge::FastDivisor by_group;          // p.heads_q / p.heads_k (q heads per K/V head)
  CUtensorMap tma_q_rows;  // Q in boxes of one consumer's 64 rows (kOInQ's loads)
};

struct Tile {
  int b, h, m_block;
};

// Tile t of the schedule: sections of `section` consecutive (batch, head) pairs
// (GQA heads that share K/V are neighbours); within a section query blocks run
// last-first (the longest under causal-like masks), then heads.
__device__ __forceinline__ Tile tile_at(int t, const Sm90Params& P) {
  const int sec = P.by_section_tiles.divide(t);
  const int r = t - sec * P.section * P.num_m_blocks;
  const int bh0 = sec * P.section;
  const int sec_size = min(P.section, P.p.batch * P.p.heads_q - bh0);
  // (only the last section may be short of `section` pairs)
  const int mi = sec_size == P.section ? P.by_section.divide(r) : r / sec_size;
  const int bh = bh0 + (r - mi * sec_size);
  const int b = P.by_heads_q.divide(bh);
  return {b, bh - b * P.p.heads_q, P.num_m_blocks - 1 - mi};
}

// The tile's key range [lo, hi). A header whose kv_block_range is the binary search
// over block_kind on the leading and trailing key ranges (interval rules: EMPTY is
// monotone under inclusion; CUBRIDGE_HOOKS_KV_RANGE_BY_SEARCH) has it run by the
// producer warp 32 ways at once: each round every lane tests one split point, so 32
// blocks take one round per end and 1024 two, instead of a chain of dependent
// classifications (about 3,000 cycles before each tile's first K could be issued:
// sliding windows, bench/results/fa_sm90-ab-2026-11-25-walk32/). Each end keeps the
// split of the last lane before the first that fails, so the result is a range the
// hook's own classification vouches for.
__device__ __forceinline__ KvRange tile_kv_range(const FwdParams& p, int b, int h, int q_start,
                                                 int q_end, int num_kv_blocks, int lane) {
#ifdef CUBRIDGE_HOOKS_KV_RANGE_BY_SEARCH
  int lo = 0, top = num_kv_blocks;  // largest lo with [0, lo) EMPTY, in [lo, top]
  while (lo < top) {
    const int step = (top - lo + 31) / 32;
    const int x = min(lo + (lane + 1) * step, top);
    const uint32_t fails = __ballot_sync(
        0xffffffffu, hooks::block_kind(b, h, q_start, q_end, 0, x * kBlockN, p.aux) !=
                         BlockKind::Empty);
    const int f = fails != 0u ? __ffs(fails) - 1 : 32;  // the first lane whose split fails
    const int passed = f == 0 ? lo : min(lo + f * step, top);
    top = f == 32 ? passed : min(lo + (f + 1) * step, top) - 1;
    lo = passed;
  }
  int hi = num_kv_blocks, bottom = lo;  // smallest hi with [hi, n) EMPTY, in [bottom, hi]
  while (bottom < hi) {
    const int step = (hi - bottom + 31) / 32;
    const int x = max(hi - (lane + 1) * step, bottom);
    const uint32_t fails = __ballot_sync(
        0xffffffffu, hooks::block_kind(b, h, q_start, q_end, x * kBlockN,
                                       num_kv_blocks * kBlockN, p.aux) != BlockKind::Empty);
    const int f = fails != 0u ? __ffs(fails) - 1 : 32;
    const int passed = f == 0 ? hi : max(hi - f * step, bottom);
    bottom = f == 32 ? passed : max(hi - (f + 1) * step, bottom) + 1;
    hi = passed;
  }
  return KvRange{lo, hi};
#else
  return hooks::kv_block_range(b, h, q_start, q_end, kBlockN, num_kv_blocks, p.aux);
#endif
}

// The key blocks a tile visits: [lo, hi) walked from hi - 1 down (partial blocks
// on the diagonal first), skipping those EMPTY for every consumer's rows. Walked
// by the producer warp, which classifies 32 blocks at a time, one per lane and
// each once per consumer: a block hook that reads a table then costs one round of
// loads per 32 blocks instead of one per block. Classified block by block, it took
// 33-44% of the producer's cycles on document_causal and share_question (1,400-
// 1,900 cycles per block, the tile trace of 2026-11-25) and the consumers waited.
struct KeyWalk {
  static constexpr int kLanes = 32;
  int lo, n;  // next block to consider is n - 1
  int b, h, q_start, q_end;
  int top;             // the last window classified: lane l holds block top - 1 - l
  uint32_t lane_kinds;  // this lane's block: its kind per consumer, 2 bits each
  uint32_t live;        // bit l: block top - 1 - l is not EMPTY for every consumer

  KeyWalk() = default;
  __device__ __forceinline__ KeyWalk(const FwdParams& p, const Tile& t, int lane) {
    b = t.b;
    h = t.h;
    q_start = t.m_block * kBlockM;
    q_end = min(q_start + kBlockM, p.seqlen_q);
    const int num_kv_blocks = (p.seqlen_k + kBlockN - 1) / kBlockN;
#ifdef CUBRIDGE_HOOKS_BLOCK_TABLE
    // A table's block_kind is a load: up to two windows of blocks, the windows find
    // the range themselves, and the range's round of dependent loads before each
    // tile's first K (document masks) is saved.
    if (num_kv_blocks <= 2 * kLanes) {
      lo = 0;
      n = num_kv_blocks;
      top = n + kLanes;
      return;
    }
#endif
    const KvRange r = tile_kv_range(p, b, h, q_start, q_end, num_kv_blocks, lane);
    lo = max(r.lo, 0);
    n = min(r.hi, num_kv_blocks);
    top = n + kLanes;  // (nothing classified yet)
  }
  // The next live key block and its kind for each consumer's rows, or -1 when
  // the walk is over. Every lane of the warp calls it together.
  __device__ __forceinline__ int next(const FwdParams& p, BlockKind (&kinds)[kConsumers],
                                      int lane) {
    while (n > lo) {
      if (n <= top - kLanes) classify_window(p, lane);  // block n - 1 is past the window
      const uint32_t ahead = live & (~0u << (top - n));  // blocks n - 1 and below
      if (ahead != 0u) {
        const int l = __ffs(ahead) - 1;
        n = top - 1 - l;
        const uint32_t w = __shfl_sync(0xffffffffu, lane_kinds, l);
#pragma unroll
        for (int c = 0; c < kConsumers; ++c) kinds[c] = static_cast<BlockKind>((w >> (2 * c)) & 3u);
        return n;
      }
      n = top - kLanes;  // nothing live left in the window
    }
    return -1;
  }

 private:
  // Blocks [n - 32, n) (those at or above lo), block n - 1 - lane on each lane.
  __device__ __forceinline__ void classify_window(const FwdParams& p, int lane) {
    top = n;
    const int blk = n - 1 - lane;
    const int k_start = blk * kBlockN;
    const int k_end = min(k_start + kBlockN, p.seqlen_k);
    lane_kinds = 0u;
    bool any = false;
    if (blk >= lo) {
#pragma unroll
      for (int c = 0; c < kConsumers; ++c) {
        const int row0 = q_start + c * kRowsPerConsumer;
        const int row_end = min(row0 + kRowsPerConsumer, q_end);
        const BlockKind kind = row0 < row_end
                                   ? hooks::block_kind(b, h, row0, row_end, k_start, k_end, p.aux)
                                   : BlockKind::Empty;
        lane_kinds |= static_cast<uint32_t>(kind) << (2 * c);
        any = any || kind != BlockKind::Empty;
      }
    }
    live = __ballot_sync(0xffffffffu, any);
  }
};

// What the producer tells the consumers about a key block it loads: its index,
// whether it is the tile's last, and its kind for each consumer's 64 rows. The
// producer evaluates the block hooks once per block, off the consumers' critical
// path (they only read this word after waiting for K).
struct BlockInfo {
  static constexpr int kIndexBits = 24;
  static constexpr uint32_t kLast = 1u << kIndexBits;
  static constexpr int kKindShift = kIndexBits + 2;

  static __device__ __forceinline__ uint32_t pack(int n, bool last, const BlockKind (&kinds)[kConsumers]) {
    uint32_t w = static_cast<uint32_t>(n) | (last ? kLast : 0u);
#pragma unroll
    for (int c = 0; c < kConsumers; ++c) w |= static_cast<uint32_t>(kinds[c]) << (kKindShift + 2 * c);
    return w;
  }
  static __device__ __forceinline__ int index(uint32_t w) { return static_cast<int>(w & (kLast - 1)); }
  static __device__ __forceinline__ bool last(uint32_t w) { return (w & kLast) != 0u; }
  static __device__ __forceinline__ BlockKind kind(uint32_t w, int consumer) {
    return static_cast<BlockKind>((w >> (kKindShift + 2 * consumer)) & 3u);
  }
};
static_assert(BlockInfo::kKindShift + 2 * 3 <= 32, "block info fits 32 bits");

// Position in the K/V ring, shared in lockstep by the producer and the consumers.
struct RingSlot {
  int index = 0;
  uint32_t phase = 0;
  __device__ __forceinline__ void advance() {
    if (++index == kStages) {
      index = 0;
      phase ^= 1u;
    }
  }
};

// ---- producer ------------------------------------------------------------------------

// One tile, every 64-column panel of it, by TMA: rows [row, row + kRows) of one
// (head, batch), completing on `bar` with the tile's bytes (rows out of range
// arrive as zeros and still count).
template <int kRows, int kCols>
__device__ __forceinline__ void load_tile(const CUtensorMap* map, SwizzledTile<kRows, kCols>& tile,
                                          uint64_t* bar, int row, int head, int batch) {
  mbar_arrive_expect_tx(bar, SwizzledTile<kRows, kCols>::kBytes);
#pragma unroll
  for (int pn = 0; pn < SwizzledTile<kRows, kCols>::kPanels; ++pn) {
    tma_load_4d(map, tile.panel(pn), bar, pn * SwizzledTile<kRows, kCols>::kPanelCols, row,
                head, batch);
  }
}

// The schedule index of this CTA's next tile (>= num_tiles: none). A CTA's first
// tile is its own index; each later one is claimed from the launch's counter.
__device__ __forceinline__ int claim_tile(const Sm90Params& P) {
  return static_cast<int>(gridDim.x) + atomicAdd(P.tile_counter, 1);
}

// The V loads, by warp 1 of the producer warpgroup. It follows the K/V ring in lockstep
// with the producer warp: once a block's K has landed (its block and (batch, K/V head)
// are in the slot's words by then), it reads those words, arrives on the slot's
// k_empty (the producer rewrites them for the K two blocks on, and so cannot get a
// whole phase of k_full ahead of this warp) and issues the block's V as soon as its
// V slot frees, when the PV product two blocks back retires. So no V waits behind the
// producer's walk of the next tile, nor any K behind a V slot. A slot word
// kEndOfLoads, arrived on k_full without a copy after the producer's last tile, ends it.
constexpr uint32_t kEndOfLoads = ~0u;  // (no block's word: a kind is 0, 1 or 2)

__device__ __forceinline__ void v_loader(const Sm90Params& P, SharedStorage& sh, int lane) {
  RingSlot slot;
  while (true) {
    mbar_wait(&sh.k_full[slot.index], slot.phase);
    const uint32_t info = sh.block_info[slot.index];
    if (info == kEndOfLoads) break;
    const uint32_t batch_head = sh.kv_batch_head[slot.index];
    __syncwarp();  // (every lane's reads before lane 0's arrival)
    if (lane == 0) mbar_arrive(&sh.k_empty[slot.index]);
    mbar_wait(&sh.v_empty[slot.index], slot.phase ^ 1u);
    if (lane == 0) {
      load_tile(&P.tma_v, sh.v[slot.index], &sh.v_full[slot.index],
                BlockInfo::index(info) * kBlockN, static_cast<int>(batch_head & 0xffffu),
                static_cast<int>(batch_head >> 16));
    }
    slot.advance();
  }
}

// The producer is warp 0 of warpgroup 0: lane 0 issues every copy and barrier
// arrival; the whole warp walks the key blocks (classifying 32 at a time, one per
// lane) and loads the staged key reads, one position per lane and pass.
__device__ __forceinline__ void producer(const Sm90Params& P, SharedStorage& sh, int lane) {
  const FwdParams& p = P.p;
  RingSlot slot;
  int t = blockIdx.x;  // a CTA's first tile is its own index; later ones come from the counter
  for (int iter = 0;; ++iter) {
    const Tile tile = tile_at(t, P);
    const int h_kv = P.by_group.divide(tile.h);
    // Q goes out before the walk, which may read tables: q_full takes two arrivals,
    // Q's (with its bytes) and the word whether the tile visits any key block.
    const int qb = iter % kQBuffers;
    if constexpr (!kOInQ) {
      if (iter >= kQBuffers) mbar_wait(&sh.q_empty[qb], (iter / kQBuffers - 1) & 1);
      if (lane == 0) {
        sh.tile_index[qb] = t;
        load_tile(&P.tma_q, sh.q[qb], &sh.q_full[qb], tile.m_block * kBlockM, tile.h, tile.b);
      }
    }
    KeyWalk walk(p, tile, lane);
    BlockKind kinds[kConsumers];
    int n = walk.next(p, kinds, lane);
    const bool live = n >= 0;
    if constexpr (!kOInQ) {
      if (lane == 0) {
        sh.tile_live[qb] = live;
        mbar_arrive(&sh.q_full[qb]);
      }
    }
    // One Q buffer: each consumer's rows of this tile load once its store of the last
    // tile has read them, after the tile's first K (so that K is in the ring when the
    // first consumer's rows land, not behind the other consumer's store).
    bool q_rows_due = kOInQ;
    auto load_q_rows = [&] {
#pragma unroll
      for (int c = 0; c < kConsumers; ++c) {
        if (iter >= 1) mbar_wait(&sh.q_empty[c], (iter - 1) & 1);
        if (lane == 0) {
          sh.tile_index[c] = t;
          sh.tile_live[c] = live;
          mbar_arrive_expect_tx(&sh.q_full[c], SwizzledTile<kRowsPerConsumer>::kBytes);
#pragma unroll
          for (int pn = 0; pn < QTile::kPanels; ++pn) {
            tma_load_4d(&P.tma_q_rows,
                        static_cast<char*>(sh.q[qb].panel(pn)) +
                            c * kRowsPerConsumer * QTile::kSwizzleBytes,
                        &sh.q_full[c], pn * QTile::kPanelCols,
                        tile.m_block * kBlockM + c * kRowsPerConsumer, tile.h, tile.b);
          }
          mbar_arrive(&sh.q_full[c]);  // (the word, q_full's second arrival)
        }
      }
      q_rows_due = false;
    };
    // The CTA's next tile is claimed with the last key block of this one, when the
    // CTA is about to free up (tiles then go to CTAs as they free up, longest first
    // within an L2 section: balanced with sections of one wave); the atomic's round
    // trip overlaps the wait for that block's slot.
    int t_next = -1;
    while (n >= 0) {
      // The next block classified while the ring slot may still be busy: table
      // reads of data-dependent masks overlap the wait.
      BlockKind next_kinds[kConsumers];
      const int next = walk.next(p, next_kinds, lane);
      if (next < 0 && lane == 0) t_next = claim_tile(P);
      const int k_start = n * kBlockN;
      uint32_t staged[kKeyStaged > 0 ? kKeyStaged : 1][kBlockN / 32];
      if constexpr (kKeyStaged > 0) {
#pragma unroll
        for (int r = 0; r < kBlockN / 32; ++r) {
          const int k = min(k_start + 32 * r + lane, p.seqlen_k - 1);
#pragma unroll
          for (int i = 0; i < kKeyStaged; ++i) staged[i][r] = key_staged(i, tile.b, tile.h, k, p.aux);
        }
      }
      // K's slot is free once every consumer masked the block it held (they read
      // its staged keys until then).
      mbar_wait(&sh.k_empty[slot.index], slot.phase ^ 1u);
      if constexpr (kKeyStaged > 0) {
#pragma unroll
        for (int r = 0; r < kBlockN / 32; ++r) {
#pragma unroll
          for (int i = 0; i < kKeyStaged; ++i) {
            sh.staged_keys.set(slot.index, i, 32 * r + lane, staged[i][r]);
          }
        }
        __syncwarp();  // every lane's stores ordered before lane 0's arrival (release)
      }
      if (lane == 0) {
        sh.block_info[slot.index] = BlockInfo::pack(n, next < 0, kinds);
        sh.kv_batch_head[slot.index] = (static_cast<uint32_t>(tile.b) << 16) | h_kv;
        load_tile(&P.tma_k, sh.k[slot.index], &sh.k_full[slot.index], k_start, h_kv, tile.b);
      }
      slot.advance();
      n = next;
#pragma unroll
      for (int c = 0; c < kConsumers; ++c) kinds[c] = next_kinds[c];
      if (kOInQ && q_rows_due) load_q_rows();
    }
    if (kOInQ && q_rows_due) load_q_rows();  // (a tile without live blocks)
    if (t_next < 0 && lane == 0) t_next = claim_tile(P);  // (a tile without live blocks)
    t = __shfl_sync(0xffffffffu, t_next, 0);
    if (t >= P.num_tiles) {
      // No next tile: the consumers learn it from the next Q slot (index -1).
      if constexpr (kOInQ) {
#pragma unroll
        for (int c = 0; c < kConsumers; ++c) {
          mbar_wait(&sh.q_empty[c], iter & 1);
          if (lane == 0) {
            sh.tile_index[c] = -1;
            mbar_arrive(&sh.q_full[c]);
            mbar_arrive(&sh.q_full[c]);  // (both of q_full's arrivals)
          }
        }
      } else {
        const int qe = (iter + 1) % kQBuffers;
        if (iter + 1 >= kQBuffers) mbar_wait(&sh.q_empty[qe], ((iter + 1) / kQBuffers - 1) & 1);
        if (lane == 0) {
          sh.tile_index[qe] = -1;
          mbar_arrive(&sh.q_full[qe]);
          mbar_arrive(&sh.q_full[qe]);  // (both of q_full's arrivals)
        }
      }
      // The V loader's end: the next ring position's words, once its last K is released.
      mbar_wait(&sh.k_empty[slot.index], slot.phase ^ 1u);
      if (lane == 0) {
        sh.block_info[slot.index] = kEndOfLoads;
        mbar_arrive(&sh.k_full[slot.index]);
      }
      break;
    }
  }
  if (lane == 0) {
    // Every CTA's last claim is made before it counts itself done, so the last one
    // done may zero the counter for the next launch on this stream.
    __threadfence();
    if (atomicAdd(P.tile_counter + 1, 1) == static_cast<int>(gridDim.x) - 1) {
      P.tile_counter[0] = 0;
      P.tile_counter[1] = 0;
    }
  }
}

// ---- consumer: gemms -----------------------------------------------------------------

// S = Q_c K^T for this consumer's 64 rows (both operands K-major in shared memory).
__device__ __forceinline__ void gemm_qk(float (&s)[kSAcc], const SharedStorage& sh, int qb,
                                        int slot, int consumer) {
  const uint32_t q = sh.q[qb].base() + consumer * kRowsPerConsumer * QTile::kSwizzleBytes;
  const uint32_t k = sh.k[slot].base();
  // S's registers are defined before the issue window opens (else the compiler may
  // materialise them inside it, which serialises every wgmma of the kernel).
  fence_operands(s);
  wgmma_fence();
  constexpr int kStepsPerPanel = QTile::kPanelCols / 16;
  constexpr int kSwizzle = QTile::kSwizzleBytes;
#pragma unroll
  for (int kk = 0; kk < kQkSteps; ++kk) {
    const uint32_t step = (kk % kStepsPerPanel) * 32;  // 16 elements = 32 B into a row
    const uint64_t a = smem_desc<kSwizzle>(q + (kk / kStepsPerPanel) * QTile::kPanelBytes + step,
                                           16, QTile::kAtomBytes);
    const uint64_t b = smem_desc<kSwizzle>(k + (kk / kStepsPerPanel) * KTile::kPanelBytes + step,
                                           16, KTile::kAtomBytes);
    Wgmma<Element, kBlockN>::ss(s, a, b, kk > 0 ? 1 : 0);
  }
}

// O += P V with P as register fragments; V is the MN-major B operand (its rows are
// keys, 16 per k-step = two atoms; its column panels are kPanelBytes apart).
// `accumulate` false: the first PV product of a tile overwrites O (so O is never
// zeroed by ordinary instructions, which would serialise the wgmma pipeline).
__device__ __forceinline__ void gemm_pv(float (&o)[kOAcc], uint32_t (&pf)[kPvSteps][4],
                                        const SharedStorage& sh, int slot, bool accumulate) {
  const uint32_t v = sh.v[slot].base();
  fence_operands(o);
  for (auto& frag : pf) fence_operands(frag);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kPvSteps; ++kk) {
    const uint64_t b = smem_desc<VTile::kSwizzleBytes>(v + kk * 2 * VTile::kAtomBytes,
                                                       VTile::kPanelBytes, VTile::kAtomBytes);
    Wgmma<Element, kHeadDimV>::rs(o, pf[kk], b, kk > 0 || accumulate ? 1 : 0);
  }
}

// ---- consumer: scores and softmax ----------------------------------------------------

// This thread's place in the wgmma fragment: rows row0 and row0 + 8 of the
// consumer's 64, columns 8 * j + col0 + {0, 1}.
struct FragmentPos {
  int row0, col0;
  __device__ __forceinline__ explicit FragmentPos(int thread) {
    row0 = 16 * (thread / 32) + (thread % 32) / 4;
    col0 = 2 * (thread % 4);
  }
};

// The thread's first key column in a block, k_base + col0, opaque to the compiler. The
// columns k_first + 8j + e are then adds it knows do not wrap, so the 64-bit index of an
// aux read at a key (bias[b, q, k]) folds into the load's immediate offset: one address a
// row instead of one a score. Left visible, the sums merged with others of k_base that
// may wrap, and each read computed its own address: graphormer's spatial bias (a gather
// at every pair) 118 -> 164 TFLOP/s (NOTES.md, "Aux reads at a key fold their address").
__device__ __forceinline__ int key_first_column(int k_base, const FragmentPos& pos) {
  return opaque(k_base + pos.col0);
}

// Shared-memory address of 128-byte row r of group g (keys 64g .. 64g + 63 of 16-bit
// values, 128g .. 128g + 127 of bytes) of this consumer's pair rows. In a pair tile of
// their own (kInO false) group g is a panel of kBlockM rows. In O's staging tile (kInO)
// they take the bytes of the consumer's own O rows, the only ones its store reads: those
// are 64 rows x OTile::kSwizzleBytes of each panel, so with 64-byte panels (D = 96) a
// group's rows 0-31 sit in one panel and 32-63 in the next.
template <bool kInO>
__device__ __forceinline__ uint32_t pair_row_addr(uint32_t base, int consumer, int r, int g = 0) {
  constexpr int kOwn = kRowsPerConsumer * (kInO ? OTile::kSwizzleBytes : 128);
  constexpr int kPanel = kInO ? OTile::kPanelBytes : kBlockM * 128;
  if constexpr (kOwn == kRowsPerConsumer * 128) {  // a group a panel
    return base + g * kPanel + (consumer * kRowsPerConsumer + r) * 128;
  } else {
    constexpr unsigned kRowsAPanel = kOwn / 128;
    const unsigned row = static_cast<unsigned>(g * kRowsPerConsumer + r);
    return base + (row / kRowsAPanel) * kPanel + consumer * kOwn + (row % kRowsAPanel) * 128;
  }
}
// The address of 16-byte chunk c (keys 8c .. 8c + 7 of 16-bit values) of that row, the
// chunks swizzled by the row so that ldmatrix's eight rows hit distinct banks.
// `base`: O's staging tile (kInO), or the pair tile (pair_rows_base).
template <bool kInO>
__device__ __forceinline__ uint32_t pair_chunk_addr(uint32_t base, int consumer, int r, int c) {
  return pair_row_addr<kInO>(base, consumer, r, c / 8) + (((c % 8) ^ (r % 8)) << 4);
}
__device__ __forceinline__ uint32_t pair_rows_base(const SharedStorage& sh) {
  return kPairInO ? sh.o.base() : sh.pair.base();
}

// Copies this warp's 16 rows of the pair read at key block [k_base, k_base + kBlockN)
// into shared memory (cp.async, one group). Lanes 2m and 2m + 1 take row m's chunks
// in turn, so each copy instruction reads whole 32-byte sectors. kTail: keys past Sk
// are zero-filled, not read.
// (row_at(q): the read's row q at k = 0; rows past Sq are clamped to the last)
template <bool kTail, bool kInO, typename RowAt>
__device__ __forceinline__ void stage_rows(const FwdParams& p, uint32_t base, RowAt&& row_at,
                                           int consumer, int q_base, int k_base, int thread) {
  const int lane = thread % 32;
  const int r = 16 * (thread / 32) + lane / 2;
  const auto* row = row_at(min(q_base + r, p.seqlen_q - 1));
  constexpr int kChunkKeys = 16 / static_cast<int>(sizeof(*row));
  static_assert(kBlockN % (2 * kChunkKeys) == 0, "rows are copied in pairs of chunks");
  __syncwarp();  // (the warp's reads of the previous block's rows are done)
#pragma unroll
  for (int i = 0; i < kBlockN / kChunkKeys / 2; ++i) {
    const int c = 2 * i + lane % 2;
    const int k = k_base + kChunkKeys * c;
    const bool in = !kTail || k < p.seqlen_k;
    sm80::cp_async_16(pair_chunk_addr<kInO>(base, consumer, r, c), row + (in ? k : 0), in);
  }
  sm80::cp_async_commit();
}

template <bool kTail>
__device__ __forceinline__ void stage_pair_rows(const FwdParams& p, const SharedStorage& sh,
                                                int b, int h, int consumer, int q_base,
                                                int k_base, int thread) {
  if constexpr (kPairStaged) {
    stage_rows<kTail, kPairInO>(p, pair_rows_base(sh),
                                [&](int q) { return pair_row(b, h, q, p.aux); }, consumer,
                                q_base, k_base, thread);
  }
}

// This thread's pairs of keys of the pair read for a block: pairs[half][j] holds keys
// k_first + 8j and + 1 (the first in the low half) of row row0 + 8 half, the positions
// the S accumulator holds. `staged`: from the warp's copy (ldmatrix gives each thread
// exactly those), else from global memory (a tile's first block).
using PairWords = uint32_t[2][kBlockN / 8];
template <bool kStaged, bool kTail>
__device__ __forceinline__ void pair_words(PairWords& pairs, const FwdParams& p,
                                           const SharedStorage& sh, int b, int h, int consumer,
                                           int q_base, int k_base, const FragmentPos& pos,
                                           int thread) {
  if constexpr (!kPairStaged) {
    return;
  } else if constexpr (kStaged) {
    sm80::cp_async_wait<0>();
    __syncwarp();  // (every lane's copies are in)
    const int lane = thread % 32;
    const int r = 16 * (thread / 32) + 8 * ((lane / 8) % 2) + lane % 8;
#pragma unroll
    for (int c = 0; c < kBlockN / 8; c += 2) {
      uint32_t m[4];
      sm80::ldmatrix_x4(m, pair_chunk_addr<kPairInO>(pair_rows_base(sh), consumer, r,
                                                     c + lane / 16));
      pairs[0][c] = m[0];
      pairs[1][c] = m[1];
      pairs[0][c + 1] = m[2];
      pairs[1][c + 1] = m[3];
    }
  } else {
    const int k_first = key_first_column(k_base, pos);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const uint16_t* row =
          pair_row(b, h, min(q_base + pos.row0 + 8 * half, p.seqlen_q - 1), p.aux);
#pragma unroll
      for (int j = 0; j < kBlockN / 8; ++j) {
        // (k_first is even and rows 16-byte aligned: each pair is one aligned word)
        const int k = kTail ? min(k_first + 8 * j, p.seqlen_k - 1) & ~1 : k_first + 8 * j;
        pairs[half][j] = *reinterpret_cast<const uint32_t*>(row + k);
      }
    }
  }
}

// The same, read afresh from %tid.x where a tile-level step uses it where P alternates
// (kAlternatingP): ptxas then recomputes it there (a few instructions a tile) instead
// of holding it across the steady loop, where it spilled.
__device__ __forceinline__ FragmentPos fragment_pos_at_use(const FragmentPos& held) {
  if constexpr (!kAlternatingP) return held;
  uint32_t tid;
  asm volatile("mov.u32 %0, %%tid.x;\n" : "=r"(tid));
  return FragmentPos(static_cast<int>(tid % 128));
}

// This consumer's staged query-only reads: its two rows' values, per read.
// `ahead`: loaded for the tile the consumer opens next, before this one's epilogue.
struct RowStaged {
  uint32_t v[2][kRowStaged > 0 ? kRowStaged : 1];
  bool ahead = false;
};

// Which of this thread's pairs of a masked key block are allowed, one bit per
// column (bit 2j + e of word `half`: row row0 + 8 half, key k_base + 8j + col0 + e).
// Evaluated before the block's S product is issued, while S holds no live values:
// a mask_mod's index arithmetic then has S's 64 registers to itself (in place on
// the scores it spilled for masks like the space-time ones). kTail: the block
// holds the key or query tail (bounds checks, hook indices clamped into range).
// With staged reads, `rows` holds this thread's rows' values and `keys` the
// block's (ring slot).
using MaskBits = uint32_t[2];
static_assert(kBlockN / 4 <= 32, "a thread's columns of one row fit a 32-bit word");

// Headers whose mask allows each row a union of a few intervals of keys say so
// (kRowIntervals, row_interval): a row's bits are then that many ranges, set in a few
// operations each instead of a mask_mod per pair (sliding windows +1-4%:
// bench/results/fa_sm90-ab-2026-11-27-rowiv/).
// (CUBRIDGE_ROW_INTERVAL_BITS=0 turns it off: the spill fallback of FaSm90Kernel.compile)
#ifndef CUBRIDGE_ROW_INTERVAL_BITS
#define CUBRIDGE_ROW_INTERVAL_BITS 1
#endif
#if defined(CUBRIDGE_HOOKS_ROW_INTERVALS) && CUBRIDGE_ROW_INTERVAL_BITS
constexpr int kRowIntervals = hooks::kRowIntervals;
__device__ __forceinline__ KeyInterval row_interval(int i, int b, int h, int q,
                                                    const AuxArgs& aux) {
  return hooks::row_interval(i, b, h, q, aux);
}
#else
constexpr int kRowIntervals = 0;
__device__ __forceinline__ KeyInterval row_interval(int, int, int, int, const AuxArgs&) {
  return {0, -1};
}
#endif

// Headers whose mask is index intervals and a part that reads the key only through
// staged values say so (kRunIntervals, run_interval, key_value_mask: document and
// segment masks). Where a block's staged key values change at most once, its bits
// are then ranges too: each row's intervals cut to the runs of keys whose values the
// value part allows. (CUBRIDGE_KEY_RUN_BITS=0 turns it off.)
#ifndef CUBRIDGE_KEY_RUN_BITS
#define CUBRIDGE_KEY_RUN_BITS 1
#endif
#if defined(CUBRIDGE_HOOKS_KEY_RUNS) && CUBRIDGE_KEY_RUN_BITS
// (key_runs reads four keys a lane: 128-key blocks)
constexpr int kRunIntervals = kKeyStaged > 0 && kBlockN == 4 * 32 ? hooks::kRunIntervals : 0;
__device__ __forceinline__ KeyInterval run_interval(int i, int b, int h, int q,
                                                    const AuxArgs& aux) {
  return hooks::run_interval(i, b, h, q, aux);
}
__device__ __forceinline__ bool key_value_mask(int b, int h, int q, Staged rows, Staged keys,
                                               const AuxArgs& aux) {
  return hooks::key_value_mask(b, h, q, rows, keys, aux);
}
#else
constexpr int kRunIntervals = 0;
__device__ __forceinline__ KeyInterval run_interval(int, int, int, int, const AuxArgs&) {
  return {0, -1};
}
__device__ __forceinline__ bool key_value_mask(int, int, int, Staged, Staged, const AuxArgs&) {
  return true;
}
#endif

// Mask pair reads (docs/hooks.md): mask_mod's read of an 8-bit tensor at [..., k] with
// its other indices of (b, h, q), such as a dense boolean mask[b, 0, q, k]. A masked
// steady block's bytes are staged as pair reads are (each warp its 16 rows, cp.async,
// in O's staging rows: 8 KB a consumer) and read back two keys a load
// for mask_mod_paired; a tile's first block calls mask_mod. Not where the mask has
// other staged reads, row intervals or key runs, nor beside a staged score pair read.
// In O's 64-byte panels (D = 96) a consumer's rows take its own 4 KB piece of two panels
// (pair_row_addr): 8 KB in one would run into the other consumer's O rows.
#ifdef CUBRIDGE_HOOKS_MASK_PAIR_READS
constexpr bool kMaskPairStaged = CUBRIDGE_PAIR_STAGED && hooks::kMaskPairReads > 0 &&
                                 hooks::kHasMaskMod && !kStagedMask && kRowIntervals == 0 &&
                                 kRunIntervals == 0 && !kPairStaged && !kOInQ;
__device__ __forceinline__ const uint8_t* mask_pair_row(int b, int h, int q, const AuxArgs& aux) {
  return hooks::mask_pair_row(b, h, q, aux);
}
__device__ __forceinline__ bool mask_mod_paired(int b, int h, int q, int k, uint32_t pair,
                                                const AuxArgs& aux) {
  return hooks::mask_mod_paired(b, h, q, k, pair, aux);
}
#else
constexpr bool kMaskPairStaged = false;
__device__ __forceinline__ const uint8_t* mask_pair_row(int, int, int, const AuxArgs&) {
  return nullptr;
}
__device__ __forceinline__ bool mask_mod_paired(int, int, int, int, uint32_t, const AuxArgs&) {
  return true;
}
#endif
// Mask cases (docs/hooks.md): a mask that chooses by the batch and head alone, such as
// strided heads beside local ones (`h % 2 == 1 ? (q - k) % 128 == 0 : q - k < 128`),
// is branched on once a block (mask_case) and each branch's mask loop evaluates that
// case's mask, in which the choice is a constant. Evaluated per score, the choice
// computed both sides and spilled 108-116 B. Not where a row's bits are intervals or
// key runs, or the mask pair read is staged: those do not call mask_mod per score.
// (CUBRIDGE_MASK_CASES=0 turns it off: A/B.)
#ifndef CUBRIDGE_MASK_CASES
#define CUBRIDGE_MASK_CASES 1
#endif
template <int C>
struct MaskCase {
  static constexpr int value = C;
};
#if defined(CUBRIDGE_HOOKS_MASK_CASES) && CUBRIDGE_MASK_CASES
constexpr int kMaskCases = kRowIntervals == 0 && kRunIntervals == 0 ? hooks::kMaskCases : 1;
__device__ __forceinline__ int mask_case(int b, int h, const AuxArgs& aux) {
  return hooks::mask_case(b, h, aux);
}
template <int C>
__device__ __forceinline__ bool mask_mod_in_case(int b, int h, int q, int k, Staged rows,
                                                 Staged keys, const AuxArgs& aux) {
  if constexpr (kStagedMask) return hooks::mask_mod_staged_case<C>(b, h, q, k, rows, keys, aux);
  return hooks::mask_mod_case<C>(b, h, q, k, aux);
}
#else
constexpr int kMaskCases = 1;
__device__ __forceinline__ int mask_case(int, int, const AuxArgs&) { return 0; }
template <int C>
__device__ __forceinline__ bool mask_mod_in_case(int b, int h, int q, int k, Staged rows,
                                                 Staged keys, const AuxArgs& aux) {
  return mask_mod_staged(b, h, q, k, rows, keys, aux);
}
#endif
// Key sets (docs/hooks.md): where a case's mask allows each row a union of key sets
// (an interval, or the keys of one residue of it modulo a constant: the strided heads'
// (q - k) % 128 == 0), its rows' bits are set from them, a few operations a set
// (interval_bits & residue_bits, key_bits.cuh) instead of a mask_mod_case per pair. Only
// where the kernel's cases are the header's (case 0 is then the whole mask where it has
// none).
// (CUBRIDGE_KEY_SET_BITS=0 turns it off: A/B and the spill fallback.)
#ifndef CUBRIDGE_KEY_SET_BITS
#define CUBRIDGE_KEY_SET_BITS 1
#endif
#if defined(CUBRIDGE_HOOKS_CASE_KEY_SETS) && CUBRIDGE_KEY_SET_BITS
constexpr bool kKeySets = kMaskCases == hooks::kMaskCases && kRowIntervals == 0 &&
                          kRunIntervals == 0 && !kMaskPairStaged;
__device__ __forceinline__ constexpr int case_key_sets(int c) {
  return kKeySets ? hooks::case_key_sets(c) : 0;
}
template <int C>
__device__ __forceinline__ KeySet case_key_set(int i, int b, int h, int q, const AuxArgs& aux) {
  return hooks::case_key_set<C>(i, b, h, q, aux);
}
#else
__device__ __forceinline__ constexpr int case_key_sets(int) { return 0; }
template <int C>
__device__ __forceinline__ KeySet case_key_set(int, int, int, int, const AuxArgs&) {
  return {0, -1, 1, 0, 1};
}
#endif
// The bits of a key set's residue (key_bits.cuh). Periods that are not powers of two
// only where the header has them: without CUBRIDGE_HOOKS_ODD_PERIODS the test of the
// period is left out and the build is the same as before there were any.
__device__ __forceinline__ uint32_t residue_bits(const KeySet& r, int k_first) {
#if defined(CUBRIDGE_HOOKS_ODD_PERIODS)
  if ((r.period & (r.period - 1)) != 0) {
    return odd_period_bits<kBlockN>(r.period, r.phase, k_first);
  }
#endif
  return period_bits<kBlockN>(r.period, r.phase, r.width, k_first);
}

// Key groups (docs/hooks.md): a mask that reads the key only as k // G (BigBird's
// blocks, a random-block table) is the same for every key of an aligned group of G: its
// bits are set a group at a time from one evaluation at the group's first key (two a row
// for 64-key groups where the per-pair loop made 32). (CUBRIDGE_KEY_GROUP_BITS=0 turns it
// off: A/B and the spill fallback.)
#ifndef CUBRIDGE_KEY_GROUP_BITS
#define CUBRIDGE_KEY_GROUP_BITS 1
#endif
#if defined(CUBRIDGE_HOOKS_KEY_GROUP) && CUBRIDGE_KEY_GROUP_BITS
constexpr int kKeyGroup = hooks::kKeyGroup < 8 ? 0
                          : hooks::kKeyGroup < kBlockN ? hooks::kKeyGroup : kBlockN;
#else
constexpr int kKeyGroup = 0;
#endif

// f(MaskCase<c>{}) for the runtime case c (one branch a block; kCases straight-line copies).
template <int kCases, int C = 0, class F>
__device__ __forceinline__ void with_mask_case(int c, F&& f) {
  if constexpr (C + 1 < kCases) {
    if (c == C) {
      f(MaskCase<C>{});
    } else {
      with_mask_case<kCases, C + 1>(c, f);
    }
  } else {
    f(MaskCase<C>{});
  }
}

// (any staging in O's rows: the steady blocks wait once a tile for O's store to read them)
constexpr bool kStagesInO = (kPairStaged && kPairInO) || kMaskPairStaged;
static_assert(!kStagesInO || OTile::kBytes >= kBlockM * 128 * (kPairStaged ? 2 : 1),
              "pair rows staged in O's tile must fit its consumers' own rows");

template <bool kTail>
__device__ __forceinline__ void stage_mask_rows(const FwdParams& p, const SharedStorage& sh,
                                                int b, int h, int consumer, int q_base,
                                                int k_base, int thread) {
  if constexpr (kMaskPairStaged) {
    stage_rows<kTail, true>(p, sh.o.base(),
                            [&](int q) { return mask_pair_row(b, h, q, p.aux); }, consumer,
                            q_base, k_base, thread);
  }
}

// A key block's runs of equal staged values, found by each warp from the ring slot
// (lane l compares keys 4l .. 4l + 4): `few` where they change at most once, and
// then at key `split` (kBlockN: not at all), `first` and `last` being the values of
// the block's first and last key.
struct KeyRuns {
  bool few;
  int split;
  uint32_t first[kKeyStaged > 0 ? kKeyStaged : 1], last[kKeyStaged > 0 ? kKeyStaged : 1];
};
__device__ __forceinline__ KeyRuns key_runs(const uint32_t* keys) {
  const int lane = threadIdx.x % 32;
  KeyRuns r;
  uint32_t change = 0u;  // bit j: key 4 lane + j differs from key 4 lane + j + 1
#pragma unroll
  for (int i = 0; i < kKeyStaged; ++i) {
    const uint4 x = *reinterpret_cast<const uint4*>(keys + i * kBlockN + 4 * lane);
    const uint32_t next = __shfl_down_sync(0xffffffffu, x.x, 1);
    change |= static_cast<uint32_t>(x.x != x.y) | static_cast<uint32_t>(x.y != x.z) << 1 |
              static_cast<uint32_t>(x.z != x.w) << 2 |
              static_cast<uint32_t>(lane < 31 && x.w != next) << 3;
    r.first[i] = __shfl_sync(0xffffffffu, x.x, 0);
    r.last[i] = __shfl_sync(0xffffffffu, x.w, 31);
  }
  const uint32_t lanes = __ballot_sync(0xffffffffu, change != 0u);
  r.few = __reduce_add_sync(0xffffffffu, static_cast<uint32_t>(__popc(change))) <= 1u;
  const int l = lanes != 0u ? __ffs(lanes) - 1 : 0;
  const uint32_t c = __shfl_sync(0xffffffffu, change, l);
  r.split = lanes != 0u ? 4 * l + __ffs(c) : kBlockN;
  return r;
}

// kMaskStaged: the block's mask pair read was staged (stage_mask_rows); mask_row0 is
// the shared address of the thread's first row there. kCase >= 0: the block's mask case.
template <bool kTail, bool kMaskStaged = false, int kCase = -1>
__device__ __forceinline__ void mask_bits(MaskBits& bits, const FwdParams& p, int b, int h,
                                          int q_base, int k_base, const FragmentPos& pos,
                                          bool all_masked, const RowStaged& rows,
                                          const uint32_t* keys, uint32_t mask_row0 = 0u) {
  // Column by column, both rows at once: what a mask computes from the key alone
  // is used and dropped, not held for all 32 columns until the second row.
  int q[2], qc[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    q[half] = q_base + pos.row0 + 8 * half;
    qc[half] = kTail ? min(q[half], p.seqlen_q - 1) : q[half];
  }
  uint32_t word[2] = {0u, 0u};
  if constexpr (kRowIntervals > 0) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      uint32_t w = 0u;
#pragma unroll
      for (int i = 0; i < kRowIntervals; ++i) {
        const KeyInterval r = row_interval(i, b, h, qc[half], p.aux);
        const int hi = kTail ? min(r.hi, p.seqlen_k - 1) : r.hi;
        w |= interval_bits<kBlockN>(r.lo, hi, k_base + pos.col0);
      }
      const bool row_in = !kTail || q[half] < p.seqlen_q;
      word[half] = row_in ? w : 0u;
    }
    bits[0] = all_masked ? 0u : word[0];
    bits[1] = all_masked ? 0u : word[1];
    return;
  }
  constexpr int kSetCase = kCase >= 0 ? kCase : 0;
  if constexpr (!kMaskStaged && (kCase >= 0 || kMaskCases == 1) &&
                case_key_sets(kSetCase) > 0) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      uint32_t w = 0u;
#pragma unroll
      for (int i = 0; i < case_key_sets(kSetCase); ++i) {
        const KeySet r = case_key_set<kSetCase>(i, b, h, qc[half], p.aux);
        const int hi = kTail ? min(r.hi, p.seqlen_k - 1) : r.hi;
        w |= interval_bits<kBlockN>(r.lo, hi, k_base + pos.col0) &
             residue_bits(r, k_base + pos.col0);
      }
      const bool row_in = !kTail || q[half] < p.seqlen_q;
      word[half] = row_in ? w : 0u;
    }
    bits[0] = all_masked ? 0u : word[0];
    bits[1] = all_masked ? 0u : word[1];
    return;
  }
  if constexpr (kRunIntervals > 0) {
    const KeyRuns runs = key_runs(keys);
    if (runs.few) {  // (uniform in the warp)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const Staged row{&rows.v[half][0], 1};
        const bool in_first = key_value_mask(b, h, qc[half], row, Staged{runs.first, 1}, p.aux);
        const bool in_last = key_value_mask(b, h, qc[half], row, Staged{runs.last, 1}, p.aux);
        // keys [k_base, k_base + split) hold `first`, the rest `last`
        const int lo = in_first ? k_base : k_base + runs.split;
        const int hi = in_last ? k_base + kBlockN - 1 : k_base + runs.split - 1;
        uint32_t w = 0u;
#pragma unroll
        for (int i = 0; i < kRunIntervals; ++i) {
          const KeyInterval r = run_interval(i, b, h, qc[half], p.aux);
          const int r_hi = kTail ? min(r.hi, p.seqlen_k - 1) : r.hi;
          w |= interval_bits<kBlockN>(max(r.lo, lo), min(r_hi, hi), k_base + pos.col0);
        }
        const bool row_in = !kTail || q[half] < p.seqlen_q;
        word[half] = row_in ? w : 0u;
      }
      bits[0] = all_masked ? 0u : word[0];
      bits[1] = all_masked ? 0u : word[1];
      return;
    }
  }
  if constexpr (kKeyGroup > 0 && !kMaskStaged) {
    constexpr int kGroupBits = kKeyGroup / 4;  // a thread's columns of one group
    constexpr uint32_t kGroupMask = kGroupBits >= 32 ? 0xffffffffu : (1u << kGroupBits) - 1u;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      uint32_t w = 0u;
#pragma unroll
      for (int g = 0; g < kBlockN / kKeyGroup; ++g) {
        const int k = k_base + g * kKeyGroup;  // (aligned: k_base is a multiple of kBlockN)
        const int kc = kTail ? min(k, p.seqlen_k - 1) : k;
        bool allowed;
        if constexpr (kCase >= 0) {
          allowed = mask_mod_in_case<kCase>(b, h, qc[half], kc, Staged{&rows.v[half][0], 1},
                                            Staged{keys + (kc - k_base), kBlockN}, p.aux);
        } else if constexpr (kStagedMask) {
          allowed = mask_mod_staged(b, h, qc[half], kc, Staged{&rows.v[half][0], 1},
                                    Staged{keys + (kc - k_base), kBlockN}, p.aux);
        } else {
          allowed = hooks::mask_mod(b, h, qc[half], kc, p.aux);
        }
        w |= allowed ? kGroupMask << (g * kGroupBits) : 0u;
      }
      if constexpr (kTail) w &= interval_bits<kBlockN>(0, p.seqlen_k - 1, k_base + pos.col0);
      const bool row_in = !kTail || q[half] < p.seqlen_q;
      word[half] = row_in ? w : 0u;
    }
    bits[0] = all_masked ? 0u : word[0];
    bits[1] = all_masked ? 0u : word[1];
    return;
  }
  const int k_first = key_first_column(k_base, pos);
  if constexpr (kMaskStaged) {
    sm80::cp_async_wait<0>();
    __syncwarp();  // (every lane's copies are in)
  }
#pragma unroll
  for (int j = 0; j < kBlockN / 8; ++j) {
    // (staged: keys k_first + 8j and + 1 of each row, one 16-bit load; the rows' 16-key
    // chunks are swizzled by the row as pair_chunk_addr lays them out)
    uint32_t staged[2] = {0u, 0u};
    if constexpr (kMaskStaged) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const uint32_t addr = mask_row0 + half * 8 * 128 +
                              (((j / 2) ^ (pos.row0 % 8)) << 4) + 8 * (j % 2) + pos.col0;
        uint16_t v;
        asm volatile("ld.shared.u16 %0, [%1];\n" : "=h"(v) : "r"(addr));
        staged[half] = v;
      }
    }
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int k = k_first + (8 * j + e);
      const int kc = kTail ? min(k, p.seqlen_k - 1) : k;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        bool allowed = true;
        if constexpr (kTail) allowed = (k < p.seqlen_k) & (q[half] < p.seqlen_q);
        if constexpr (hooks::kHasMaskMod) {
          if constexpr (kMaskStaged) {
            allowed = allowed & mask_mod_paired(b, h, qc[half], kc,
                                                (staged[half] >> (8 * e)) & 0xffu, p.aux);
          } else if constexpr (kCase >= 0) {
            allowed = allowed & mask_mod_in_case<kCase>(b, h, qc[half], kc,
                                                        Staged{&rows.v[half][0], 1},
                                                        Staged{keys + (kc - k_base), kBlockN},
                                                        p.aux);
          } else if constexpr (kStagedMask) {
            allowed = allowed & mask_mod_staged(b, h, qc[half], kc,
                                                Staged{&rows.v[half][0], 1},
                                                Staged{keys + (kc - k_base), kBlockN}, p.aux);
          } else {
            allowed = allowed & hooks::mask_mod(b, h, qc[half], kc, p.aux);
          }
        }
        word[half] |= static_cast<uint32_t>(allowed) << (2 * j + e);
      }
    }
  }
  bits[0] = all_masked ? 0u : word[0];
  bits[1] = all_masked ? 0u : word[1];
}

// Raw Q K^T values -> the normaliser's input: score_mod (natural units), the
// activation of elementwise normalisers, and where `masked` the pairs `bits`
// disallows become -inf (softmax) or 0 (elementwise). kTail: hook indices
// clamped into range.
template <bool kMasked, bool kTail, bool kSigmoidInput>
__device__ __forceinline__ void scores_to_logits(float (&s)[kSAcc], const FwdParams& p, int b,
                                                 int h, int q_base, int k_base,
                                                 const FragmentPos& pos, const MaskBits& bits,
                                                 float sigmoid_m, const PairWords& pairs) {
  static_assert(!kSigmoidInput || (kSigmoidOneSfu && !kMasked), "sigmoid inputs: unmasked blocks");
  const float scale_in = p.scale * kScoreIn;  // (p.scale without an affine score_mod)
  const float exponent_scale = -p.scale * kSigmoidScoreIn * kLog2e;  // (sigmoid exponents)
  const int k_first = key_first_column(k_base, pos);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int q = q_base + pos.row0 + 8 * half;
    const int qc = kTail ? min(q, p.seqlen_q - 1) : q;
#pragma unroll
    for (int j = 0; j < kBlockN / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int k = k_first + (8 * j + e);
        const int kc = kTail ? min(k, p.seqlen_k - 1) : k;
        float& x = s[4 * j + 2 * half + e];
        if constexpr (kSigmoidInput && kSigmoidExponent) {
          x = sigmoid_input(x, exponent_scale, sigmoid_m, b, h, qc, kc, p.aux);
        } else if constexpr (kSigmoidInput) {
          x = sigmoid_input_of_core(score_core(x * scale_in, b, h, qc, kc, p.aux), sigmoid_m);
        } else if constexpr (kSigmoidExponent) {
          x = sigmoid_weight(x, exponent_scale, b, h, qc, kc, p.aux);
        } else if constexpr (kSigmoidOfAffine) {
          x = sigmoid_of_core(score_core(x * scale_in, b, h, qc, kc, p.aux));
        } else {
          if constexpr (kScoreRowFactor) {
            // (raw: the row's factor is in its exp2 factor, RowScale)
          } else if constexpr (kScoreAffine) {
            x = score_core(x * scale_in, b, h, qc, kc, p.aux);
          } else if constexpr (kPairStaged) {
            const uint32_t w = pairs[half][j];
            x = score_mod_paired(x * p.scale, b, h, qc, kc, e ? w >> 16 : w & 0xffffu, p.aux);
          } else if constexpr (hooks::kHasScoreMod) {
            x = hooks::score_mod(x * p.scale, b, h, qc, kc, p.aux);
          }
          if constexpr (hooks::kNormalizer == Normalizer::Elementwise) {
            x = hooks::activation(hooks::kHasScoreMod ? x : x * p.scale);
          }
        }
        if constexpr (kMasked) {
          const bool allowed = (bits[half] >> (2 * j + e)) & 1u;
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

// Online softmax state of this thread's two rows.
struct RowStats {
  float max[2] = {-INFINITY, -INFINITY};
  float sum[2] = {0.f, 0.f};  // this thread's partial sums (quad-reduced at the end)
};

// The exp2 factor of the thread's two rows' scores for one tile: to_log2, or under a
// row factor |R| scale log2(e), floored at 1e-30 so that a row whose R is 0 (uniform
// weights) still takes exp2(-inf) = 0 on masked scores (a NaN R stays NaN); bit `half`
// of `negative` where that row's R < 0, bit 2 where any row of the warp has one.
struct RowScale {
  float t[2];
  uint32_t negative;
};

__device__ __forceinline__ RowScale row_scale(const FwdParams& p, const Tile& tile, int q_base,
                                              const FragmentPos& pos, float to_log2) {
  RowScale r{{to_log2, to_log2}, 0u};
  if constexpr (kScoreRowFactor) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int q = min(q_base + pos.row0 + 8 * half, p.seqlen_q - 1);
      const float f = score_row_factor(tile.b, tile.h, q, p.aux);
      const float t = fabsf(f) * p.scale_log2;
      r.t[half] = t < 1e-30f ? 1e-30f : t;
      r.negative |= static_cast<uint32_t>(f < 0.f) << half;
    }
    r.negative |= static_cast<uint32_t>(__any_sync(0xffffffffu, r.negative != 0u)) << 2;
  }
  return r;
}

// Raw scores of the rows whose factor is negative, negated (before masking).
__device__ __forceinline__ void sign_rows(float (&s)[kSAcc], const RowScale& r) {
  if constexpr (kScoreRowFactor) {
    if (r.negative & 4u) {
#pragma unroll
      for (int i = 0; i < kSAcc; ++i) {
        if ((r.negative >> ((i / 2) % 2)) & 1u) s[i] = -s[i];
      }
    }
  }
}

// The row max is only moved when a block raises it by more than this (in log2
// units): exponentials then stay below 2^kRescaleThreshold, exact in fp32 and as
// bf16/fp16 operands (fp16's largest is just under 2^16), and O is rescaled far less
// often. 0: move it on any rise. 12, not FlashAttention's 8: the steady blocks' test
// on the sums of P (below) then about never fails on normal inputs, and failures cost
// far more than their instructions: 8 -> 12 changed only two constants in the SASS
// and ran causal and the masked softmax variants +2-4% (NOTES.md, "The rescale
// threshold").
#ifndef CUBRIDGE_RESCALE_THRESHOLD
#define CUBRIDGE_RESCALE_THRESHOLD 12
#endif
constexpr float kRescaleThreshold = CUBRIDGE_RESCALE_THRESHOLD;

// A steady block first takes its exponentials against the row max as it stands,
// with no max reduction (64 dependent FMNMX per thread were a fifth of a block's
// time on the consumer's critical path, ncu), and keeps them when every row of the
// warp has a max and no thread's partial row sum passes 2^threshold: then no
// exponential does, the bound the max reduction keeps. Otherwise the block takes
// online_softmax (its scores are left as they were), which moves the max. Off with
// three consumers (160 registers: the second set of P fragments spills).
// CUBRIDGE_KEEP_MAX_BY_SUMS=0 turns it off (A/B).
#ifndef CUBRIDGE_KEEP_MAX_BY_SUMS
#define CUBRIDGE_KEEP_MAX_BY_SUMS 1
#endif
constexpr bool kKeepMaxBySums = CUBRIDGE_KEEP_MAX_BY_SUMS && kConsumers == 2 &&
                                hooks::kNormalizer == Normalizer::Softmax;

// Fold one key block into the row statistics: leaves exp2(s * to_log2 - max *
// to_log2) in s and the factor O must be rescaled by in `rescale`, per row.
// Returns whether any row of the warp needs O rescaled. Reductions run as four
// independent chains (the compiler does not reassociate float maxima and sums).
__device__ __forceinline__ bool online_softmax(float (&s)[kSAcc], RowStats& st,
                                               const float (&to_log2)[2], float (&rescale)[2]) {
  constexpr int kCols = kBlockN / 4;  // this thread's columns of one row
  bool moved = false;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float m4[4] = {st.max[half], -INFINITY, -INFINITY, -INFINITY};
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      m4[c % 4] = fmaxf(m4[c % 4], s[4 * (c / 2) + 2 * half + c % 2]);
    }
    const float block_max = quad_max(fmaxf(fmaxf(m4[0], m4[1]), fmaxf(m4[2], m4[3])));
    const float old_max = st.max[half];
    const bool keep = old_max != -INFINITY &&
                      (block_max - old_max) * to_log2[half] <= kRescaleThreshold;
    const float mx = keep ? old_max : block_max;
    // A row with nothing allowed yet keeps max -inf; use 0 so exp2 gives 0, not NaN.
    const float max_scaled = mx == -INFINITY ? 0.f : mx * to_log2[half];
    rescale[half] = keep ? 1.f : fast_exp2(old_max * to_log2[half] - max_scaled);
    moved = moved || !keep;
    st.max[half] = mx;
    float sum4[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      float& x = s[4 * (c / 2) + 2 * half + c % 2];
      x = fast_exp2(fmaf(x, to_log2[half], -max_scaled));
      sum4[c % 4] += x;
    }
    st.sum[half] = st.sum[half] * rescale[half] + ((sum4[0] + sum4[1]) + (sum4[2] + sum4[3]));
  }
  return __any_sync(0xffffffffu, moved);
}

// The fast path of a steady block (kKeepMaxBySums): exponentials against the row
// max as it stands, packed straight into `pn` (the next PV product's A fragments;
// s is left as it was). True, for the whole warp, when every row has a max and
// each of this thread's two partial row sums is at most 2^threshold; the row sums
// are then updated (the max and O stay). False: the caller runs online_softmax.
__device__ __forceinline__ bool exps_at_current_max(const float (&s)[kSAcc], RowStats& st,
                                                    const float (&to_log2)[2],
                                                    uint32_t (&pn)[kPvSteps][4]) {
  constexpr float kLimit = static_cast<float>(1u << static_cast<int>(kRescaleThreshold));
  float max_scaled[2], sum4[2][4];
  bool ok = true;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    ok = ok && st.max[half] != -INFINITY;
    max_scaled[half] = st.max[half] * to_log2[half];
#pragma unroll
    for (int c = 0; c < 4; ++c) sum4[half][c] = 0.f;
  }
  // s[2q], s[2q + 1]: one row (half q % 2), adjacent columns, one 32-bit P operand.
#pragma unroll
  for (int q = 0; q < kSAcc / 2; ++q) {
    const int half = q % 2;
    const float p0 = fast_exp2(fmaf(s[2 * q], to_log2[half], -max_scaled[half]));
    const float p1 = fast_exp2(fmaf(s[2 * q + 1], to_log2[half], -max_scaled[half]));
    sum4[half][(q / 2) % 2 * 2] += p0;
    sum4[half][(q / 2) % 2 * 2 + 1] += p1;
    pn[q / 4][q % 4] = pack2<Element>(p0, p1);
  }
  float block_sum[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    block_sum[half] = (sum4[half][0] + sum4[half][1]) + (sum4[half][2] + sum4[half][3]);
    ok = ok && block_sum[half] <= kLimit;  // (false for NaN and inf)
  }
  if (!__all_sync(0xffffffffu, ok)) return false;
  st.sum[0] += block_sum[0];
  st.sum[1] += block_sum[1];
  return true;
}

// pf = pn after the previous PV product retired, as identity byte permutes: ptxas
// would coalesce moves (pn written straight into pf while that product still reads
// it) and then serialise every wgmma (C7513).
__device__ __forceinline__ void take_fragments(uint32_t (&pf)[kPvSteps][4],
                                               const uint32_t (&pn)[kPvSteps][4]) {
#pragma unroll
  for (int kk = 0; kk < kPvSteps; ++kk) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      asm volatile("prmt.b32 %0, %1, 0, 0x3210;\n" : "=r"(pf[kk][r]) : "r"(pn[kk][r]));
    }
  }
}

// ptxas moves the wait for block n-1's PV product up before block n's
// exponentials (it wants the registers), so the softmax does not run under it.
// CUBRIDGE_PIN_PV_WAIT=1 pins the wait after them in unmasked blocks: a branch on
// the row sums (never taken: sums of exponentials are >= 0 or NaN) ends their
// basic block. Measured neutral on an H100 (NOTES.md), so off: an A/B knob.
// (In masked blocks the pin runs ptxas out of registers: every wgmma serialised.)
#ifndef CUBRIDGE_PIN_PV_WAIT
#define CUBRIDGE_PIN_PV_WAIT 0
#endif

__device__ __forceinline__ void pin_after_softmax(const RowStats& st) {
  if (CUBRIDGE_PIN_PV_WAIT && st.sum[0] + st.sum[1] < 0.f) __trap();
}

__device__ __forceinline__ void rescale_o(float (&o)[kOAcc], const float (&rescale)[2]) {
#pragma unroll
  for (int j = 0; j < kHeadDimV / 8; ++j) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      o[4 * j + 2 * half] *= rescale[half];
      o[4 * j + 2 * half + 1] *= rescale[half];
    }
  }
}

// S accumulators (wgmma D layout) -> A fragments of P for the PV k-steps.
__device__ __forceinline__ void probs_to_fragments(const float (&s)[kSAcc],
                                                   uint32_t (&pf)[kPvSteps][4]) {
#pragma unroll
  for (int kk = 0; kk < kPvSteps; ++kk) {
#pragma unroll
    for (int r = 0; r < 4; ++r) pf[kk][r] = pack2<Element>(s[8 * kk + 2 * r], s[8 * kk + 2 * r + 1]);
  }
}

// Packed weights are non-negative (or NaN), so their 16-bit patterns order as the
// values do: the range checks take per-half unsigned max/min of packed words (one
// VIMNMX each, half an instruction per score).
__device__ __forceinline__ uint32_t pattern_of(float x) { return pack2<Element>(x, 0.f) & 0xffffu; }
__device__ __forceinline__ uint32_t packed_max(uint32_t w) { return max(w & 0xffffu, w >> 16); }
__device__ __forceinline__ uint32_t packed_min(uint32_t w) { return min(w & 0xffffu, w >> 16); }

// The tanh form's range: every weight at least this (see kSigmoidOneSfu).
constexpr float kTanhFloor = kActivationScale / 256.f;

// The tanh form's weights w = C (1 + tanh v) / 2, v = v_of(i) for score i, packed
// into pn; whether every one of this thread's is in the form's range (>= kTanhFloor).
template <class VOf>
__device__ __forceinline__ bool tanh_form_weights(VOf v_of, uint32_t (&pn)[kPvSteps][4]) {
  constexpr float kC = kActivationScale;
  uint32_t wmin = 0xffffffffu;
#pragma unroll
  for (int q = 0; q < kSAcc / 2; ++q) {
    float w[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) w[e] = fmaf(0.5f * kC, tanh_approx(v_of(2 * q + e)), 0.5f * kC);
    pn[q / 4][q % 4] = pack2<Element>(w[0], w[1]);
    wmin = __vminu2(wmin, pn[q / 4][q % 4]);
  }
  return packed_min(wmin) >= pattern_of(kTanhFloor);
}

// An unmasked block's sigmoid weights from their inputs v (scores_to_logits with
// sigmoid_input_scale(form)), packed into pn (see kSigmoidOneSfu). `form` is this
// warp's; the two-op redo sets it for the next block.
__device__ __forceinline__ void sigmoid_weights(const float (&v)[kSAcc], int& form,
                                                uint32_t (&pn)[kPvSteps][4]) {
  constexpr float kC = kActivationScale;
  constexpr float kTailMax = kC / 17.f;  // C sigmoid(y) at e^y = 1/16
  const int current = form & ~kSigmoidStrike;
  bool ok = false;
  if (current == kSigmoidTail) {
    uint32_t wmax = 0u;
#pragma unroll
    for (int q = 0; q < kSAcc / 2; ++q) {
      float w[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float u = fast_exp2(v[2 * q + e]);
        w[e] = kC * fmaf(u, fmaf(u, u, -u), u);
      }
      pn[q / 4][q % 4] = pack2<Element>(w[0], w[1]);
      wmax = __vmaxu2(wmax, pn[q / 4][q % 4]);
    }
    ok = packed_max(wmax) <= pattern_of(kTailMax);  // (false for NaN)
  } else if (!kPolyCap && current == kSigmoidTanh) {  // (kPolyCap: poly_cap_weights)
    ok = tanh_form_weights([&](int i) { return v[i]; }, pn);
  }
  if (__all_sync(0xffffffffu, ok)) {
    form = current;
    return;
  }
  // The two-op form: t = kExponentBias - v / m for activation_of_exponent.
  const float inv_m = current == kSigmoidTanh ? 2.f * kLog2e : 1.f;
  float wmax = 0.f, wmin = kC;
#pragma unroll
  for (int q = 0; q < kSAcc / 2; ++q) {
    float w[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      w[e] = two_op_sigmoid(fmaf(v[2 * q + e], -inv_m, kSigmoidExponentBias));
      wmax = fmaxf(wmax, w[e]);
      wmin = fminf(wmin, w[e]);
    }
    pn[q / 4][q % 4] = pack2<Element>(w[0], w[1]);
  }
  const int fits = __all_sync(0xffffffffu, wmax <= kTailMax)     ? kSigmoidTail
                   : __all_sync(0xffffffffu, wmin >= kTanhFloor) ? kSigmoidTanh
                                                                 : kSigmoidExact;
  const bool leave = current == kSigmoidExact || fits == current || (form & kSigmoidStrike);
  form = leave ? fits : current | kSigmoidStrike;
}

// Tanh-form weights of a soft-capped sigmoid from raw Q K^T values x (kPolyCap):
// v = A p(scale B x) / 2 = x (c0 + x^2 (c1 + x^2 c2)), w = C (1 + tanh v) / 2. Whether
// every weight of the warp's block is in the form's range.
__device__ __forceinline__ bool poly_cap_weights(const float (&x)[kSAcc], float scale,
                                                 uint32_t (&pn)[kPvSteps][4]) {
  const float b = scale * kCapIn, b2 = b * b;
  const float c0 = 0.5f * kCapOut * b;
  const float c1 = c0 * b2 * (-1.f / 3.f), c2 = c0 * (b2 * b2) * (2.f / 15.f);
  const auto v_of = [&](int i) {
    const float x2 = x[i] * x[i];
    return x[i] * fmaf(x2, fmaf(x2, c2, c1), c0);
  };
  return __all_sync(0xffffffffu, tanh_form_weights(v_of, pn));
}

// A tile's first block (kPolyCap; masked or not, not a tail): poly_cap_weights with
// the pairs `bits` disallows given weight 0 afterwards. Its range check covers every
// pair, the masked ones too: their raw scores are real products of the block's Q and
// K rows, so on normal inputs they are in range as well, and the check needs no mask.
// The first block otherwise takes the two-op form: two SFU ops a score besides the
// cap's tanh, where the one-SFU form's single op left the block SFU-bound (comb's
// first block cost as much as a steady one, NOTES.md, "comb's first block").
template <bool kMasked>
__device__ __forceinline__ bool first_block_poly_cap(const float (&x)[kSAcc], float scale,
                                                     const MaskBits& bits,
                                                     uint32_t (&pf)[kPvSteps][4]) {
  if (!poly_cap_weights(x, scale, pf)) return false;
  if constexpr (kMasked) {
    // pair q: row half q % 2, columns 8j + {0, 1} with j = q / 2, bits 2j and 2j + 1
#pragma unroll
    for (int q = 0; q < kSAcc / 2; ++q) {
      const uint32_t two = bits[q % 2] >> (2 * (q / 2));
      const uint32_t keep = ((two & 1u) ? 0x0000ffffu : 0u) | ((two & 2u) ? 0xffff0000u : 0u);
      pf[q / 4][q % 4] &= keep;
    }
  }
  return true;
}

// ---- consumer: the mma token ---------------------------------------------------------

// Consumers issue their gemms in turn (ping-pong), so one's softmax runs while the
// tensor cores work on the other's gemms. CUBRIDGE_PINGPONG=0 turns it off (A/B).
#ifndef CUBRIDGE_PINGPONG
#define CUBRIDGE_PINGPONG 1
#endif

__device__ __forceinline__ void take_mma_token(int consumer) {
  if (CUBRIDGE_PINGPONG) named_barrier_sync(kMmaTokenBarrier + consumer, 256);
}

__device__ __forceinline__ void pass_mma_token(int consumer) {
  if (CUBRIDGE_PINGPONG) named_barrier_arrive(kMmaTokenBarrier + (consumer + 1) % kConsumers, 256);
}

// ---- diagnostics: the tile trace -------------------------------------------------------

// With CUBRIDGE_TILE_TRACE (bench/kernels/fa_sm90/tile_trace.py; never in a build
// the library makes), thread 0 of each consumer records per tile of its schedule
// clock stamps of the tile's phases and the cycles spent waiting on each barrier,
// and each CTA its start and end on the global timer. Without it these are no-ops.
enum TraceField {
  kTraceTop,        // clock at the tile's start (its Q and first S product ready)
  kTraceFirst,      // the first block's softmax done
  kTraceSteadyEnd,  // the last block's softmax done
  kTraceEnd,        // the boundary (last PV product, next tile's first S, epilogue) done
  kTraceWaitK,      // cycles waiting for K (k_full), this tile's blocks and the next's first
  kTraceWaitV,      // cycles waiting for V (v_full)
  kTraceWaitToken,  // cycles waiting for the mma token
  kTraceWaitQ,      // cycles opening the next tile (its Q)
  kTraceBlocks,     // key blocks visited
  kTraceTile,       // the schedule index t
  kTraceSm,         // %smid
  // the boundary's steps (the common case: this tile and the next both live)
  kTraceBoundaryIssued,  // this tile's last PV product and the next's first S issued
  kTraceBoundaryPvDone,  // that PV product retired
  kTraceBoundaryStored,  // the epilogue done (O staged, its TMA store issued)
  // the epilogue's steps (same tiles)
  kTraceEpilogueFree,    // the LSE stored, the staging rows free (all warps in)
  kTraceEpilogueStaged,  // this warp's O rows written
  kTraceEpilogueSynced,  // the staged rows fenced and every warp's in
  kTraceFields
};

#ifdef CUBRIDGE_TILE_TRACE
constexpr int kTraceCtas = 144, kTraceTiles = 128;
extern "C" __device__ uint32_t
    cubridge_tile_trace[kTraceCtas * kConsumers * kTraceTiles * kTraceFields] = {};
extern "C" __device__ unsigned long long cubridge_cta_time[kTraceCtas * 2] = {};
#endif

__device__ __forceinline__ uint32_t clock32() {
  uint32_t c;
  asm volatile("mov.u32 %0, %%clock;\n" : "=r"(c)::"memory");
  return c;
}

struct TileTrace {
#ifdef CUBRIDGE_TILE_TRACE
  uint32_t* row = nullptr;  // this consumer's fields for the current tile (thread 0)
  __device__ __forceinline__ void open(int consumer, int iter, int thread, int t) {
    row = nullptr;
    if (thread != 0 || blockIdx.x >= kTraceCtas || iter >= kTraceTiles) return;
    row = &cubridge_tile_trace[((blockIdx.x * kConsumers + consumer) * kTraceTiles + iter) *
                               kTraceFields];
    for (int f = 0; f < kTraceFields; ++f) row[f] = 0u;
    uint32_t sm;
    asm volatile("mov.u32 %0, %%smid;\n" : "=r"(sm));
    row[kTraceTile] = t;
    row[kTraceSm] = sm;
    row[kTraceTop] = clock32();
  }
  __device__ __forceinline__ void stamp(TraceField f) {
    if (row) row[f] = clock32();
  }
  __device__ __forceinline__ void add(TraceField f, uint32_t v) {
    if (row) atomicAdd(row + f, v);
  }
  __device__ __forceinline__ uint32_t now() const { return clock32(); }
  static __device__ __forceinline__ void cta_time(int which, int thread, int consumer) {
    if (thread != 0 || consumer != 0 || blockIdx.x >= kTraceCtas) return;
    unsigned long long ns;
    asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(ns)::"memory");
    cubridge_cta_time[2 * blockIdx.x + which] = ns;
  }
#else
  __device__ __forceinline__ void open(int, int, int, int) {}
  __device__ __forceinline__ void stamp(TraceField) {}
  __device__ __forceinline__ void add(TraceField, uint32_t) {}
  __device__ __forceinline__ uint32_t now() const { return 0u; }
  static __device__ __forceinline__ void cta_time(int, int, int) {}
#endif
  // mbar_wait, its cycles counted under f.
  __device__ __forceinline__ void wait(TraceField f, uint64_t* bar, uint32_t phase) {
    const uint32_t t0 = now();
    mbar_wait(bar, phase);
    add(f, now() - t0);
  }
  // take_mma_token, its cycles counted.
  __device__ __forceinline__ void take_token(int consumer) {
    const uint32_t t0 = now();
    take_mma_token(consumer);
    add(kTraceWaitToken, now() - t0);
  }
  // fn(), its cycles counted under f.
  template <typename F>
  __device__ __forceinline__ auto timed(TraceField f, F&& fn) {
    const uint32_t t0 = now();
    auto result = fn();
    add(f, now() - t0);
    return result;
  }
};

// ---- consumer: one tile --------------------------------------------------------------

// Releases a ring slot or Q: one arrival per warp, after the warp's wgmma reads
// of it retired.
__device__ __forceinline__ void release(uint64_t* bar, int thread) {
  if (thread % 32 == 0) mbar_arrive(bar);
}

// How a consumer treats key block n for its 64 rows: tail blocks check bounds,
// masked ones evaluate mask_mod, and a block EMPTY for these rows (but not for
// the CTA) is masked whole. Decided before the block's gemms are issued, so that
// the code between issue and wait is one straight-line instantiation (a branch
// there makes the compiler wait for the PV product before the softmax).
struct BlockClass {
  bool tail, masked, all_masked;
};

__device__ __forceinline__ BlockClass classify(const FwdParams& p, uint32_t info, int consumer,
                                               int q_base) {
  const int k_start = BlockInfo::index(info) * kBlockN;
  const BlockKind kind = BlockInfo::kind(info, consumer);
  // (without a mask_mod every block is FULL: the masked class is then not built)
  const bool all_masked = hooks::kHasMaskMod && kind == BlockKind::Empty;
  return {k_start + kBlockN > p.seqlen_k || q_base + kRowsPerConsumer > p.seqlen_q,
          all_masked || (hooks::kHasMaskMod && kind == BlockKind::Partial), all_masked};
}

// The mask bits of key block n for this consumer (masked or tail classes only).
// kMaskStaged: its mask pair read was staged for this block (stage_mask_rows).
template <bool kMasked, bool kTail, bool kMaskStaged = false>
__device__ __forceinline__ void block_mask(MaskBits& bits, const FwdParams& p,
                                           const SharedStorage& sh, const Tile& tile, int n,
                                           int slot, int q_base, const FragmentPos& pos,
                                           bool all_masked, const RowStaged& rows,
                                           int consumer = 0) {
  if constexpr (kMasked || kTail) {
    const uint32_t* keys = nullptr;
    if constexpr (kKeyStaged > 0) keys = sh.staged_keys.slot(slot);
    const FragmentPos at = fragment_pos_at_use(pos);
    constexpr bool kStaged = kMaskStaged && kMaskPairStaged;
    // (the thread's first row in O's staging rows, unswizzled: mask_bits swizzles; its
    // row + 8 is 1024 B on, in the same 16 rows)
    const uint32_t row0 = kStaged ? pair_row_addr<true>(sh.o.base(), consumer, at.row0) : 0u;
    if constexpr (kMaskCases > 1 && !kStaged) {
      with_mask_case<kMaskCases>(mask_case(tile.b, tile.h, p.aux), [&](auto kase) {
        mask_bits<kTail, false, decltype(kase)::value>(bits, p, tile.b, tile.h, q_base,
                                                      n * kBlockN, at, all_masked, rows, keys);
      });
    } else {
      mask_bits<kTail, kStaged>(bits, p, tile.b, tile.h, q_base, n * kBlockN, at, all_masked,
                                rows, keys, row0);
    }
    fence_operands(bits);  // computed here, not sunk to where the bits are used
  }
}

// kSigmoidInput: s gets sigmoid_weights' inputs for `sigmoid_form` (one-SFU sigmoid).
// kPairsStaged: the pair read's rows were staged for this block (stage_pair_rows).
template <bool kMasked, bool kTail, bool kPairsStaged, bool kSigmoidInput = false>
__device__ __forceinline__ void block_logits(float (&s)[kSAcc], const FwdParams& p,
                                             const SharedStorage& sh, const Tile& tile, int n,
                                             int consumer, int q_base, const FragmentPos& pos,
                                             int thread, const MaskBits& bits,
                                             int sigmoid_form = kSigmoidExact) {
  PairWords pairs;
  pair_words<kPairsStaged, kTail>(pairs, p, sh, tile.b, tile.h, consumer, q_base, n * kBlockN,
                                  fragment_pos_at_use(pos), thread);
  scores_to_logits<kMasked || kTail, kTail, kSigmoidInput>(
      s, p, tile.b, tile.h, q_base, n * kBlockN, fragment_pos_at_use(pos), bits,
      sigmoid_input_scale(sigmoid_form), pairs);
}

// Loads this consumer's staged query-only reads for its two rows of a tile.
// (nothing where they were loaded ahead for this tile: that load is taken instead)
__device__ __forceinline__ void load_row_staged(RowStaged& rows, const FwdParams& p,
                                                const Tile& tile, int q_base,
                                                const FragmentPos& pos) {
  if constexpr (kRowStaged > 0) {
    if (rows.ahead) {
      rows.ahead = false;
      return;
    }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int q = min(q_base + pos.row0 + 8 * half, p.seqlen_q - 1);
#pragma unroll
      for (int i = 0; i < kRowStaged; ++i) rows.v[half][i] = row_staged(i, tile.b, tile.h, q, p.aux);
    }
  }
}

// Runs f with the block's class as compile-time flags.
template <typename F>
__device__ __forceinline__ void with_block_class(const BlockClass& c, F&& f) {
  if (c.tail) {
    f(std::true_type{}, std::true_type{});
  } else if (c.masked) {
    f(std::true_type{}, std::false_type{});
  } else {
    f(std::false_type{}, std::false_type{});
  }
}

// What the epilogue needs of a tile's row statistics: each of the thread's two rows'
// factor for O (1 / sum, or the activation's scale) and, for softmax, its LSE.
struct RowsOut {
  float inv[2];
  float lse[2];
};

// Taken right after a tile's last softmax, before the next tile is opened: they
// need nothing from the last PV product, and their chain (shuffles, rcp, lg2) then
// runs under the waits for the next Q, V and K instead of inside the epilogue. A
// live softmax row sums to at least 1 (its max's exponential), so the approximate
// ftz forms are exact enough and take no branches.
__device__ __forceinline__ RowsOut finish_rows(const RowStats& st, const float (&to_log2)[2]) {
  RowsOut r;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    r.inv[half] = 1.f / kActivationScale;  // (1 but for scaled elementwise activations)
    r.lse[half] = 0.f;
    if constexpr (hooks::kNormalizer == Normalizer::Softmax) {
      const float sum = quad_sum(st.sum[half]);
      float rcp, lg2;
      asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(rcp) : "f"(sum));
      asm("lg2.approx.ftz.f32 %0, %1;\n" : "=f"(lg2) : "f"(sum));
      r.inv[half] = sum > 0.f ? rcp : 0.f;
      r.lse[half] = sum > 0.f ? (st.max[half] * to_log2[half] + lg2) * kLn2 : -INFINITY;
    }
  }
  return r;
}

// The LSE of the thread's two rows (softmax; one thread of each quad writes).
__device__ __forceinline__ void store_lse(const FwdParams& p, const Tile& tile, int q_base,
                                          const FragmentPos& pos, const RowsOut& rows_out) {
  if constexpr (hooks::kNormalizer == Normalizer::Softmax) {
    if (pos.col0 != 0) return;
    float* row_lse = p.lse + (static_cast<int64_t>(tile.b) * p.heads_q + tile.h) * p.seqlen_q;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int q = q_base + pos.row0 + 8 * half;
      if (q < p.seqlen_q) row_lse[q] = rows_out.lse[half];
    }
  }
}

// O's staging tile: its own, or (kOInQ) the first kHeadDimV / 64 panels of the Q
// buffer qb of the tile being stored, whose rows of this consumer its last S product
// has read. Its panels are OTile::kPanelBytes apart either way (kOInQ: 128-byte ones).
// (a template: the branch not taken names a member of the other storage layout)
template <typename Storage>
__device__ __forceinline__ char* o_staging(Storage& sh, int qb) {
  if constexpr (kOInQ) {
    return reinterpret_cast<char*>(sh.q[qb].data);
  } else {
    return reinterpret_cast<char*>(sh.o.data);
  }
}
__device__ __forceinline__ void epilogue(const Sm90Params& P, SharedStorage& sh, const Tile& tile,
                                         int qb, int consumer, int thread,
                                         const FragmentPos& held_pos, const float (&o)[kOAcc],
                                         bool live, const RowsOut& rows_out,
                                         TileTrace* trace = nullptr) {
  const FwdParams& p = P.p;
  const FragmentPos pos = fragment_pos_at_use(held_pos);
  const int q_base = tile.m_block * kBlockM + consumer * kRowsPerConsumer;
  const int bar = kEpilogueBarrier + consumer;
  store_lse(p, tile, q_base, pos, rows_out);  // (its stores issue while the warps gather)
  // The staging rows of this consumer are free once its previous store read them.
  if (thread == 0) tma_store_wait_read();
  named_barrier_sync(bar, 128);
  if (trace) trace->stamp(kTraceEpilogueFree);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const float inv = rows_out.inv[half];
    // (opaque: the 2 x kHeadDimV / 8 addresses are recomputed per tile, not held live)
    const int row = consumer * kRowsPerConsumer + opaque(pos.row0) + 8 * half;
    const uint32_t row_addr =
        smem_addr(o_staging(sh, qb)) + row * OTile::kSwizzleBytes + pos.col0 * 2;
    // (16-byte chunk c of a panel's row sits at c ^ the row's bits 7 and up of its offset)
    constexpr int kChunks = OTile::kSwizzleBytes / 16;
    const uint32_t swizzle = ((row * OTile::kSwizzleBytes >> 7) % kChunks) << 4;
#pragma unroll
    for (int j = 0; j < kHeadDimV / 8; ++j) {
      // (a tile without live key blocks never wrote O: its rows are 0)
      const uint32_t v = live ? pack2<Element>(o[4 * j + 2 * half] * inv,
                                               o[4 * j + 2 * half + 1] * inv)
                              : 0u;
      const uint32_t addr =
          row_addr + (j / kChunks) * OTile::kPanelBytes + (((j % kChunks) << 4) ^ swizzle);
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v));
    }
  }
  if (trace) trace->stamp(kTraceEpilogueStaged);
  fence_async_shared();
  named_barrier_sync(bar, 128);
  if (trace) trace->stamp(kTraceEpilogueSynced);
  if (thread == 0 && q_base < p.seqlen_q) {
#pragma unroll
    for (int pn = 0; pn < OTile::kPanels; ++pn) {
      tma_store_4d(&P.tma_o,
                   o_staging(sh, qb) + pn * OTile::kPanelBytes +
                       consumer * kRowsPerConsumer * OTile::kSwizzleBytes,
                   pn * OTile::kPanelCols, q_base, tile.h, tile.b);
    }
    tma_store_commit();
  }
}

// A consumer's view of one tile of its schedule: the tile (schedule index t; -1:
// the CTA has no more), the Q buffer it reads, whether it visits any key block,
// and (once its K has landed) the first block's BlockInfo word.
struct OpenTile {
  int t;
  Tile tile;
  int qb;
  int qs;  // its Q slot (barriers, words): qb, or with one Q buffer the consumer
  bool live;
  uint32_t info;
};

// Wait for the iter-th tile of this CTA (its Q, or the producer's word that there
// is none) and decode it.
__device__ __forceinline__ OpenTile open_tile(const Sm90Params& P, SharedStorage& sh, int iter,
                                              int consumer) {
  OpenTile ot;
  ot.qb = iter % kQBuffers;
  ot.qs = kOInQ ? consumer : ot.qb;
  mbar_wait(&sh.q_full[ot.qs], kOInQ ? iter & 1 : (iter / kQBuffers) & 1);
  ot.t = sh.tile_index[ot.qs];
  ot.live = ot.t >= 0 && sh.tile_live[ot.qs] != 0;
  ot.tile = tile_at(max(ot.t, 0), P);
  ot.info = 0;
  return ot;
}

__device__ __forceinline__ void consumer(const Sm90Params& P, SharedStorage& sh, int consumer) {
  const FwdParams& p = P.p;
  const int thread = threadIdx.x - 128 * (consumer + 1);
  const FragmentPos pos(thread);
  // Scores are in natural units after score_mod (core units times kScoreOut for an
  // affine one); otherwise the scale folds into exp2.
  const float to_log2 = hooks::kHasScoreMod ? kLog2e * kScoreOut : p.scale_log2;
  constexpr bool kSoftmax = hooks::kNormalizer == Normalizer::Softmax;
  // The last consumer hands the first token to consumer 0.
  if (consumer == kConsumers - 1) pass_mma_token(consumer);

  float s[kSAcc];
  uint32_t pf[kPvSteps][4];
  // Defined once here, before any wgmma is in flight (an undefined accumulator is
  // materialised inside the wgmma's issue window, which serialises every wgmma):
  // each tile's first PV product overwrites O (gemm_pv's `accumulate`).
  float o[kOAcc];
#pragma unroll
  for (int i = 0; i < kOAcc; ++i) o[i] = 0.f;
#pragma unroll
  for (int i = 0; i < kSAcc; ++i) s[i] = 0.f;
  RingSlot slot;
  int iter = 0;
  int sigmoid_form = kSigmoidTail;  // (this warp's; kSigmoidOneSfu)
  TileTrace trace;
  TileTrace::cta_time(0, thread, consumer);
  // A tile's first S product issued alone (no PV product goes with it), and its
  // first block's BlockInfo word read.
  auto first_s_alone = [&](OpenTile& t) __attribute__((always_inline)) {
    mbar_wait(&sh.k_full[slot.index], slot.phase);
    t.info = sh.block_info[slot.index];
    take_mma_token(consumer);
    gemm_qk(s, sh, t.qb, slot.index, consumer);
    wgmma_commit();
    pass_mma_token(consumer);
    wgmma_wait<0>();
    fence_operands(s);
  };
  // A tile's last PV product issued alone (no next S product goes with it).
  auto last_pv_alone = [&](const RingSlot& pv, bool o_written) __attribute__((always_inline)) {
    mbar_wait(&sh.v_full[pv.index], pv.phase);
    take_mma_token(consumer);
    gemm_pv(o, pf, sh, pv.index, o_written);
    wgmma_commit();
    pass_mma_token(consumer);
    wgmma_wait<0>();
    fence_operands(o);
    release(&sh.v_empty[pv.index], thread);
  };
  OpenTile cur = open_tile(P, sh, iter, consumer);
  // The S product of a tile's first block is issued before the previous tile's
  // epilogue (below, except for the CTA's first tile and with one Q buffer), so that
  // the tensor cores have work across tile boundaries.
  if (cur.live) first_s_alone(cur);
  RowStaged rows;  // this tile's staged query reads for the thread's two rows
  while (true) {
    trace.open(consumer, iter, thread, cur.t);
    const int q_base = cur.tile.m_block * kBlockM + consumer * kRowsPerConsumer;
    RowStats st;
    bool o_written = false;  // O holds this tile's first PV product (else garbage)
    RingSlot pv;  // the slot of the block whose PV product is next
    const bool live = cur.live;
    load_row_staged(rows, p, cur.tile, q_base, pos);  // (after the first tile: loaded below)
    const RowScale rs = row_scale(p, cur.tile, q_base, pos, to_log2);
    if (live) {  // the first block's S product is ready
      uint32_t info = cur.info;
      const BlockClass first = classify(p, info, consumer, q_base);
      bool first_capped = false;  // (the first block's weights in the one-SFU form)
      with_block_class(first, [&](auto masked, auto tail) {
        constexpr bool kM = decltype(masked)::value, kT = decltype(tail)::value;
        MaskBits bits;
        block_mask<kM, kT>(bits, p, sh, cur.tile, BlockInfo::index(info), slot.index, q_base,
                           pos, first.all_masked, rows);
        // (the ring slot holds the staged keys the mask read until here)
        release(&sh.k_empty[slot.index], thread);
        if constexpr (kPolyCap && !kT) {
          first_capped = first_block_poly_cap<kM>(s, p.scale, bits, pf);
        }
        if (!first_capped) {
          sign_rows(s, rs);
          block_logits<kM, kT, false>(s, p, sh, cur.tile, BlockInfo::index(info), consumer,
                                      q_base, pos, thread, bits);
        }
      });
      if constexpr (kSoftmax) {
        float rescale[2];
        online_softmax(s, st, rs.t, rescale);
      }
      if (!first_capped) probs_to_fragments(s, pf);
      if constexpr (kStagesInO) {
        // The steady blocks stage pair rows in O's rows: free once the previous
        // tile's store has read them (long since, by now).
        if (thread == 0) tma_store_wait_read();
        named_barrier_sync(kEpilogueBarrier + consumer, 128);
      }
      pv = slot;
      slot.advance();
      trace.stamp(kTraceFirst);
      trace.add(kTraceBlocks, 1);

      // Steady state: S of block n issued before the PV product of the previous one.
      // p_prev holds the previous block's P (its PV product reads it); this block's P
      // goes into p_next where the two arrays trade roles (kAlternatingP), else into
      // p_prev once that product retired.
      auto steady_block = [&](auto alternating, uint32_t (&p_prev)[kPvSteps][4],
                              uint32_t (&p_next)[kPvSteps][4]) __attribute__((always_inline)) {
        constexpr bool kAlt = decltype(alternating)::value;
        trace.wait(kTraceWaitK, &sh.k_full[slot.index], slot.phase);
        trace.add(kTraceBlocks, 1);
        info = sh.block_info[slot.index];
        const int n = BlockInfo::index(info);
        // (plain attention: a steady block is never a tail, see kPlainSteady)
        const BlockClass cls =
            kPlainSteady ? BlockClass{false, false, false} : classify(p, info, consumer, q_base);
        with_block_class(cls, [&](auto masked, auto tail) {
          constexpr bool kM = decltype(masked)::value, kT = decltype(tail)::value;
          stage_pair_rows<kT>(p, sh, cur.tile.b, cur.tile.h, consumer, q_base, n * kBlockN,
                              thread);
          if constexpr (kM || kT) {
            stage_mask_rows<kT>(p, sh, cur.tile.b, cur.tile.h, consumer, q_base, n * kBlockN,
                                thread);
          }
          // An index-only mask first, while S holds nothing live (its product is not
          // issued yet): its arithmetic then has S's registers. One that reads aux
          // waits for S (loads issued here were measured to spill more).
          MaskBits bits;
          if constexpr (kMaskIndexOnly) {
            block_mask<kM, kT>(bits, p, sh, cur.tile, n, slot.index, q_base, pos,
                               cls.all_masked, rows);
          }
          trace.take_token(consumer);
          gemm_qk(s, sh, cur.qb, slot.index, consumer);
          wgmma_commit();
          trace.wait(kTraceWaitV, &sh.v_full[pv.index], pv.phase);
          gemm_pv(o, p_prev, sh, pv.index, o_written);
          wgmma_commit();
          pass_mma_token(consumer);
          wgmma_wait<1>();
          fence_operands(s);
          if constexpr (!kMaskIndexOnly) {
            block_mask<kM, kT, true>(bits, p, sh, cur.tile, n, slot.index, q_base, pos,
                                     cls.all_masked, rows, consumer);
          }
          // (the ring slot holds the staged keys the mask read until here)
          release(&sh.k_empty[slot.index], thread);
          // (one-SFU sigmoid weights in unmasked steady blocks only: each instance of
          // the three forms grows the kernel, and short tiles then paid in fetch)
          constexpr bool kSigmoidIn = kSigmoidOneSfu && !kM && !kT;
          // P into pn while the previous PV product still reads p_prev: the one-SFU
          // sigmoid weights, or the exponentials at the current max where the row sums
          // allow it.
          uint32_t pn_copy[kPvSteps][4];
          auto& pn = kAlt ? p_next : pn_copy;
          // (a soft-capped sigmoid's tanh form reads the raw scores: a miss is redone from
          // them with the two-op form, and only a second miss in a row leaves the form)
          bool capped = false;
          int missed = kSigmoidExact;
          if constexpr (kPolyCap && kSigmoidIn) {
            if ((sigmoid_form & ~kSigmoidStrike) == kSigmoidTanh) {
              capped = poly_cap_weights(s, p.scale, pn);
              missed = capped ? kSigmoidExact : sigmoid_form;
              sigmoid_form = capped ? kSigmoidTanh : kSigmoidExact;
            }
          }
          if (!capped) {
            sign_rows(s, rs);
            block_logits<kM, kT, true, kSigmoidIn>(s, p, sh, cur.tile, n, consumer, q_base,
                                                   pos, thread, bits, sigmoid_form);
          }
          bool p_in_pn;
          if constexpr (kSigmoidIn) {
            if (!capped) sigmoid_weights(s, sigmoid_form, pn);
            if (missed == kSigmoidTanh && sigmoid_form != kSigmoidTanh) {
              sigmoid_form = kSigmoidTanh | kSigmoidStrike;
            }
            p_in_pn = true;
          } else {
            p_in_pn = kKeepMaxBySums && exps_at_current_max(s, st, rs.t, pn);
          }
          if (p_in_pn) {
            for (auto& frag : pn) fence_operands(frag);
            wgmma_wait<0>();
            fence_operands(o);
            release(&sh.v_empty[pv.index], thread);
            if constexpr (!kAlt) take_fragments(p_prev, pn);
          } else {
            float rescale[2];
            bool moved = false;
            if constexpr (kSoftmax) moved = online_softmax(s, st, rs.t, rescale);
            fence_operands(s);
            // (only unmasked blocks: masking keeps too many registers live for it)
            if constexpr (kSoftmax && !decltype(masked)::value) pin_after_softmax(st);
            wgmma_wait<0>();
            fence_operands(o);
            release(&sh.v_empty[pv.index], thread);
            if (moved) rescale_o(o, rescale);
            probs_to_fragments(s, kAlt ? p_next : p_prev);
          }
        });
        o_written = true;
        pv = slot;
        slot.advance();
      };
      if constexpr (kAlternatingP) {
        // Two blocks a turn, so that which array holds the live P is known at every
        // point (a run-time parity kept both live across the loop: spills).
        uint32_t pg[kPvSteps][4];
        while (!BlockInfo::last(info)) {
          steady_block(std::true_type{}, pf, pg);
          if (BlockInfo::last(info)) {
            take_fragments(pf, pg);  // (the boundary's PV product reads pf)
            break;
          }
          steady_block(std::true_type{}, pg, pf);
        }
      } else {
        while (!BlockInfo::last(info)) steady_block(std::false_type{}, pf, pf);
      }
    }
    trace.stamp(kTraceSteadyEnd);
    const RowsOut rows_out = finish_rows(st, rs.t);
    // (read again here where P alternates: held across the loop it spilled)
    const bool live_at_end = kAlternatingP ? cur.t >= 0 && sh.tile_live[cur.qs] != 0 : live;
    OpenTile next;
    if constexpr (kOInQ) {
      // One Q buffer: the last PV product, then the epilogue stages O in this tile's
      // Q rows of the consumer, and the rows are released once the store has read
      // them; only then can its rows of the next tile land (the producer loads each
      // consumer's rows on their own Q slot) and its first S product be issued.
      if (live_at_end) last_pv_alone(pv, o_written);
      epilogue(P, sh, cur.tile, cur.qb, consumer, thread, pos, o, live_at_end, rows_out,
               &trace);
      if (thread == 0) tma_store_wait_read();
      named_barrier_sync(kEpilogueBarrier + consumer, 128);
      release(&sh.q_empty[cur.qs], thread);
      next = trace.timed(kTraceWaitQ, [&] { return open_tile(P, sh, iter + 1, consumer); });
      load_row_staged(rows, p, next.tile,
                      next.tile.m_block * kBlockM + consumer * kRowsPerConsumer, pos);
      rows.ahead = true;
      if (next.live) first_s_alone(next);
    } else {
      // Q of this tile is no longer read by this consumer.
      release(&sh.q_empty[cur.qs], thread);

      // The next tile of the schedule, opened now so that its first S product can be
      // issued together with this tile's last PV product.
      next = trace.timed(kTraceWaitQ, [&] { return open_tile(P, sh, iter + 1, consumer); });
      // The next tile's staged query reads go out now (this tile's are dead): their
      // loads' latency then passes under this tile's last products and epilogue instead
      // of standing before the next tile's first mask.
      load_row_staged(rows, p, next.tile,
                      next.tile.m_block * kBlockM + consumer * kRowsPerConsumer, pos);
      rows.ahead = true;
      // Straight-line code per case, each with its own epilogue: the compiler loses
      // track of which wgmma is in flight where such paths join, and then waits for
      // it (serialising every wgmma of the kernel).
      if (live_at_end && next.live) {  // the common case
        trace.wait(kTraceWaitV, &sh.v_full[pv.index], pv.phase);
        trace.wait(kTraceWaitK, &sh.k_full[slot.index], slot.phase);
        next.info = sh.block_info[slot.index];
        trace.take_token(consumer);
        gemm_pv(o, pf, sh, pv.index, o_written);
        wgmma_commit();
        gemm_qk(s, sh, next.qb, slot.index, consumer);
        wgmma_commit();
        pass_mma_token(consumer);
        trace.stamp(kTraceBoundaryIssued);
        wgmma_wait<1>();  // the PV product retired; the next tile's S is in flight
        fence_operands(o);
        trace.stamp(kTraceBoundaryPvDone);
        release(&sh.v_empty[pv.index], thread);
        epilogue(P, sh, cur.tile, cur.qb, consumer, thread, pos, o, true, rows_out, &trace);
        trace.stamp(kTraceBoundaryStored);
        // Retired before the paths join: an S product in flight across the join
        // makes the compiler copy its registers there, which serialises every wgmma.
        wgmma_wait<0>();
        fence_operands(s);
      } else {  // the CTA's last tile, or one without live key blocks
        if (live_at_end) {
          last_pv_alone(pv, o_written);
        } else if (next.live) {
          first_s_alone(next);
        }
        epilogue(P, sh, cur.tile, cur.qb, consumer, thread, pos, o, live_at_end, rows_out);
      }
    }
    const bool more = next.t >= 0;
    trace.stamp(kTraceEnd);
    if (!more) break;
    cur = next;
    ++iter;
  }
  if (thread == 0) tma_store_wait_all();
  TileTrace::cta_time(1, thread, consumer);
}

}  // namespace fa_sm90

using fa_sm90::Sm90Params;

// Launch facts read by the host from the cubin: block_m, block_n, threads,
// dynamic smem bytes, normaliser, head dim, stages (docs/hooks.md).
CUBRIDGE_EXPORT_KERNEL_INFO(fa_sm90::kBlockM, fa_sm90::kBlockN, fa_sm90::kThreads, fa_sm90::kSmemBytes,
                            fa_sm90::kHeadDim, fa_sm90::kStages);

// Persistent grid: (min(tiles, SMs), 1, 1).
extern "C" __global__ void __launch_bounds__(fa_sm90::kThreads, 1)
    fa_sm90_fwd(const __grid_constant__ Sm90Params P) {
  using namespace fa_sm90;
  extern __shared__ unsigned char smem_raw[];
  // Swizzled tiles must sit on the boundaries of their 8-row atoms (1024 B at most).
  const uint32_t raw = smem_addr(smem_raw);
  SharedStorage& sh =
      *reinterpret_cast<SharedStorage*>(smem_raw + ((1024 - raw % 1024) % 1024));
  // Broadcast from lane 0: the compiler then knows the role is warp-uniform, and so
  // is every branch derived from it (no serialised wgmma in 'divergent' paths).
  const int warpgroup = __shfl_sync(0xffffffffu, threadIdx.x / 128, 0);
  if (threadIdx.x == 0) {
    for (int i = 0; i < kQSlots; ++i) {
      mbar_init(&sh.q_full[i], 2);  // Q's bytes, then the tile's liveness
      mbar_init(&sh.q_empty[i], kOInQ ? 4 : 4 * kConsumers);  // (a warp's lane 0 each)
    }
    for (int i = 0; i < kStages; ++i) {
      mbar_init(&sh.k_full[i], 1);
      mbar_init(&sh.v_full[i], 1);
      mbar_init(&sh.k_empty[i], 4 * kConsumers + 1);  // (and the V loader)
      mbar_init(&sh.v_empty[i], 4 * kConsumers);
    }
    mbar_init_fence();
    tma_prefetch_map(kOInQ ? &P.tma_q_rows : &P.tma_q);
    tma_prefetch_map(&P.tma_k);
    tma_prefetch_map(&P.tma_v);
    tma_prefetch_map(&P.tma_o);
  }
  __syncthreads();
  if (warpgroup == 0) {
    regs_release<kProducerRegs>();
    // (the warp index broadcast first: a role branch the compiler cannot see as
    // warp-uniform spilled the 40-register producer, NOTES.md "a walker warp")
    const int warp = __shfl_sync(0xffffffffu, threadIdx.x / 32, 0);
    if (warp == 0) {
      producer(P, sh, threadIdx.x);
    } else if (warp == 1) {
      v_loader(P, sh, threadIdx.x - 32);
    }
  } else {
    regs_claim<kConsumerRegs>();
    consumer(P, sh, warpgroup - 1);
  }
}
