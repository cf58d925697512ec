// Both key walks (per block, and EMPTY runs skipped by ranges) over every tile of
// the header gen.py wrote: g++ -std=c++17 -I<repo>/cubridge/kernels/common -I. walk.cpp
#include <cstdio>
#include <cstdint>
#include <vector>
#include <algorithm>
#include "hook_types.cuh"
#include "cubridge_hooks.cuh"
using namespace cubridge;
namespace hooks = cubridge_hooks;
constexpr int kBlockM = 128, kBlockN = 128, kRowsPerConsumer = 64, kConsumers = 2;
struct Walk {
  int lo, n, b, h, q_start, q_end, seqlen_k;
  const AuxArgs* aux;
  bool classify(int k_start, int k_end, BlockKind (&kinds)[kConsumers]) const {
    bool live = false;
    for (int c = 0; c < kConsumers; ++c) {
      const int row0 = q_start + c * kRowsPerConsumer;
      const int row_end = std::min(row0 + kRowsPerConsumer, q_end);
      kinds[c] = row0 < row_end ? hooks::block_kind(b, h, row0, row_end, k_start, k_end, *aux) : BlockKind::Empty;
      live = live || kinds[c] != BlockKind::Empty;
    }
    return live;
  }
  int next_old(BlockKind (&kinds)[kConsumers]) {
    while (--n >= lo) {
      if (classify(n * kBlockN, std::min(n * kBlockN + kBlockN, seqlen_k), kinds)) return n;
    }
    return -1;
  }
  int next_new(BlockKind (&kinds)[kConsumers], long& calls) {
    int empty_run = 0;
    while (--n >= lo) {
      ++calls;
      if (classify(n * kBlockN, std::min(n * kBlockN + kBlockN, seqlen_k), kinds)) return n;
      if (++empty_run < 2) continue;
      for (int span = 2; n > lo; span *= 2) {
        const int start = std::max(lo, n - span);
        BlockKind run[kConsumers];
        ++calls;
        if (classify(start * kBlockN, n * kBlockN, run)) break;
        n = start;
      }
    }
    return -1;
  }
};
int main(int argc, char** argv) {
  const int S = atoi(argv[1]), B = atoi(argv[2]);
  FILE* f = fopen("aux.bin", "rb");
  int64_t num; fread(&num, 8, 1, f);
  AuxArgs aux{};
  aux.num = (int)num; aux.seqlen_q = S; aux.seqlen_k = S;
  std::vector<std::vector<char>> bufs(num);
  for (int i = 0; i < num; ++i) {
    int64_t hdr[10]; fread(hdr, 8, 10, f);
    bufs[i].resize(hdr[1]); fread(bufs[i].data(), 1, hdr[1], f);
    aux.t[i].data = bufs[i].data();
    for (int d = 0; d < 4; ++d) { aux.t[i].size[d] = hdr[2 + d]; aux.t[i].stride[d] = hdr[6 + d]; }
  }
  const int num_kv = (S + kBlockN - 1) / kBlockN;
  long mism = 0, old_calls = 0, new_calls = 0, tiles = 0;
  for (int b = 0; b < B; ++b) for (int h = 0; h < 1; ++h) for (int m = 0; m < S / kBlockM; ++m) {
    Walk w{}; w.b = b; w.h = h; w.q_start = m * kBlockM; w.q_end = std::min(w.q_start + kBlockM, S); w.seqlen_k = S; w.aux = &aux;
    KvRange r = hooks::kv_block_range(b, h, w.q_start, w.q_end, kBlockN, num_kv, aux);
    w.lo = std::max(r.lo, 0); w.n = std::min(r.hi, num_kv);
    Walk a = w, c = w;
    std::vector<int> va, vc; BlockKind ka[kConsumers], kc[kConsumers];
    for (int x; (x = a.next_old(ka)) >= 0;) { va.push_back(x * 16 + (int)ka[0] * 4 + (int)ka[1]); old_calls++; }
    old_calls += (w.n - w.lo);
    for (int x; (x = c.next_new(kc, new_calls)) >= 0;) vc.push_back(x * 16 + (int)kc[0] * 4 + (int)kc[1]);
    ++tiles;
    if (va != vc) { if (mism < 5) { printf("b %d m %d: old", b, m); for (int v : va) printf(" %d", v / 16); printf(" | new"); for (int v : vc) printf(" %d", v / 16); printf("\n"); } ++mism; }
  }
  printf("tiles %ld mismatches %ld classify calls per tile: per-block walk %.1f, runs skipped %.1f\n", tiles, mism, (double)(old_calls) / tiles, (double)new_calls / tiles);
}
