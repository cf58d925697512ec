"""The tile trace's optional sides, as edits of fa_sm90.cu's text (diagnostics only,
kept out of the library's source, which the LLM path's prompts carry). Each edit is
exact text that must occur a given number of times, so an edit fails loudly when the
code it targets has moved (tests/bench/test_tile_trace.py applies both to the source).

- producer_side: lane 0 of the producer records per tile (the global
  cubridge_producer_trace) clock stamps (tile start, Q issued, last K issued) and the
  cycles spent classifying key blocks, waiting for a free Q buffer / K slot, storing
  staged key reads and waiting for the next tile's claim. (V slots are the V
  loader's to wait for since 2026-12-06: its field stays 0; sources from before
  recorded the producer's trailing V there.)
- warp_side: lane 0 of each consumer warp records per tile (cubridge_warp_trace) the
  cycles it waited for the mma token, K and V. Warp 0 of each consumer shares SMSP 0
  with the producer warp: were it slowed by the producer's issue, the other three
  would wait for it at the token's named barrier, and it would wait less than they do.
"""

from __future__ import annotations

PRODUCER_TRACE = """\
// ---- diagnostics: the producer's side of the tile trace ------------------------
// With CUBRIDGE_TILE_TRACE, lane 0 of the producer records per tile of its loop: clock
// stamps (tile start, Q issued, last K issued) and the cycles it spent classifying key
// blocks, waiting for a free Q buffer / K slot, storing staged key reads and waiting
// for the claim of the next tile (kPWaitVEmpty: 0, the V loader waits for V slots).
// Accumulated with fire-and-forget atomics.
enum ProducerField {
  kPTop, kPQ, kPEnd, kPClassify, kPWaitQEmpty, kPWaitKEmpty, kPWaitVEmpty, kPStaged,
  kPClaim, kPBlocks, kPTile, kPFields
};
#ifdef CUBRIDGE_TILE_TRACE
constexpr int kPTraceCtas = 144, kPTraceTiles = 128;
extern "C" __device__ uint32_t cubridge_producer_trace[kPTraceCtas * kPTraceTiles * kPFields] = {};
#endif
struct ProducerTrace {
#ifdef CUBRIDGE_TILE_TRACE
  uint32_t* row = nullptr;
  __device__ __forceinline__ static uint32_t clock() {
    uint32_t c;
    asm volatile("mov.u32 %0, %%clock;\\n" : "=r"(c)::"memory");
    return c;
  }
  __device__ __forceinline__ void open(int iter, int lane, int t) {
    row = (lane != 0 || blockIdx.x >= kPTraceCtas || iter >= kPTraceTiles)
              ? nullptr : &cubridge_producer_trace[(blockIdx.x * kPTraceTiles + iter) * kPFields];
    if (row) { row[kPTile] = t; row[kPTop] = clock(); }
  }
  __device__ __forceinline__ void stamp(ProducerField f) { if (row) row[f] = clock(); }
  __device__ __forceinline__ void add(ProducerField f, uint32_t v) {
    if (row) atomicAdd(row + f, v);
  }
  __device__ __forceinline__ uint32_t now() const { return clock(); }
#else
  __device__ __forceinline__ void open(int, int, int) {}
  __device__ __forceinline__ void stamp(ProducerField) {}
  __device__ __forceinline__ void add(ProducerField, uint32_t) {}
  __device__ __forceinline__ uint32_t now() const { return 0u; }
#endif
};

"""

PRODUCER_HEAD = ("// ---- producer ----------------------------------------------------"
                 "--------------------\n")
SYNC_STAGED = """\
        __syncwarp();  // every lane's stores ordered before lane 0's arrival (release)
      }"""
