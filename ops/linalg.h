// Matrix products: matmul with batch broadcasting (Eigen GEMM on the CPU, transposes
// folded into the GEMM call), linear (x W^T + b) and linear_gelu, and the float32 matmul precision
// switch (TF32 on CUDA).
#pragma once
#include <optional>
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
/// gelu(linear(x, W, b), GeluApprox::tanh) as one op (Sequential{Linear, GELU(tanh)}, the
/// GPT's MLP; PyTorch's torch._addmm_activation(b, x, W.t(), use_gelu=True)), floating dtypes.
/// On CUDA in float16/bfloat16 the GELU runs in the GEMM's epilogue (cuBLASLt's
/// GELU_AUX_BIAS), which also writes the pre-activation the backward reads; elsewhere the
/// linear and gelu_tanh kernels run one after the other, with the same values as the two
/// ops (bit for bit on the CPU). Either way one tape node, holding what the two would.
Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
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
/// torch.linalg's spectral and orthogonal factorizations (ops/linalg_spectral.cpp), float32 or
/// float64 batches (..., m, n), computed as the solvers above: float64 on a host copy (Eigen:
/// a symmetric QL eigensolver, divide-and-conquer SVD, Householder QR with LAPACK's signs). The
/// gradients are PyTorch's formulas in recorded ops (twice differentiable). Eigenvectors and
/// singular vectors are unique only up to sign (LAPACK and Eigen may pick different ones); so
/// are their gradients' meanings: differentiate quantities that do not depend on the sign
/// (PyTorch's advice too). Their gradients divide by differences of eigenvalues (squared
/// singular values): inf or NaN where those repeat, unless only the values were used.

/// Eigenvalues (ascending) and orthonormal eigenvectors (columns) of symmetric matrices,
/// reading the lower triangle (upper: the upper one), as torch.linalg.eigh(A, UPLO).
struct Eigh {
  Tensor eigenvalues, eigenvectors;
};
Eigh eigh(const Tensor& A, bool upper = false);
/// The eigenvalues alone (torch.linalg.eigvalsh); its gradient V diag(g) V^T.
Tensor eigvalsh(const Tensor& A, bool upper = false);
/// A = U diag(S) Vh, S descending (k = min(m, n) values): full_matrices U (m, m) and Vh (n, n),
/// else U (m, k) and Vh (k, n). With full_matrices only the first k columns of U (rows of Vh)
/// enter the gradient (PyTorch's rule).
struct SVD {
  Tensor U, S, Vh;
};
SVD svd(const Tensor& A, bool full_matrices = true);
/// The singular values alone (torch.linalg.svdvals); its gradient U diag(g) Vh.
Tensor svdvals(const Tensor& A);
/// A = Q R with Q's columns orthonormal and R upper triangular, R's diagonal signs as LAPACK's
/// geqrf (so equal to PyTorch's). mode "reduced": Q (m, k), R (k, n); "complete": Q (m, m),
/// R (m, n); "r": R only (Q undefined; not differentiable, as PyTorch). "complete" with m > n
/// is not differentiable either (an error when A requires grad).
struct QR {
  Tensor Q, R;
};
QR qr(const Tensor& A, const std::string& mode = "reduced");
/// The Moore-Penrose pseudo-inverse (n, m) from the SVD (hermitian: the eigendecomposition of
/// a symmetric A), singular values at most max(atol, rtol * the largest) counted as zero.
/// PyTorch's defaults: atol 0; rtol eps(dtype) * max(m, n), or 0 when only atol > 0 is given.
Tensor pinv(const Tensor& A, std::optional<double> atol = std::nullopt, std::optional<double> rtol = std::nullopt,
            bool hermitian = false);
/// The number of singular values (|eigenvalues| when hermitian) above pinv's tolerance, int64.
Tensor matrix_rank(const Tensor& A, std::optional<double> atol = std::nullopt,
                   std::optional<double> rtol = std::nullopt, bool hermitian = false);
/// The minimum-norm least-squares solution X of min |A X - B| (A (..., m, n), B (..., m, k) or
/// a vector as solve's; batch dims broadcast) by a complete orthogonal decomposition with
/// column pivoting (LAPACK's gelsy, PyTorch's CPU driver): columns whose pivots fall below
/// rcond (default eps(dtype) * max(m, n)) times the largest count as dependent. Also the
/// numerical rank of each A (int64). PyTorch's gradient (through pinv(A)); gelsy's residuals
/// and singular values are empty in PyTorch too, so not returned.
struct Lstsq {
  Tensor solution, rank;
};
Lstsq lstsq(const Tensor& A, const Tensor& B, std::optional<double> rcond = std::nullopt);
/// Matrix norms over the last two dims: ord 2 / -2 the largest / smallest singular value, 1 /
/// -1 the largest / smallest column sum of |A|, +-inf the same over rows; "fro" (the default
/// of torch.linalg.matrix_norm) and "nuc" (the sum of the singular values).
Tensor matrix_norm(const Tensor& A, double ord, bool keepdim = false);
Tensor matrix_norm(const Tensor& A, const std::string& ord = "fro", bool keepdim = false);
/// exp(A) (Pade approximants with scaling and squaring); its gradient the top-right block of
/// exp([[A^T, g], [0, A^T]]), itself through matrix_exp, so differentiable at every order.
Tensor matrix_exp(const Tensor& A);
/// A^k for an integer k by repeated squaring (k < 0: inv(A)^-k; k = 0: identities), as
/// torch.linalg.matrix_power, through matmul and inv.
Tensor matrix_power(const Tensor& A, int64_t k);
/// The product of 2-D tensors (the first may be 1-D, a row, and the last 1-D, a column) in the
/// order with the fewest multiplications (torch.linalg.multi_dot).
Tensor multi_dot(const std::vector<Tensor>& tensors);
/// X with A X = B from A's Cholesky factor: L lower with A = L L^T, or upper: A = U^T U
/// (torch.cholesky_solve(B, L, upper)); PyTorch's gradient, which treats L as a full matrix.
Tensor cholesky_solve(const Tensor& B, const Tensor& L, bool upper = false);
/// The first n columns of H_0 H_1 ... H_{k-1}, H_i = I - tau_i v_i v_i^T with v_i the i-th
/// column of A (m x n, m >= n >= k = tau's size) below the diagonal and 1 on it
/// (torch.linalg.householder_product, LAPACK's orgqr). Computed as k recorded rank-one
/// updates, so differentiable in A and tau at every order (O(k m n), for the small matrices
/// of parametrizations; nn::orthogonal uses it).
Tensor householder_product(const Tensor& A, const Tensor& tau);

