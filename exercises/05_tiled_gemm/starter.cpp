// Exercise 5 (exercises/05_tiled_gemm/README.md): make this fast.
#include "exercise.h"

void gemm_fast(int64_t M, int64_t N, int64_t K, const float* A, const float* B, float* C) {
  // Your task: reorder and block the loops. As written, the k loop walks B down a column:
  // one cache line per multiply-add, and nothing for the compiler to vectorise.
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      float s = 0;
      for (int64_t k = 0; k < K; ++k) s += A[i * K + k] * B[k * N + j];
      C[i * N + j] = s;
    }
}
