// CUDA runtime queries for a build with the CUDA backend, and a one-kernel probe that
// proves a device can run code. No kernels are registered for ops here.
#include <cuda_runtime.h>
#include "core/cuda.h"
#include "core/error.h"

namespace kiln::cuda {
namespace {

// ---- kernels ----
__global__ void probe_kernel(int* out, int value) { *out = value; }

}  // namespace

// ---- launchers ----
int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

bool is_available() { return device_count() > 0; }

int probe(int value) {
  KILN_CHECK(is_available(), "cuda::probe: no CUDA device is available");
  int* d = nullptr;
  cudaError_t e = cudaMalloc(&d, sizeof(int));
  KILN_CHECK(e == cudaSuccess, "cudaMalloc failed in cuda::probe: ", cudaGetErrorString(e));
  probe_kernel<<<1, 1>>>(d, value);
  e = cudaGetLastError();
  int h = 0;
  if (e == cudaSuccess) e = cudaMemcpy(&h, d, sizeof(int), cudaMemcpyDeviceToHost);
  cudaFree(d);
  KILN_CHECK(e == cudaSuccess, "cuda::probe: kernel launch or copy failed: ", cudaGetErrorString(e));
  return h;
}

}  // namespace kiln::cuda
