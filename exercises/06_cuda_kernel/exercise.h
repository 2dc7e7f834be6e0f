// Exercise 6: a first CUDA kernel, y = a * x + y (saxpy), written so the CPU can check it.
#pragma once
#include <cstdint>
#include "kiln/core/macros.h"  // KILN_HD: __host__ __device__ under nvcc

namespace ex06 {

/// What one CUDA thread of a grid-stride loop does: thread `t` (blockIdx.x * blockDim.x +
/// threadIdx.x) of `stride` threads in all (gridDim.x * blockDim.x) handles elements
/// t, t + stride, t + 2 stride, ... < n, each y[i] = a * x[i] + y[i]. The kernel calls it on
/// the GPU; the test calls it for every thread of an emulated grid on the CPU.
KILN_HD void saxpy_thread(int64_t t, int64_t stride, int64_t n, float a, const float* x, float* y);

/// The launch: blocks and threads per block for n elements.
struct Launch {
  int blocks = 1, threads = 1;
};
Launch saxpy_launch(int64_t n);

/// Runs the kernel on the current GPU over device pointers (a CUDA error throws kiln::Error).
void saxpy_cuda(int64_t n, float a, const float* x, float* y);

}  // namespace ex06
