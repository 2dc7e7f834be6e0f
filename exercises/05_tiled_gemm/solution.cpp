// Exercise 5, a solution: the loops in (i, k, j) order, in blocks. The innermost loop runs
// along a row of B and of C (contiguous: the compiler vectorises it), and a block of B
// (kBk x kBn floats = 256 KiB) is reused by every row of A while it sits in the cache.
// kiln's own kernel (ops/cpu/sgemm.cpp) goes further: packed panels and a register tile.
#include "exercise.h"
#include <algorithm>

void gemm_fast(int64_t M, int64_t N, int64_t K, const float* A, const float* B, float* C) {
  constexpr int64_t kBk = 128, kBn = 512;
  std::fill(C, C + M * N, 0.f);
  for (int64_t k0 = 0; k0 < K; k0 += kBk)
    for (int64_t j0 = 0; j0 < N; j0 += kBn) {
      const int64_t k1 = std::min(K, k0 + kBk), j1 = std::min(N, j0 + kBn);
      for (int64_t i = 0; i < M; ++i) {
        float* __restrict c = C + i * N;
        for (int64_t k = k0; k < k1; ++k) {
          const float a = A[i * K + k];
          const float* __restrict b = B + k * N;
          for (int64_t j = j0; j < j1; ++j) c[j] += a * b[j];
        }
      }
    }
}
