// torch.linalg's cholesky, solve_triangular, solve, inv, det, slogdet, logdet (ops/linalg.h):
// the factorizations run in float64 on a host copy (ops/cpu/linalg_decomp.cpp, Eigen), one
// matrix of the batch at a time; the backward formulas are PyTorch's (FunctionsManual.cpp),
// written in recorded ops, among them these solvers again, so every op here is twice
// differentiable.
#include <array>
#include <cmath>
#include <limits>
#include "kiln/core/autograd.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/helpers.h"
#include "kiln/ops/kernels/linalg.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/linalg_host.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape_ops.h"

namespace kiln::linalg::host {

void check_matrix(const char* op, const Tensor& A) {
  KILN_CHECK(A.defined(), op, ": the input is undefined");
  KILN_CHECK(A.dim() >= 2, op, ": expected a batch of matrices (..., m, n), got ", describe(A));
  KILN_CHECK(A.dtype() == DType::float32 || A.dtype() == DType::float64, op,
             ": expected float32 or float64 matrices, got ", describe(A));
}
void check_square(const char* op, const Tensor& A) {
  check_matrix(op, A);
  KILN_CHECK(A.size(-1) == A.size(-2), op, ": expected a batch of square matrices (..., n, n), got ", describe(A));
}
Shape leading(const Tensor& t, int64_t core) { return Shape(t.shape().begin(), t.shape().end() - core); }
int64_t count(const Shape& s) {
  int64_t p = 1;
  for (int64_t d : s) p *= d;
  return p;
}
Shape with(Shape s, std::initializer_list<int64_t> tail) {
  s.insert(s.end(), tail.begin(), tail.end());
  return s;
}
std::vector<double> host64(const Tensor& t) {
  NoGradGuard ng;
  return t.detach().contiguous().to(DType::float64).to_vector<double>();
}
Tensor like(const std::vector<double>& v, const Shape& s, const Tensor& t) {
  return from_vector<double>(v, s).to(t.dtype()).to(t.device());
}
std::string which(int64_t b, int64_t batch) {
  return batch > 1 ? " (matrix " + std::to_string(b) + " of the batch)" : "";
}
DType promoted(const Tensor& a, const Tensor& b) {
  return a.dtype() == DType::float64 || b.dtype() == DType::float64 ? DType::float64 : DType::float32;
}
Tensor diag_embed(const Tensor& v) {
  return mul(v.unsqueeze(-1), eye(v.size(-1), -1, {.dtype = v.dtype(), .device = v.device()}));
}

}  // namespace kiln::linalg::host

