// Matrix products: matmul with batch broadcasting (Eigen GEMM on the CPU, transposes
// folded into the GEMM call) and linear (x W^T + b), and the float32 matmul precision
// switch (TF32 on CUDA).
#pragma once
#include <string>
#include "kiln/core/tensor.h"

namespace kiln {

/// torch.matmul semantics: 1-D x 1-D dot, 2-D x 2-D, and batched with broadcast batch dims.
/// Integer tensors (int64, int32, uint8) multiply on the CPU, wrapping on overflow, as
/// PyTorch's do; bool and integer CUDA tensors are refused (PyTorch has no kernel either).
Tensor matmul(const Tensor& a, const Tensor& b);
/// y = x W^T + b for x (..., in), W (out, in), b (out) or undefined. Integer tensors on the
/// CPU as matmul's.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
/// PyTorch's stricter products, compositions of matmul: mm (2-D x 2-D), bmm (3-D x 3-D, the
/// same batch), addmm / baddbmm: beta * input + alpha * (m1 @ m2) with input broadcast to the
/// product (beta 0 ignores input, NaN included, as PyTorch), outer (1-D x 1-D -> 2-D).
Tensor mm(const Tensor& a, const Tensor& b);
Tensor bmm(const Tensor& a, const Tensor& b);
Tensor addmm(const Tensor& input, const Tensor& m1, const Tensor& m2, double beta = 1.0, double alpha = 1.0);
Tensor baddbmm(const Tensor& input, const Tensor& b1, const Tensor& b2, double beta = 1.0, double alpha = 1.0);
Tensor outer(const Tensor& a, const Tensor& b);
/// The sum of the diagonal of a 2-D tensor.
Tensor trace(const Tensor& x);
/// p-norm distances between the rows of x1 (..., P, M) and x2 (..., R, M): (..., P, R)
/// (torch.cdist, computed directly as vector_norm(x1_i - x2_j), never through the
/// matrix-product shortcut PyTorch takes for p = 2 above 25 rows; its gradient is 0 at a
/// zero distance).
Tensor cdist(const Tensor& x1, const Tensor& x2, double p = 2.0);
/// torch.einsum: "ij,jk->ik", "bij,bjk->bik", "...ij->...ji", "ii->i" (a repeated subscript
/// takes the diagonal), "i,i" (no "->": the output is "..." then the subscripts used once,
/// in alphabetical order, capitals first). Spaces are ignored; dims of size 1 broadcast. The
/// operands are contracted left to right, two at a time, each pair by one batched matmul
/// over the subscripts summed there (PyTorch's order without opt_einsum); subscripts found in
/// one operand only are summed first. Differentiable through its parts.
Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands);
/// Sums a's dims dims_a against b's dims_b (the same sizes): the result has a's other dims,
/// then b's (torch.tensordot). The int form contracts a's last `dims` dims with b's first.
Tensor tensordot(const Tensor& a, const Tensor& b, const std::vector<int64_t>& dims_a,
                 const std::vector<int64_t>& dims_b);
Tensor tensordot(const Tensor& a, const Tensor& b, int64_t dims = 2);
/// The Kronecker product (torch.kron): the lower-rank operand gets leading size-1 dims, and
/// out[i * b.size + j] = a[i] * b[j] in every dim.
Tensor kron(const Tensor& a, const Tensor& b);

/// How float32 matmul/linear may compute on CUDA (torch.set_float32_matmul_precision):
///   "highest": strict float32 GEMMs (the default);
///   "high":    cuBLAS may use TF32 tensor cores (10-bit mantissa inputs, float32
///              accumulation; about 1e-3 relative error);
///   "medium":  accepted for PyTorch compatibility and treated like "high" (kiln has no
///              bfloat16-internal float32 GEMM).
/// Anything else throws kiln::Error listing the valid values. Process-wide; the CPU
/// (Eigen) ignores it. Present in CPU-only builds too.
void set_float32_matmul_precision(const std::string& precision);
/// The current setting: "highest", "high" or "medium".
std::string float32_matmul_precision();
/// True when float32 GEMMs may use TF32 ("high" or "medium"); what the CUDA kernels read.
bool float32_matmul_allows_tf32();

/// torch.linalg's solvers and factorizations (ops/linalg_decomp.cpp) on batches of square
/// matrices (..., n, n), float32 or float64, with PyTorch's gradients written in recorded ops
/// (so twice differentiable). Computed in float64 on the host (Eigen's blocked Cholesky and
/// partial-pivoting LU; float32 inputs rounded once at the end, CUDA tensors through a copy:
/// no cuSOLVER). Failures are kiln::Errors naming the op, the matrix of the batch and the
/// order of the failing minor or the zero pivot, as PyTorch's messages.
namespace linalg {
/// L lower triangular with L L^T = A (A symmetric positive-definite; its lower triangle is
/// read); upper: L^T instead.
Tensor cholesky(const Tensor& A, bool upper = false);
/// X with A X = B (left) or X A = B (right), A triangular (unitriangular: a diagonal of ones,
/// not read). A and B broadcast over their batch dims; the gradient of A keeps its triangle.
Tensor solve_triangular(const Tensor& A, const Tensor& B, bool upper, bool left = true, bool unitriangular = false);
/// X with A X = B (left) or X A = B, by LU. B (..., n, k), or a vector: (n) or A's batch shape
/// + (n) (PyTorch's rule). Batch dims broadcast. A singular A (an exactly zero pivot) is an error.
Tensor solve(const Tensor& A, const Tensor& B, bool left = true);
/// A^-1 (an error for a singular A); the gradient -A^-T g A^-T.
Tensor inv(const Tensor& A);
/// det(A) from A's LU factors; its gradient g det(A) A^-T, or g cofactor(A) where a matrix
/// of the batch is singular (exact there too; PyTorch goes through an SVD).
Tensor det(const Tensor& A);
/// The cofactor matrix C_ij = (-1)^(i+j) det(A without row i and column j) = det(A) A^-T, also
/// for a singular A: the n^2 minors' determinants (O(n^5)), differentiable.
Tensor cofactor(const Tensor& A);
/// sign(det A) and log |det A| (-inf at a singular A), differentiable in logabsdet (A^-T; at a
/// singular A cofactor(A) / 0: +-inf, as PyTorch's).
struct SignLogAbsDet {
  Tensor sign, logabsdet;
};
SignLogAbsDet slogdet(const Tensor& A);
/// log det(A): NaN where det < 0, -inf where det = 0 (torch.logdet).
Tensor logdet(const Tensor& A);
/// The main diagonals of a batch of matrices (..., n, m) -> (..., min(n, m)), differentiable
/// (torch.diagonal(x, 0, -2, -1)).
Tensor diagonal(const Tensor& x);
}  // namespace linalg

}  // namespace kiln
