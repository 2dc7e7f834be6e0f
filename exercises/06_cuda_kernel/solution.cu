// Exercise 6, one solution: 256 threads per block (8 warps), enough blocks to give every
// thread one element up to 65535 blocks, and a grid-stride loop for anything beyond.
#include "kernel.cuh"

namespace ex06 {

KILN_HD void saxpy_thread(int64_t t, int64_t stride, int64_t n, float a, const float* x, float* y) {
  for (int64_t i = t; i < n; i += stride) y[i] = a * x[i] + y[i];
}

Launch saxpy_launch(int64_t n) {
  const int threads = 256;
  const int64_t blocks = (n + threads - 1) / threads;
  return {int(blocks < 1 ? 1 : blocks > 65535 ? 65535 : blocks), threads};
}

}  // namespace ex06
