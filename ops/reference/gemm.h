// The reference GEMM: the definition of a matrix product as three loops, nothing else.
// Step 0 of the reading order (docs/architecture.md): read this before ops/cpu/sgemm.cpp,
// whose packing, blocking and register tiles compute exactly this, about a hundred times
// faster. Also the oracle of the GEMM tests and rung 0 of `kiln bench --ladder`.
#pragma once
#include <cstdint>
#include "kiln/core/macros.h"

namespace kiln::reference {

/// One element of the product below, C[i][j] = sum over k of op(A)[i][k] op(B)[k][j],
/// summed in Acc. Host and device code: the GPU ladder's naive kernel (ops/cuda/ladder.cu)
/// gives one thread one element and calls this with Acc = float.
template <class Acc, class T>
KILN_HD_INLINE Acc gemm_at(bool trans_a, bool trans_b, int64_t i, int64_t j, int64_t K, const T* A, int64_t lda,
                           const T* B, int64_t ldb) {
  Acc s = 0;
  for (int64_t k = 0; k < K; ++k) {
    const Acc a = Acc(trans_a ? A[k * lda + i] : A[i * lda + k]);
    const Acc b = Acc(trans_b ? B[j * ldb + k] : B[k * ldb + j]);
    s += a * b;
  }
  return s;
}

/// Row-major C (M, N) = op(A) (M, K) @ op(B) (K, N). op(A) = A (stored M x K, row stride
/// lda), or A stored K x M and read transposed when trans_a; the same for B. Sums in
/// double whatever T is, so it is also the float64 oracle of float32 kernels.
template <class T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B,
          int64_t ldb, T* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = T(gemm_at<double>(trans_a, trans_b, i, j, K, A, lda, B, ldb));
}

}  // namespace kiln::reference
