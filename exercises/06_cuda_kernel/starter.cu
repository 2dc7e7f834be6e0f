// Exercise 6, your file: see README.md.
#include "kernel.cuh"

namespace ex06 {

KILN_HD void saxpy_thread(int64_t t, int64_t stride, int64_t n, float a, const float* x, float* y) {
  // Your task: the grid-stride loop, y[i] = a * x[i] + y[i] for i = t, t + stride, ... < n.
  (void)t, (void)stride, (void)n, (void)a, (void)x, (void)y;
}

Launch saxpy_launch(int64_t n) {
  // Your task: enough threads to keep a GPU busy (a multiple of the 32-thread warp, at most
  // 1024 per block) and a number of blocks for n elements (the loop covers the rest).
  (void)n;
  return {1, 1};
}

}  // namespace ex06
