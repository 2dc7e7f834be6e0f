// Row-major GEMMs on column-major cuBLAS, as host code: ops/cuda/linalg.cu (matmul,
// linear) and ops/cuda/nn.cu (attention) build their cuBLAS / cuBLASLt calls from these,
// and tests/cuda/test_cuda_gemm_map.cpp runs the same mappings through a naive
// column-major GEMM on the CPU, so the operand swap, transposes, leading dimensions and
// batch strides are tested without a GPU.
//
// The idea: a row-major matrix read as column-major is its transpose. So row-major
// C (M, N) = op(A) op(B) is column-major C^T (N, M) = op(B)^T op(A)^T: the same buffers
// with the operands swapped, no copies, and an operand stored untransposed (row-major)
// takes op = N.
#pragma once
#include <cstdint>

namespace kiln::cuda {

/// Row-major C (M, N) = alpha op(A) op(B) + beta C, for `batch` matrices: A is stored
/// (M, K), or (K, M) when ta, with rows of lda elements and sa elements between batch
/// entries; likewise B ((K, N) or, when tb, (N, K)) and C.
struct RowMajorGemm {
  bool ta = false, tb = false;
  int64_t M = 0, N = 0, K = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t sa = 0, sb = 0, sc = 0;
  int64_t batch = 1;
};

/// The same product as one column-major call (cublas<t>gemm, cublas<t>gemmStridedBatched,
/// cublasGemm[StridedBatched]Ex): C^T (m x n) = op(first) op(second) with first = B's
/// buffer and second = A's.
struct ColMajorGemm {
  bool trans_first = false, trans_second = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t ld_first = 0, ld_second = 0, ldc = 0;
  int64_t stride_first = 0, stride_second = 0, stride_c = 0;
  int64_t batch = 1;
};

inline ColMajorGemm to_col_major(const RowMajorGemm& g) {
  return {g.tb, g.ta, g.N, g.M, g.K, g.ldb, g.lda, g.ldc, g.sb, g.sa, g.sc, g.batch};
}

/// A cuBLASLt matrix layout: column-major rows x cols as stored (before the transpose of
/// the matmul descriptor), leading dimension, batch stride.
struct LtLayout {
  int64_t rows = 0, cols = 0, ld = 0, stride = 0;
};
/// The layouts of to_col_major(g) for cublasLtMatmul: its A (B's buffer), its B (A's
/// buffer) and C; the descriptor's TRANSA / TRANSB are trans_first / trans_second.
struct LtGemmLayouts {
  LtLayout first, second, c;
};
inline LtGemmLayouts to_lt_layouts(const RowMajorGemm& g) {
  return {{g.tb ? g.K : g.N, g.tb ? g.N : g.K, g.ldb, g.sb},
          {g.ta ? g.M : g.K, g.ta ? g.K : g.M, g.lda, g.sa},
          {g.N, g.M, g.ldc, g.sc}};
}

/// The stride s when off[b] = off[0] + b * s for every b (s may be 0: a broadcast operand),
/// i.e. when a batch of matrices at offsets `off` can be one strided-batched call.
inline bool evenly_spaced(const int64_t* off, int64_t n, int64_t& s) {
  s = n > 1 ? off[1] - off[0] : 0;
  for (int64_t b = 2; b < n; ++b)
    if (off[b] - off[b - 1] != s) return false;
  return true;
}

// The GEMMs of linear (ops/cuda/linalg.cu) for x (M, I) with row stride ldx, W (O, I),
// g = dL/dy (M, O) contiguous. With cuBLASLt's operands (A = the first, B = the second of
// to_col_major) the output C^T is (O, M) for the forward and (I, O) for the weight gradient:
// the forward's bias and GELU epilogues act on C^T's rows (one per output feature), and the
// weight gradient's BGRADB epilogue sums cuBLASLt's B = op(g's buffer), (M, O), over k = M:
// one sum per column of C^T, i.e. per output feature, db = sum over rows of g.
/// y = x W^T (+ bias, GELU)
inline RowMajorGemm linear_forward(int64_t M, int64_t O, int64_t I, int64_t ldx) {
  return {false, true, M, O, I, ldx, I > 0 ? I : 1, O, 0, 0, 0, 1};
}
/// dW = g^T x (+ db = the column sums of g, BGRADB)
inline RowMajorGemm linear_weight_grad(int64_t M, int64_t O, int64_t I, int64_t ldx) {
  return {true, false, O, I, M, O, ldx, I, 0, 0, 0, 1};
}

// The GEMMs of attention (ops/cuda/nn.cu) over B contiguous batch entries of
// q (Tq, E), k (Tk, E), v (Tk, Ev), scores / probabilities p (Tq, Tk), out and dO (Tq, Ev).
/// s = q k^T (forward and backward)
inline RowMajorGemm attention_scores(int64_t B, int64_t Tq, int64_t Tk, int64_t E) {
  return {false, true, Tq, Tk, E, E, E, Tk, Tq * E, Tk * E, Tq * Tk, B};
}
/// out = p v
inline RowMajorGemm attention_output(int64_t B, int64_t Tq, int64_t Tk, int64_t Ev) {
  return {false, false, Tq, Ev, Tk, Tk, Ev, Ev, Tq * Tk, Tk * Ev, Tq * Ev, B};
}
/// dv = p^T dO
inline RowMajorGemm attention_dv(int64_t B, int64_t Tq, int64_t Tk, int64_t Ev) {
  return {true, false, Tk, Ev, Tq, Tk, Ev, Ev, Tq * Tk, Tq * Ev, Tk * Ev, B};
}
/// dp = dO v^T
inline RowMajorGemm attention_dp(int64_t B, int64_t Tq, int64_t Tk, int64_t Ev) {
  return {false, true, Tq, Tk, Ev, Ev, Ev, Tk, Tq * Ev, Tk * Ev, Tq * Tk, B};
}
/// dq = ds k
inline RowMajorGemm attention_dq(int64_t B, int64_t Tq, int64_t Tk, int64_t E) {
  return {false, false, Tq, E, Tk, Tk, E, E, Tq * Tk, Tk * E, Tq * E, B};
}
/// dk = ds^T q
inline RowMajorGemm attention_dk(int64_t B, int64_t Tq, int64_t Tk, int64_t E) {
  return {true, false, Tk, E, Tq, Tk, E, E, Tq * Tk, Tq * E, Tk * E, B};
}

}  // namespace kiln::cuda
