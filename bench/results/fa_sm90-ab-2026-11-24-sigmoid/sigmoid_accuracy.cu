// Accuracy of sigmoid forms on the device against double precision, over x in [-30, 30].
#include <cstdio>
#include <cmath>
__device__ float tanh_approx(float x) { float y; asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x)); return y; }
__global__ void eval(const float* x, float* a, float* b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  a[i] = __fdividef(1.0f, 1.0f + __expf(-x[i]));
  b[i] = fmaf(0.5f, tanh_approx(0.5f * x[i]), 0.5f);
}
int main() {
  const int n = 6000001;
  float *x, *a, *b;
  cudaMallocManaged(&x, n * 4); cudaMallocManaged(&a, n * 4); cudaMallocManaged(&b, n * 4);
  for (int i = 0; i < n; ++i) x[i] = -30.0f + 60.0f * i / (n - 1);
  eval<<<(n + 255) / 256, 256>>>(x, a, b, n);
  cudaDeviceSynchronize();
  const float bands[4][2] = {{-30, 30}, {-30, -8}, {-8, -2}, {-2, 30}};
  for (auto& band : bands) {
    double ea = 0, eb = 0, ra = 0, rb = 0, ba = 0, bb = 0; int m = 0;
    for (int i = 0; i < n; ++i) {
      if (x[i] < band[0] || x[i] > band[1]) continue;
      double t = 1.0 / (1.0 + exp(-(double)x[i]));
      ea = fmax(ea, fabs(a[i] - t)); eb = fmax(eb, fabs(b[i] - t));
      ra = fmax(ra, fabs(a[i] - t) / t); rb = fmax(rb, fabs(b[i] - t) / t);
      ba += a[i] - t; bb += b[i] - t; ++m;
    }
    printf("x in [%g, %g]: exp+div abs %.3g rel %.3g mean err %.3g | tanh abs %.3g rel %.3g mean err %.3g\n",
           band[0], band[1], ea, ra, ba / m, eb, rb, bb / m);
  }
}
