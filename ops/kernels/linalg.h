// Kernel types of the linalg op family (matmul, linear) and the CPU GEMM they share with
// the conv kernels. Row-major BLAS conventions; kernels take raw pointers, never Tensors.
// Eigen stays inside ops/cpu/linalg.cpp and ops/cpu/linalg_decomp.cpp: this header declares,
// it does not include Eigen.
#pragma once
#include <cstdint>
#include "kiln/core/dtype.h"

namespace kiln {

/// Batched GEMM, the kernel registered for Op::matmul. For b in [0, batch):
///   C[c_off[b]] (M, N) = alpha * op(A[a_off[b]]) (M, K) @ op(B[b_off[b]]) (K, N) + beta * C
/// Row-major: op(A) = A (M, K) with row stride lda when !trans_a, else A is stored (K, M)
/// with row stride lda and read transposed (no copy). Same for B. Offsets are host arrays
/// of `batch` element offsets; they may repeat for A and B (broadcast batch dims); C blocks
/// must not overlap.
/// dtype is float32 or float64; alpha and beta are converted to it. On the CPU it may also
/// be float16 or bfloat16 where sgemm_packed_available() (ops/linalg.cpp passes them there):
/// A, B and C 16-bit, every product summed in float32 and C rounded once (alpha 1, beta 0);
/// bf16 multiplies in bf16 where sgemm_bf16_preferred(), else widens each packed panel.
using MatmulKernel = void(DType dtype, bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N,
                          int64_t K, double alpha, const void* A, int64_t lda, const int64_t* a_off,
                          const void* B, int64_t ldb, const int64_t* b_off, double beta, void* C,
                          int64_t ldc, const int64_t* c_off);

/// Op::linear's forward kernel: y (M, O) = x (M, I) @ W^T + bias, where x has row
/// stride ldx, W is (O, I) contiguous (read transposed, no copy) and bias (O) may be null.
/// y is contiguous. float16 / bfloat16 on the CPU as for MatmulKernel (the bias added in float32).
using LinearKernel = void(DType dtype, int64_t M, int64_t O, int64_t I, const void* x, int64_t ldx,
                          const void* w, const void* bias, void* y);

/// linear_gelu's fused forward, as LinearKernel but writing pre = x W^T + bias (M, O) and
/// y = gelu_tanh(pre) in one pass (cuBLASLt's GELU_AUX_BIAS epilogue); pre is null when no
/// backward will read it (only y is written: GELU_BIAS). Returns false where it cannot run
/// the case (the op then runs `forward` into pre and the gelu_tanh kernel into y).
using LinearGeluKernel = bool(DType dtype, int64_t M, int64_t O, int64_t I, const void* x, int64_t ldx,
                              const void* w, const void* bias, void* pre, void* y);

/// linear's weight and bias gradients in one GEMM (cuBLASLt's BGRADB epilogue): dw (O, I) =
/// g^T x and db (O) = the column sums of g (M, O), g contiguous, x (M, I) with row stride ldx.
/// Returns false where it cannot run the case (the op then runs a GEMM and a sum).
using LinearWeightGradKernel = bool(DType dtype, int64_t M, int64_t O, int64_t I, const void* g, const void* x,
                                    int64_t ldx, void* dw, void* db);

/// The kernels registered for Op::linear. `forward` is required; the two fused ones are
/// optional (null on the CPU, whose GEMM has no such epilogues): linear and linear_gelu give
/// the same values either way, from one tape node.
struct LinearKernels {
  LinearKernel* forward = nullptr;
  LinearGeluKernel* forward_gelu = nullptr;
  LinearWeightGradKernel* weight_grad_bias = nullptr;
};

/// Single row-major GEMM (instantiated for float and double):
/// C (M, N) = alpha * op(A) @ op(B) + beta * C [+ bias (N values) on every row]. float
/// runs sgemm_packed (ops/cpu/sgemm.h) when the build has AVX-512 or AVX2, everything else Eigen,
/// transposes folded into Eigen::Map's storage order. Multi-threaded unless called inside
/// a parallel region.
template <class T>
void gemm_cpu(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
              const T* B, int64_t ldb, T beta, T* C, int64_t ldc, const T* bias = nullptr);

/// gemm_cpu with B's stored rows found through a table: row r (r < K when !trans_b,
/// r < N when trans_b) starts at B + b_rows[r], so a convolution's im2col matrix is read
/// where its rows already lie (its input plane at each tap's offset). float with the
/// packed kernel reads them in place; otherwise they are gathered first.
template <class T>
void gemm_rows_cpu(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
                   const T* B, const int64_t* b_rows, T beta, T* C, int64_t ldc);

/// Makes Eigen's GEMM use kiln::get_num_threads() threads (call outside parallel regions).
void sync_eigen_threads();

// ---- dense factorizations (ops/cpu/linalg_decomp.cpp, Eigen), float64 on the host: one
// n x n row-major matrix per call; the torch.linalg ops (ops/linalg_decomp.cpp) loop them over
// a batch, through a host copy on any device.

/// L (lower, zeros above) with L L^T = A, reading A's lower triangle only (LAPACK's potrf).
/// Returns 0, or k > 0: the leading minor of order k is not positive-definite (L undefined).
int64_t cholesky_f64(const double* a, double* l, int64_t n);
/// X (n, k) with A X = B by LU with partial pivoting. Returns 0, or i > 0: U's i-th diagonal
/// element is exactly zero (A singular; X undefined).
int64_t lu_solve_f64(const double* a, const double* b, double* x, int64_t n, int64_t k);
/// det(A) as a sign (-1, 0 or 1) and log |det(A)| from A's LU factors (-inf when singular),
/// and the plain product of U's diagonal times the permutation's sign in *det.
void lu_det_f64(const double* a, int64_t n, double* sign, double* logabsdet, double* det);
/// X with op(A) X = B (left, X and B (n, k)) or X op(A) = B (right, X and B (k, n)), A
/// triangular (upper or lower; unit: its diagonal read as ones). Zeros on A's diagonal give
/// inf / NaN, as LAPACK's trtrs without its check.
void triangular_solve_f64(const double* a, const double* b, double* x, int64_t n, int64_t k, bool upper, bool left,
                          bool unit);

// ---- spectral and orthogonal factorizations (ops/cpu/linalg_spectral.cpp, Eigen), float64,
// one row-major matrix per call, for torch.linalg's eigh, svd, qr, lstsq and matrix_exp.

/// Eigenvalues w (n, ascending) and orthonormal eigenvectors v (n x n, column j for w[j]) of
/// the symmetric matrix whose lower (or upper) triangle a holds (LAPACK's syevd; the other
/// triangle is not read). Returns 0, or 1 where the iteration did not converge.
int64_t eigh_f64(const double* a, double* w, double* v, int64_t n, bool upper);
/// A (m x n) = U diag(s) Vt with k = min(m, n) singular values s, descending and >= 0
/// (divide and conquer, LAPACK's gesdd): full: U (m x m) and Vt (n x n), else U (m x k) and
/// Vt (k x n). u and vt may both be null (values only). Returns 0, or 1 without convergence.
int64_t svd_f64(const double* a, int64_t m, int64_t n, double* s, double* u, double* vt, bool full);
/// A (m x n) = Q R by Householder reflections with LAPACK's signs (geqrf + orgqr): complete: Q
/// (m x m), R (m x n), else Q (m x k), R (k x n), k = min(m, n); q may be null (R only).
void qr_f64(const double* a, int64_t m, int64_t n, double* q, double* r, bool complete);
/// LAPACK's getrf (partial pivoting, unblocked, as dgetrf2 on a column: the multipliers
/// scaled by the pivot's reciprocal): a (m x n) is overwritten by L (unit, below the
/// diagonal) and U (on and above it) with P A = L U; piv (min(m, n)) the 1-based row each
/// step swapped in (j + 1 throughout when pivot is false: A = L U). Returns 0, or j + 1 for
/// the first zero pivot U(j, j) (not an error).
int64_t getrf_f64(double* a, int64_t m, int64_t n, int32_t* piv, bool pivot = true);
/// LAPACK's geqrf: R on and above the diagonal of packed (m x n), the Householder vectors v_i
/// (v_i[i] = 1 implied) below it, and tau (min(m, n)): A = H_0 ... H_{k-1} R, H_i = I - tau_i v_i v_i^T.
void geqrf_f64(const double* a, int64_t m, int64_t n, double* packed, double* tau);
/// The least-squares solution X (n x k) of min |A X - B| (A m x n, B m x k) of minimum norm,
/// by a complete orthogonal decomposition with column pivoting (LAPACK's gelsy): singular
/// values estimated below rcond times the largest count as zero. Returns A's numerical rank.
int64_t lstsq_f64(const double* a, const double* b, double* x, int64_t m, int64_t n, int64_t k, double rcond);
/// exp(A) of an n x n matrix (Pade approximants with scaling and squaring, Higham 2005).
void matrix_exp_f64(const double* a, double* out, int64_t n);

}  // namespace kiln
