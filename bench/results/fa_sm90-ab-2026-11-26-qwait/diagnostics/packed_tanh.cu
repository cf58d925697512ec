#include <cstdint>
extern "C" __global__ void k(const uint32_t* a, uint32_t* b, const float* f, float* g) {
  uint32_t x = a[threadIdx.x], y, z;
  asm("tanh.approx.f16x2 %0, %1;" : "=r"(y) : "r"(x));
  asm("tanh.approx.bf16x2 %0, %1;" : "=r"(z) : "r"(x));
  b[threadIdx.x] = y ^ z;
  float u = f[threadIdx.x], v;
  asm("tanh.approx.f32 %0, %1;" : "=f"(v) : "f"(u));
  g[threadIdx.x] = v;
}
