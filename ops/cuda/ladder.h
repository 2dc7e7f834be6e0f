// The GPU rungs of the kernel ladder (`kiln bench --ladder`, docs/course/06-kernel-ladder.md):
// plain CUDA kernels that compute what cuBLAS and cuDNN compute, slower, so a student can
// see what each step of a tuned kernel buys.
//   GEMM   0 naive  one thread per element of C, every operand read from global memory
//                   (reference::gemm_at, the same function the CPU's reference loops call)
//          1 tiled  a 16 x 16 block computes a 16 x 16 tile of C: each step loads one tile of
//                   A and one of B into shared memory (each element read once per block,
//                   not once per thread) and every thread reuses them 16 times
//          2 cuBLAS kiln::matmul (float32, TF32, bf16 Tensor Cores)
//   conv   0 naive  one thread per output element (reference::conv2d_at)
//          1 cuDNN  kiln::conv2d
// The tiled block's body is a template over the block, as the row kernels' (row_kernels.h):
// tests/cuda/test_cuda_ladder runs it on the CPU in emulated blocks. Host and device code:
// no CUDA header here.
#pragma once
#include <cstdint>
#include "kiln/core/macros.h"
#include "kiln/ops/reference/conv2d.h"

namespace kiln::cuda::ladder {

constexpr int kTile = 16;  // tile edge; a block has kTile * kTile threads

/// Block (bm, bn) of the tiled GEMM: C[bm*16 .. +16][bn*16 .. +16] of row-major
/// C (M, N) = A (M, K) B (K, N). Thread t owns C[bm*16 + t/16][bn*16 + t%16]. As and Bs are
/// the block's two 16 x 16 shared tiles. Elements outside A or B load as 0.
template <class Block>
KILN_HD_INLINE void gemm_tiled_block(const Block& b, float* As, float* Bs, int64_t bm, int64_t bn, int64_t M,
                                     int64_t N, int64_t K, const float* A, const float* B, float* C) {
  const int ty = b.thread() / kTile, tx = b.thread() % kTile;
  const int64_t row = bm * kTile + ty, col = bn * kTile + tx;
  float acc = 0;
  for (int64_t k0 = 0; k0 < K; k0 += kTile) {
    As[ty * kTile + tx] = row < M && k0 + tx < K ? A[row * K + k0 + tx] : 0.0f;  // A[row][k0 + tx]
    Bs[ty * kTile + tx] = k0 + ty < K && col < N ? B[(k0 + ty) * N + col] : 0.0f;  // B[k0 + ty][col]
    b.sync();  // the whole tile is loaded
    for (int kk = 0; kk < kTile; ++kk) acc += As[ty * kTile + kk] * Bs[kk * kTile + tx];
    b.sync();  // everyone is done with it before the next load
  }
  if (row < M && col < N) C[row * N + col] = acc;
}

// ---- launchers on device pointers, current stream (ops/cuda/ladder.cu; a build without
// CUDA throws a kiln::Error saying so)
void gemm_naive(int64_t M, int64_t N, int64_t K, const float* A, const float* B, float* C);
void gemm_tiled(int64_t M, int64_t N, int64_t K, const float* A, const float* B, float* C);
void conv2d_naive(const reference::Conv2dShape& s, const float* x, const float* w, float* y);

}  // namespace kiln::cuda::ladder