/// torch.linalg.lu_factor: A (..., m, n) = P L U packed as LAPACK's getrf leaves it: `LU`
/// holds U on and above the diagonal and L's multipliers (unit diagonal implied) below it;
/// `pivots` (..., min(m, n)) int32, 1-based: row i was swapped with row pivots[i] at step i.
/// Partial pivoting, or none with pivot=false (A = L U, pivots 1..k; PyTorch offers that on
/// CUDA only; a zero pivot then gives inf or NaN multipliers, as there). A singular A factors
/// without error (a zero on U's diagonal). Differentiable in LU (PyTorch's
/// lu_factor_ex_backward), twice.
struct LUFactor {
  Tensor LU, pivots;
};
LUFactor lu_factor(const Tensor& A, bool pivot = true);
/// torch.linalg.lu: P (..., m, m), L (..., m, k) unit lower, U (..., k, n) upper, k = min(m, n),
/// with A = P L U; differentiable in L and U (PyTorch's linalg_lu_backward), twice.
struct PLU {
  Tensor P, L, U;
};
PLU lu(const Tensor& A, bool pivot = true);
/// torch.lu_unpack: P, L, U from lu_factor's result (L and U differentiable in LU; P built
/// from the pivots). unpack_data / unpack_pivots false leave L, U / P undefined.
PLU lu_unpack(const Tensor& LU, const Tensor& pivots, bool unpack_data = true, bool unpack_pivots = true);
/// torch.linalg.lu_solve: X with A X = B (left) or X A = B (left=false), A^H in place of A
/// when adjoint, from A's lu_factor (A square). Triangular solves on the unpacked factors,
/// differentiable in LU and B at every order.
Tensor lu_solve(const Tensor& LU, const Tensor& pivots, const Tensor& B, bool left = true, bool adjoint = false);
/// torch.linalg.lu_factor_ex: lu_factor with `info` (int32, batch shape): 0, or i + 1 for the
/// first zero on U's diagonal U(i, i) (LAPACK's getrf info).
struct LUFactorEx {
  Tensor LU, pivots, info;
};
LUFactorEx lu_factor_ex(const Tensor& A, bool pivot = true);

// ---- compositions (ops/linalg_compose.cpp), differentiable through the ops they use ----

/// torch.linalg.vecdot: sum(x * y) along dim, x and y broadcast (real dtypes).
Tensor vecdot(const Tensor& x, const Tensor& y, int64_t dim = -1);
/// torch.linalg.norm: with no ord, the 2-norm of every element (or along `dims`); with ord,
/// a vector norm (x 1-D, or one dim given) or a matrix norm (x 2-D, or two dims given).
Tensor norm(const Tensor& x, std::optional<double> ord = std::nullopt, const std::vector<int64_t>& dims = {},
            bool keepdim = false);
/// The same with a matrix-norm name: "fro" or "nuc" (x 2-D or two dims given).
Tensor norm(const Tensor& x, const std::string& ord, const std::vector<int64_t>& dims = {}, bool keepdim = false);
/// torch.linalg.cond: the condition number in the norm `ord`: 2 (the default) / -2 from the
/// singular values (largest over smallest, or the reverse; any m x n), "nuc" as sum(s)
/// sum(1/s), or norm(A) norm(A^-1) for 1, -1, +-inf and "fro" (square A; inf for a singular
/// one, as PyTorch's, whose gradient these paths lack; kiln's has one).
Tensor cond(const Tensor& A, std::optional<double> ord = std::nullopt);
Tensor cond(const Tensor& A, const std::string& ord);
/// torch.linalg.vander: (..., n) -> (..., n, N) with columns x^0, x^1, ..., x^(N-1) (N defaults
/// to n; increasing powers, by a cumulative product as PyTorch's).
Tensor vander(const Tensor& x, std::optional<int64_t> N = std::nullopt);
/// torch.linalg.tensorinv: the inverse of A seen as a (prod(shape[:ind]), prod(shape[ind:]))
/// matrix, shaped shape[ind:] + shape[:ind].
Tensor tensorinv(const Tensor& A, int64_t ind = 2);
/// torch.linalg.tensorsolve: X with tensordot(A, X, X.dim()) = B (dims of A moved to the end
/// first when given).
Tensor tensorsolve(const Tensor& A, const Tensor& B, const std::vector<int64_t>& dims = {});
}  // namespace linalg

/// torch.geqrf: A (..., m, n) = Q R in LAPACK's packed form: `a` holds R on and above the
/// diagonal and the Householder vectors below it, `tau` (..., min(m, n)) their scales, so
/// linalg::householder_product(a, tau) is Q. Not differentiable (as PyTorch's).
struct Geqrf {
  Tensor a, tau;
};
Geqrf geqrf(const Tensor& A);

}  // namespace kiln
