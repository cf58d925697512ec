// Throughput of MUFU ops on one SM: each thread runs N independent chains.
#include <cstdio>
#include <cuda_runtime.h>
template <int OP>
__global__ void k(float* out, int iters) {
  float a[8];
  for (int i = 0; i < 8; ++i) a[i] = 0.001f * (threadIdx.x + i);
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      if (OP == 0) asm volatile("ex2.approx.ftz.f32 %0, %0;" : "+f"(a[i]));
      if (OP == 1) asm volatile("tanh.approx.f32 %0, %0;" : "+f"(a[i]));
      if (OP == 2) { asm volatile("rcp.approx.ftz.f32 %0, %0;" : "+f"(a[i])); a[i] += 1.f; }
      if (OP == 3) asm volatile("fma.rn.f32 %0, %0, %0, %0;" : "+f"(a[i]));
      if (OP == 4) { asm volatile("ex2.approx.ftz.f32 %0, %0;" : "+f"(a[i])); asm volatile("tanh.approx.f32 %0, %0;" : "+f"(a[i])); }
    }
  }
  float s = 0; for (int i = 0; i < 8; ++i) s += a[i];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
template <int OP> float run(float* out, int blocks, int threads, int iters) {
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  k<OP><<<blocks, threads>>>(out, iters);
  cudaEventRecord(a); k<OP><<<blocks, threads>>>(out, iters); cudaEventRecord(b);
  cudaEventSynchronize(b); float ms; cudaEventElapsedTime(&ms, a, b); return ms;
}
int main() {
  float* out; cudaMalloc(&out, 132 * 1024 * 4 * 8);
  int dev; cudaGetDevice(&dev); int clk; cudaDeviceGetAttribute(&clk, cudaDevAttrClockRate, dev);
  const char* names[] = {"ex2", "tanh", "rcp", "ffma", "ex2+tanh"};
  for (int threads : {256, 512, 1024}) {
    int blocks = 132, iters = 4096;
    float ms[5] = {run<0>(out, blocks, threads, iters), run<1>(out, blocks, threads, iters),
                   run<2>(out, blocks, threads, iters), run<3>(out, blocks, threads, iters),
                   run<4>(out, blocks, threads, iters)};
    for (int o = 0; o < 5; ++o) {
      double ops = double(blocks) * threads * iters * 8 * (o == 4 ? 2 : 1);
      // per SM per clock at the max clock (kHz): ops / (ms * 1e-3) / 132 / (clk * 1e3)
      printf("threads %4d %-9s %.3f ms  %.2f ops/clk/SM (at %d MHz)\n", threads, names[o], ms[o],
             ops / (ms[o] * 1e-3) / 132 / (clk * 1e3), clk / 1000);
    }
  }
}