PRODUCER_EDITS = [
    (PRODUCER_HEAD, PRODUCER_TRACE + PRODUCER_HEAD, 1),
    ("  RingSlot slot;\n  int t = blockIdx.x;",
     "  RingSlot slot;\n  ProducerTrace pt;\n  int t = blockIdx.x;", 1),
    ("""    const int qb = iter % kQBuffers;
    if constexpr (!kOInQ) {
      if (iter >= kQBuffers) mbar_wait(&sh.q_empty[qb], (iter / kQBuffers - 1) & 1);""",
     """    pt.open(iter, lane, t);
    const int qb = iter % kQBuffers;
    uint32_t t0 = pt.now();
    if constexpr (!kOInQ) {  // (one Q buffer: its per-consumer waits are not counted)
      if (iter >= kQBuffers) mbar_wait(&sh.q_empty[qb], (iter / kQBuffers - 1) & 1);
      pt.add(kPWaitQEmpty, pt.now() - t0);""", 1),
    ("""tile.m_block * kBlockM, tile.h, tile.b);
      }
    }
    KeyWalk walk(p, tile, lane);
    BlockKind kinds[kConsumers];
    int n = walk.next(p, kinds, lane);""", """tile.m_block * kBlockM, tile.h, tile.b);
      }
    }
    pt.stamp(kPQ);
    t0 = pt.now();
    KeyWalk walk(p, tile, lane);
    BlockKind kinds[kConsumers];
    int n = walk.next(p, kinds, lane);
    pt.add(kPClassify, pt.now() - t0);""", 1),
    ("""      BlockKind next_kinds[kConsumers];
      const int next = walk.next(p, next_kinds, lane);""",
     """      BlockKind next_kinds[kConsumers];
      t0 = pt.now();
      const int next = walk.next(p, next_kinds, lane);
      pt.add(kPClassify, pt.now() - t0);
      pt.add(kPBlocks, 1);""", 1),
    ("""      mbar_wait(&sh.k_empty[slot.index], slot.phase ^ 1u);
      if constexpr (kKeyStaged > 0) {""", """      t0 = pt.now();
      mbar_wait(&sh.k_empty[slot.index], slot.phase ^ 1u);
      pt.add(kPWaitKEmpty, pt.now() - t0);
      t0 = pt.now();
      if constexpr (kKeyStaged > 0) {""", 1),
    (SYNC_STAGED, SYNC_STAGED + """
      pt.add(kPStaged, pt.now() - t0);""", 1),
    ("""    t = __shfl_sync(0xffffffffu, t_next, 0);""", """    pt.stamp(kPEnd);
    t0 = pt.now();
    t = __shfl_sync(0xffffffffu, t_next, 0);
    pt.add(kPClaim, pt.now() - t0);""", 1),
]


WARP_EDITS = [
    ("""extern "C" __device__ unsigned long long cubridge_cta_time[kTraceCtas * 2] = {};
#endif""",
     """extern "C" __device__ unsigned long long cubridge_cta_time[kTraceCtas * 2] = {};
// per warp of each consumer (lane 0 of each): token, K and V wait cycles per tile
constexpr int kWarpFields = 3;
extern "C" __device__ uint32_t
    cubridge_warp_trace[kTraceCtas * kConsumers * kTraceTiles * 4 * kWarpFields] = {};
#endif""", 1),
    ("""  uint32_t* row = nullptr;  // this consumer's fields for the current tile (thread 0)
  __device__ __forceinline__ void open(int consumer, int iter, int thread, int t) {
    row = nullptr;
""", """  uint32_t* row = nullptr;  // this consumer's fields for the current tile (thread 0)
  uint32_t* wrow = nullptr;  // this warp's (lane 0 of each)
  __device__ __forceinline__ void open(int consumer, int iter, int thread, int t) {
    row = nullptr;
    wrow = nullptr;
    if ((thread & 31) == 0 && blockIdx.x < kTraceCtas && iter < kTraceTiles) {
      wrow = &cubridge_warp_trace[(((blockIdx.x * kConsumers + consumer) * kTraceTiles + iter) *
                                   4 + thread / 32) * kWarpFields];
      for (int f = 0; f < kWarpFields; ++f) wrow[f] = 0u;
    }
""", 1),
    ("""  __device__ __forceinline__ void add(TraceField f, uint32_t v) {
    if (row) atomicAdd(row + f, v);
  }""", """  __device__ __forceinline__ void add(TraceField f, uint32_t v) {
    if (row) atomicAdd(row + f, v);
    const int w = f == kTraceWaitToken ? 0 : f == kTraceWaitK ? 1 : f == kTraceWaitV ? 2 : -1;
    if (wrow && w >= 0) wrow[w] += v;
  }""", 1),
]



def _apply(text: str, edits, what: str) -> str:
    for old, new, count in edits:
        if text.count(old) != count:
            raise ValueError(f"{what}: expected {count} of {old[:60]!r} in the source, found "
                             f"{text.count(old)} (the code it edits has moved)")
        text = text.replace(old, new)
    return text


def producer_side(text: str) -> str:
    """fa_sm90.cu's text with the producer's side of the trace."""
    return _apply(text, PRODUCER_EDITS, "producer side")


def warp_side(text: str) -> str:
    """fa_sm90.cu's text with each consumer warp's waits traced."""
    return _apply(text, WARP_EDITS, "warp side")
