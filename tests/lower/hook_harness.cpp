// Host test program for a generated cubridge_hooks.cuh: evaluates every hook
// over a grid and writes the results, so tests compare them with torch.
// Compiled with nvcc (-x cu: the hooks are then __host__ __device__ and the
// probe kernel below checks that they compile for the device too) or g++.
//
// usage: harness IN OUT block_m block_n
// IN:  int32 B, H, Sq, Sk, num_aux; per aux: int32 elem_bytes, rank, sizes[rank],
//      then its contiguous data; then float32 scores[B][H][Sq][Sk].
// OUT: float32 score_mod[B][H][Sq][Sk], uint8 mask_mod[B][H][Sq][Sk],
//      uint8 block_kind[B][H][nq][nk], int32 kv_block_range[B][H][nq][2],
//      then float32 activation(x) for x in scores[0][0][0][:].
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cubridge_hooks.cuh"

#if defined(__CUDACC__)
__global__ void probe(cubridge::AuxArgs aux, float* out) {
  using namespace cubridge_hooks;
  const int q = threadIdx.x, k = threadIdx.y;
  float s = score_mod(out[0], 0, 0, q, k, aux) + activation(out[1]);
  s += mask_mod(0, 0, q, k, aux) ? 1.0f : 0.0f;
  s += static_cast<float>(block_kind(0, 0, 0, 64, 0, 64, aux));
  s += static_cast<float>(kv_block_range(0, 0, 0, 64, 64, 4, aux).hi);
  out[q * 64 + k] = s;
}
#endif

static int read_i32(FILE* f) {
  int v;
  if (fread(&v, sizeof v, 1, f) != 1) {
    fprintf(stderr, "short input\n");
    exit(2);
  }
  return v;
}

int main(int argc, char** argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: %s IN OUT block_m block_n\n", argv[0]);
    return 2;
  }
  FILE* in = fopen(argv[1], "rb");
  const int bm = atoi(argv[3]), bn = atoi(argv[4]);
  const int B = read_i32(in), H = read_i32(in), Sq = read_i32(in), Sk = read_i32(in);
  cubridge::AuxArgs aux{};
  aux.num = read_i32(in);
  aux.seqlen_q = Sq;
  aux.seqlen_k = Sk;
  std::vector<std::vector<char>> storage(aux.num);
  for (int i = 0; i < aux.num; ++i) {
    const int elem = read_i32(in), rank = read_i32(in);
    long long count = 1;
    for (int d = 0; d < rank; ++d) {
      aux.t[i].size[d] = read_i32(in);
      count *= aux.t[i].size[d];
    }
    long long stride = 1;  // contiguous, row-major
    for (int d = rank - 1; d >= 0; --d) {
      aux.t[i].stride[d] = stride;
      stride *= aux.t[i].size[d];
    }
    storage[i].resize(count * elem + 1);
    if (fread(storage[i].data(), elem, count, in) != static_cast<size_t>(count)) return 3;
    aux.t[i].data = storage[i].data();
  }
  std::vector<float> scores(static_cast<size_t>(B) * H * Sq * Sk);
  if (fread(scores.data(), sizeof(float), scores.size(), in) != scores.size()) return 3;
  fclose(in);

  using namespace cubridge_hooks;
  FILE* out = fopen(argv[2], "wb");
  std::vector<float> sm(scores.size());
  std::vector<unsigned char> mm(scores.size());
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int q = 0; q < Sq; ++q)
        for (int k = 0; k < Sk; ++k) {
          const size_t i = ((static_cast<size_t>(b) * H + h) * Sq + q) * Sk + k;
          sm[i] = score_mod(scores[i], b, h, q, k, aux);
          mm[i] = mask_mod(b, h, q, k, aux) ? 1 : 0;
        }
  fwrite(sm.data(), sizeof(float), sm.size(), out);
  fwrite(mm.data(), 1, mm.size(), out);
  const int nq = (Sq + bm - 1) / bm, nk = (Sk + bn - 1) / bn;
  std::vector<unsigned char> kinds;
  std::vector<int> ranges;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < nq; ++i) {
        // tile ends past the sequence, as a kernel passes them
        for (int j = 0; j < nk; ++j)
          kinds.push_back(static_cast<unsigned char>(
              block_kind(b, h, i * bm, (i + 1) * bm, j * bn, (j + 1) * bn, aux)));
        const cubridge::KvRange r = kv_block_range(b, h, i * bm, (i + 1) * bm, bn, nk, aux);
        ranges.push_back(r.lo);
        ranges.push_back(r.hi);
      }
  fwrite(kinds.data(), 1, kinds.size(), out);
  fwrite(ranges.data(), sizeof(int), ranges.size(), out);
  for (int k = 0; k < Sk; ++k) {
    const float a = activation(scores[k]);
    fwrite(&a, sizeof(float), 1, out);
  }
  fclose(out);
  return 0;
}
