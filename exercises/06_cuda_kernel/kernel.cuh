// The kernel and its launcher, shared by starter.cu and solution.cu (nvcc only): the
// exercise is saxpy_thread and saxpy_launch; this part is given.
#pragma once
#include <cuda_runtime.h>
#include "kiln/core/cuda/check.h"
#include "exercise.h"

namespace ex06 {

__global__ void saxpy_kernel(int64_t n, float a, const float* x, float* y) {
  saxpy_thread(int64_t(blockIdx.x) * blockDim.x + threadIdx.x, int64_t(gridDim.x) * blockDim.x, n, a, x, y);
}

void saxpy_cuda(int64_t n, float a, const float* x, float* y) {
  const Launch l = saxpy_launch(n);
  saxpy_kernel<<<l.blocks, l.threads>>>(n, a, x, y);  // the legacy default stream: ordered with kiln's
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace ex06
