// The GPU rungs of the kernel ladder (ops/cuda/ladder.h): the naive GEMM and convolution
// (one thread per output element) and the shared-memory tiled GEMM.
#include "kiln/core/cuda/check.h"
#include "kiln/core/error.h"
#include "kiln/core/cuda/index_math.h"
#include "kiln/core/cuda/runtime.h"
#include "kiln/ops/cuda/ladder.h"
#include "kiln/ops/cuda/shape_cuda.h"
#include "kiln/ops/reference/gemm.h"

namespace kiln::cuda::ladder {
namespace {

struct TiledBlock {  // ladder.h's block interface on the GPU
  __device__ int thread() const { return int(threadIdx.x); }
  __device__ void sync() const { __syncthreads(); }
};

__global__ void gemm_naive_kernel(int64_t M, int64_t N, int64_t K, const float* A, const float* B, float* C) {
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < M * N; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e / N, j = e - i * N;
    C[e] = reference::gemm_at<float>(false, false, i, j, K, A, K, B, N);
  }
}

__global__ void __launch_bounds__(kTile * kTile) gemm_tiled_kernel(int64_t M, int64_t N, int64_t K, const float* A,
                                                                   const float* B, float* C) {
  __shared__ float As[kTile * kTile], Bs[kTile * kTile];
  gemm_tiled_block(TiledBlock{}, As, Bs, int64_t(blockIdx.y), int64_t(blockIdx.x), M, N, K, A, B, C);
}

__global__ void conv2d_naive_kernel(reference::Conv2dShape s, const float* x, const float* w, float* y) {
  const int64_t OH = s.out_h(), OW = s.out_w(), total = s.N * s.O * OH * OW;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ow = e % OW, oh = (e / OW) % OH, o = (e / (OW * OH)) % s.O, n = e / (OW * OH * s.O);
    y[e] = reference::conv2d_at<float>(s, x, w, static_cast<const float*>(nullptr), n, o, oh, ow);
  }
}

}  // namespace

void gemm_naive(int64_t M, int64_t N, int64_t K, const float* A, const float* B, float* C) {
  if (M * N == 0) return;
  gemm_naive_kernel<<<grid_for(M * N), kLoopBlock, 0, current_raw_stream()>>>(M, N, K, A, B, C);
  KILN_CUDA_CHECK_LAUNCH();
}

void gemm_tiled(int64_t M, int64_t N, int64_t K, const float* A, const float* B, float* C) {
  if (M * N == 0) return;
  KILN_CHECK((M + kTile - 1) / kTile <= 65535, "gemm_tiled: M = ", M, " needs more than 65535 row blocks");
  const dim3 grid(unsigned((N + kTile - 1) / kTile), unsigned((M + kTile - 1) / kTile));
  gemm_tiled_kernel<<<grid, kTile * kTile, 0, current_raw_stream()>>>(M, N, K, A, B, C);
  KILN_CUDA_CHECK_LAUNCH();
}

void conv2d_naive(const reference::Conv2dShape& s, const float* x, const float* w, float* y) {
  const int64_t total = s.N * s.O * s.out_h() * s.out_w();
  if (total == 0) return;
  conv2d_naive_kernel<<<grid_for(total), kLoopBlock, 0, current_raw_stream()>>>(s, x, w, y);
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace kiln::cuda::ladder