namespace kiln::linalg {
namespace {
using namespace host;


// The forward of solve_triangular on broadcast batches: A (..., n, n), B (..., n, k) left or
// (..., k, n) right.
Tensor triangular_forward(const Tensor& A, const Tensor& B, bool upper, bool left, bool unit) {
  const int64_t n = A.size(-1), k = left ? B.size(-1) : B.size(-2);
  const Shape batch = broadcast_shapes(leading(A, 2), leading(B, 2), "linalg.solve_triangular");
  const std::vector<double> a = host64(A.expand(with(batch, {n, n}))), b = host64(B.expand(with(batch, {B.size(-2), B.size(-1)})));
  std::vector<double> x(b.size());
  const int64_t nb = count(batch);
  for (int64_t i = 0; i < nb; ++i)
    triangular_solve_f64(a.data() + i * n * n, b.data() + i * n * k, x.data() + i * n * k, n, k, upper, left, unit);
  return from_vector<double>(x, with(batch, {B.size(-2), B.size(-1)})).to(promoted(A, B)).to(A.device());
}

// The forward of solve (left, B a matrix batch): A (..., n, n), B (..., n, k) broadcast.
Tensor lu_solve_forward(const char* op, const Tensor& A, const Tensor& B) {
  const int64_t n = A.size(-1), k = B.size(-1);
  const Shape batch = broadcast_shapes(leading(A, 2), leading(B, 2), op);
  const std::vector<double> a = host64(A.expand(with(batch, {n, n}))), b = host64(B.expand(with(batch, {n, k})));
  std::vector<double> x(b.size());
  const int64_t nb = count(batch);
  for (int64_t i = 0; i < nb; ++i) {
    const int64_t info = lu_solve_f64(a.data() + i * n * n, b.data() + i * n * k, x.data() + i * n * k, n, k);
    KILN_CHECK(info == 0, op, ": the input matrix is singular (the diagonal element ", info,
               " of its LU factorization is zero)", which(i, nb));
  }
  return from_vector<double>(x, with(batch, {n, k})).to(promoted(A, B)).to(A.device());
}

}  // namespace

Tensor diagonal(const Tensor& x) {
  KILN_CHECK(x.defined() && x.dim() >= 2, "linalg.diagonal: expected a batch of matrices (..., n, m), got ",
             x.defined() ? describe(x) : "undefined");
  const int64_t n = x.size(-2), m = x.size(-1), d = std::min(n, m);
  std::vector<int64_t> pos(static_cast<size_t>(d));
  for (int64_t i = 0; i < d; ++i) pos[size_t(i)] = i * m + i;
  const Tensor idx = from_vector(pos, {d}, {.dtype = DType::int64, .device = x.device()});
  return index_select(x.reshape(with(leading(x, 2), {n * m})), -1, idx);
}

Tensor cholesky(const Tensor& A, bool upper) {
  check_square("linalg.cholesky", A);
  const int64_t n = A.size(-1), nb = count(leading(A, 2));
  const std::vector<double> a = host64(A);
  std::vector<double> l(a.size(), 0.0);
  for (int64_t i = 0; i < nb; ++i) {
    const int64_t info = cholesky_f64(a.data() + i * n * n, l.data() + i * n * n, n);
    KILN_CHECK(info == 0, "linalg.cholesky: the factorization could not be completed because the input is not "
               "positive-definite (the leading minor of order ", info, " is not positive-definite)", which(i, nb));
  }
  Tensor L = like(l, A.shape(), A);
  // PyTorch's cholesky_backward: gA = L^-T sym((L^T gL).tril()) L^-1, with sym(X) = (X + X^T - diag X) / 2
  const Tensor Ls = L.detach();
  record(L, "linalg.cholesky", {A}, {Ls}, [Ls](const Tensor& gL, const std::vector<bool>&) {
    const Tensor Lo = saved_output(Ls);
    Tensor gA = tril(matmul(mT(Lo), gL));
    gA = mul(add(gA, mT(tril(gA, -1))), 0.5);
    gA = solve_triangular(mT(Lo), gA, /*upper=*/true, /*left=*/true);
    gA = solve_triangular(Lo, gA, /*upper=*/false, /*left=*/false);
    return std::vector<Tensor>{gA};
  });
  twice_differentiable(L);
  return upper ? mT(L) : L;
}

Tensor solve_triangular(const Tensor& A, const Tensor& B, bool upper, bool left, bool unitriangular) {
  check_square("linalg.solve_triangular", A);
  KILN_CHECK(B.defined() && B.dim() >= 2 && B.is_floating_point(),
             "linalg.solve_triangular: B must be a float batch of matrices (..., n, k), got ",
             B.defined() ? describe(B) : "undefined");
  const int64_t n = A.size(-1);
  KILN_CHECK((left ? B.size(-2) : B.size(-1)) == n, "linalg.solve_triangular: A ", describe(A), " and B ", describe(B),
             left ? " do not fit A X = B (B needs n rows)" : " do not fit X A = B (B needs n columns)");
  Tensor X = triangular_forward(A, B, upper, left, unitriangular);
  // PyTorch's linalg_solve_triangular backward: gB = A^-T gX (or gX A^-T); gA = -gB X^T
  // (or -X^T gB), kept to A's triangle (without the diagonal when unitriangular)
  const Tensor Xs = X.detach();
  record(X, "linalg.solve_triangular", {A, B}, {A, Xs},
         [A, Xs, upper, left, unitriangular, bs = B.shape()](const Tensor& gX, const std::vector<bool>& need) {
           const Tensor Xo = saved_output(Xs);
           const Tensor gB = solve_triangular(mT(A), gX, !upper, left, unitriangular);
           Tensor gA;
           if (need[0]) {
             gA = neg(left ? matmul(gB, mT(Xo)) : matmul(mT(Xo), gB));
             gA = upper ? triu(gA, unitriangular ? 1 : 0) : tril(gA, unitriangular ? -1 : 0);
             gA = sum_to(gA, A.shape());
           }
           return std::vector<Tensor>{gA, need[1] ? sum_to(gB, bs) : Tensor()};
         });
  return twice_differentiable(X);
}

Tensor solve(const Tensor& A, const Tensor& B, bool left) {
  check_square("linalg.solve", A);
  KILN_CHECK(B.defined() && B.is_floating_point() && B.dim() >= 1,
             "linalg.solve: B must be a floating-point vector or batch of matrices, got ",
             B.defined() ? describe(B) : "undefined");
  // PyTorch's rule: B is a (batch of) vector(s) when it is 1-D, or has A's batch shape + (n)
  const bool vector = B.dim() == 1 || (B.dim() == A.dim() - 1 && B.shape() == leading(A, 1));
  if (vector) return solve(A, B.unsqueeze(-1), left).squeeze(-1);
  if (!left) return mT(solve(mT(A), mT(B), true));  // X A = B <=> A^T X^T = B^T
  const int64_t n = A.size(-1);
  KILN_CHECK(B.dim() >= 2 && B.size(-2) == n, "linalg.solve: A ", describe(A), " and B ", describe(B),
             " do not fit A X = B (B needs ", n, " rows)");
  Tensor X = lu_solve_forward("linalg.solve", A, B);
  // PyTorch's linalg_solve backward: gB = A^-T gX, gA = -gB X^T
  const Tensor Xs = X.detach();
  record(X, "linalg.solve", {A, B}, {A, Xs}, [A, Xs, bs = B.shape()](const Tensor& gX, const std::vector<bool>& need) {
    const Tensor gB = solve(mT(A), gX);
    Tensor gA;
    if (need[0]) gA = sum_to(neg(matmul(gB, mT(saved_output(Xs)))), A.shape());
    return std::vector<Tensor>{gA, need[1] ? sum_to(gB, bs) : Tensor()};
  });
  return twice_differentiable(X);
}

Tensor inv(const Tensor& A) {
  check_square("linalg.inv", A);
  const int64_t n = A.size(-1);
  const Tensor I = eye(n, -1, {.dtype = A.dtype(), .device = A.device()});
  Tensor Y = lu_solve_forward("linalg.inv", A.detach(), I);
  const Tensor Ys = Y.detach();
  record(Y, "linalg.inv", {A}, {Ys}, [Ys](const Tensor& g, const std::vector<bool>&) {
    const Tensor Yt = mT(saved_output(Ys));
    return std::vector<Tensor>{neg(matmul(Yt, matmul(g, Yt)))};
  });
  return twice_differentiable(Y);
}

namespace {
// sign, log |det| and det of each matrix, in A's dtype, shape A's batch.
std::array<Tensor, 3> lu_dets(const Tensor& A) {
  const int64_t n = A.size(-1);
  const Shape batch = leading(A, 2);
  const int64_t nb = count(batch);
  const std::vector<double> a = host64(A);
  const size_t m = static_cast<size_t>(nb);
  std::vector<double> sign(m), logabs(m), det(m);
  for (int64_t i = 0; i < nb; ++i) lu_det_f64(a.data() + i * n * n, n, &sign[size_t(i)], &logabs[size_t(i)], &det[size_t(i)]);
  return {like(sign, batch, A), like(logabs, batch, A), like(det, batch, A)};
}
bool any_zero(const Tensor& d) {
  NoGradGuard ng;
  return any(eq(d, 0.0)).item<bool>();
}
// det(A) A^-T, the gradient of det: through inv where every det is nonzero (PyTorch's path),
// else the cofactor matrix, exact at a singular A too. d: the dets, A's batch shape.
Tensor det_times_inverse_transpose(const Tensor& A, const Tensor& d) {
  if (any_zero(d)) return cofactor(A);
  return mul(d.unsqueeze(-1).unsqueeze(-1), mT(inv(A)));
}
}  // namespace

Tensor det(const Tensor& A) {
  check_square("linalg.det", A);
  Tensor d = lu_dets(A)[2];
  const Tensor ds = d.detach();
  record(d, "linalg.det", {A}, {A, ds}, [A, ds](const Tensor& g, const std::vector<bool>&) {
    return std::vector<Tensor>{
        mul(g.unsqueeze(-1).unsqueeze(-1), det_times_inverse_transpose(A, saved_output(ds)))};
  });
  return twice_differentiable(d);
}

SignLogAbsDet slogdet(const Tensor& A) {
  check_square("linalg.slogdet", A);
  auto [sign, logabs, d] = lu_dets(A);
  // A^-T, or at a singular A cofactor(A) / det: +-inf (NaN where a cofactor is 0 too), as PyTorch's
  const Tensor ds = d.detach();
  record(logabs, "linalg.slogdet", {A}, {A, ds}, [A, ds](const Tensor& g, const std::vector<bool>&) {
    const Tensor dt = any_zero(ds) ? div(cofactor(A), ds.unsqueeze(-1).unsqueeze(-1)) : mT(inv(A));
    return std::vector<Tensor>{mul(g.unsqueeze(-1).unsqueeze(-1), dt)};
  });
  twice_differentiable(logabs);
  return {sign, logabs};
}

Tensor cofactor(const Tensor& A) {
  check_square("linalg.cofactor", A);
  const int64_t n = A.size(-1);
  if (n <= 1) return ones_like(A);  // the 0 x 0 minor's det is 1
  // the (n - 1) x (n - 1) minors M_ij (A without row i and column j), as one batch (..., n, n,
  // n - 1, n - 1) gathered by index_select, then det: C_ij = (-1)^(i + j) det M_ij
  std::vector<int64_t> others;  // for each i, the n - 1 indices other than i
  std::vector<double> signs;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t r = 0; r < n; ++r)
      if (r != i) others.push_back(r);
    for (int64_t j = 0; j < n; ++j) signs.push_back((i + j) % 2 ? -1.0 : 1.0);
  }
  const Tensor idx = from_vector(others, {n * (n - 1)}, {.dtype = DType::int64, .device = A.device()});
  const Shape b = leading(A, 2);
  const Tensor rows = index_select(A, -2, idx).reshape(with(b, {n, n - 1, n}));               // [i, r, c]
  const Tensor m = index_select(rows, -1, idx).reshape(with(b, {n, n - 1, n, n - 1}));        // [i, r, j, c']
  const Tensor minors = m.transpose(-3, -2);                                                   // [i, j, r, c']
  return mul(det(minors), from_vector<double>(signs, {n, n}).to(A.dtype()).to(A.device()));
}

Tensor logdet(const Tensor& A) {
  const SignLogAbsDet s = slogdet(A);
  // torch.logdet: log |det| where det > 0, NaN where det < 0 (-inf at 0 comes with logabsdet)
  return where(lt(s.sign, 0.0), std::numeric_limits<double>::quiet_NaN(), s.logabsdet);
}

}  // namespace kiln::linalg
