"""Writes a copy of fa_sm90.cu whose producer also records the tile trace's
producer side (the global cubridge_producer_trace that
bench/kernels/fa_sm90/tile_trace.py reads when a --source has it): per tile,
clock stamps (tile start, Q issued, last K issued) and the cycles spent
on the key range and classifying key blocks, waiting for a free Q buffer / K slot / V slot, storing
the staged key reads and waiting for the next tile's claim. Kept out of the
library's source (it is diagnostics only, and the source is what the LLM path's
prompts carry); it edits the source by exact text, so it fails loudly when the
producer's code has moved.

    python make_producer_trace_source.py SRC OUT"""

import sys
from pathlib import Path

TRACE = """// ---- diagnostics: the producer's side of the tile trace ----------------------------
// With CUBRIDGE_TILE_TRACE, lane 0 of the producer records per tile of its loop: clock
// stamps (tile start, Q issued, last K issued) and the cycles it spent classifying key
// blocks, waiting for a free Q buffer / K slot / V slot, storing staged key reads and
// waiting for the claim of the next tile. Accumulated with fire-and-forget atomics.
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
  __device__ __forceinline__ void add(ProducerField f, uint32_t v) { if (row) atomicAdd(row + f, v); }
  __device__ __forceinline__ uint32_t now() const { return clock(); }
#else
  __device__ __forceinline__ void open(int, int, int) {}
  __device__ __forceinline__ void stamp(ProducerField) {}
  __device__ __forceinline__ void add(ProducerField, uint32_t) {}
  __device__ __forceinline__ uint32_t now() const { return 0u; }
#endif
};

"""

EDITS = [
    ("// ---- producer ------------------------------------------------------------------------\n",
     TRACE + "// ---- producer ------------------------------------------------------------------------\n", 1),
    ("""                                        const RingSlot& next) {
    if (!pending) return;
    const int index = next.index == 0 ? kStages - 1 : next.index - 1;
    const uint32_t phase = next.index == 0 ? next.phase ^ 1u : next.phase;
    mbar_wait(&sh.v_empty[index], phase ^ 1u);""",
     """                                        const RingSlot& next, ProducerTrace& pt) {
    if (!pending) return;
    const int index = next.index == 0 ? kStages - 1 : next.index - 1;
    const uint32_t phase = next.index == 0 ? next.phase ^ 1u : next.phase;
    const uint32_t t0 = pt.now();
    mbar_wait(&sh.v_empty[index], phase ^ 1u);
    pt.add(kPWaitVEmpty, pt.now() - t0);""", 1),
    ("v.issue(P, sh, lane, slot)", "v.issue(P, sh, lane, slot, pt)", 3),
    ("  TrailingV v;\n  int t = blockIdx.x;", "  TrailingV v;\n  ProducerTrace pt;\n  int t = blockIdx.x;", 1),
    ("""    const int qb = iter % kQBuffers;
    if (iter >= kQBuffers) mbar_wait(&sh.q_empty[qb], (iter / kQBuffers - 1) & 1);""",
     """    pt.open(iter, lane, t);
    const int qb = iter % kQBuffers;
    uint32_t t0 = pt.now();
    if (iter >= kQBuffers) mbar_wait(&sh.q_empty[qb], (iter / kQBuffers - 1) & 1);
    pt.add(kPWaitQEmpty, pt.now() - t0);""", 1),
    ("""tile.m_block * kBlockM, tile.h, tile.b);
    }
    KeyWalk walk(p, tile, lane);
    BlockKind kinds[kConsumers];
    int n = walk.next(p, kinds, lane);""", """tile.m_block * kBlockM, tile.h, tile.b);
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
    ("""        __syncwarp();  // every lane's stores ordered before lane 0's arrival (release)
      }""", """        __syncwarp();  // every lane's stores ordered before lane 0's arrival (release)
      }
      pt.add(kPStaged, pt.now() - t0);""", 1),
    ("""    t = __shfl_sync(0xffffffffu, t_next, 0);""", """    pt.stamp(kPEnd);
    t0 = pt.now();
    t = __shfl_sync(0xffffffffu, t_next, 0);
    pt.add(kPClaim, pt.now() - t0);""", 1),
]


def main() -> None:
    src, out = Path(sys.argv[1]), Path(sys.argv[2])
    text = src.read_text()
    for old, new, count in EDITS:
        if text.count(old) != count:
            sys.exit(f"{src}: expected {count} of {old[:60]!r}, found {text.count(old)}")
        text = text.replace(old, new)
    out.write_text(text)


if __name__ == "__main__":
    main()
