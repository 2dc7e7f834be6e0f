// torch.linalg's LU family: lu_factor (LAPACK's getrf on a float64 host copy, any m x n),
// lu and lu_unpack (the factors, differentiable), lu_solve (triangular solves on them), with
// PyTorch's backward formulas (FunctionsManual.cpp: lu_factor_ex_backward and
// linalg_lu_backward) in recorded ops, so second derivatives work too.
#include <algorithm>
#include <numeric>
#include <vector>
#include "kiln/core/autograd.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/helpers.h"
#include "kiln/ops/kernels/linalg.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/linalg_host.h"
#include "kiln/ops/shape_ops.h"

namespace kiln::linalg {
namespace {
using namespace host;

// PyTorch's linalg_lu_backward (real): the gradient of A = P L U from those of L (m x k) and
// U (k x n), either of which may be undefined.
Tensor lu_backward(const Tensor& gL, const Tensor& gU, const Tensor& P, const Tensor& L, const Tensor& U) {
  const int64_t m = L.size(-2), n = U.size(-1), k = std::min(m, n);
  auto solve_L_h = [&](const Tensor& X) {  // L^-H X, L unit lower
    return solve_triangular(mT(L.narrow(-2, 0, k)), X, /*upper=*/true, /*left=*/true, /*unitriangular=*/true);
  };
  Tensor gA;
  if (m == n) {  // P L^-H [L^H gL o 1_L + gU U^H o 1_U] U^-H
    if (gL.defined()) gA = tril(matmul(mT(L), gL), -1);
    if (gU.defined()) gA = gA.defined() ? add(gA, triu(matmul(gU, mT(U)))) : triu(matmul(gU, mT(U)));
    gA = solve_triangular(mT(U), gA, /*upper=*/false, /*left=*/false);
    gA = solve_L_h(gA);
  } else if (m < n) {  // wide: A1 from U1 (k x k), A2 from U2
    const Tensor U1 = U.narrow(-1, 0, k);
    if (gL.defined()) gA = matmul(mT(L), gL);
    if (gU.defined()) {
      const Tensor t = matmul(triu(gU), mT(U));
      gA = gA.defined() ? sub(gA, t) : neg(t);
    }
    gA = solve_triangular(mT(U1), tril(gA, -1), /*upper=*/false, /*left=*/false);
    if (gU.defined()) gA = cat({add(gA, triu(gU.narrow(-1, 0, k))), gU.narrow(-1, k, n - k)}, -1);
    gA = solve_L_h(gA);
    if (!gU.defined()) gA = cat({gA, zeros_like(U.narrow(-1, k, n - k))}, -1);
  } else {  // tall: A1 from L1 (k x k), A2 from L2
    const Tensor L1 = L.narrow(-2, 0, k);
    if (gU.defined()) gA = matmul(gU, mT(U));
    if (gL.defined()) {
      const Tensor t = matmul(mT(L), tril(gL, -1));
      gA = gA.defined() ? sub(gA, t) : neg(t);
    }
    gA = solve_triangular(mT(L1), triu(gA), /*upper=*/true, /*left=*/true, /*unitriangular=*/true);
    if (gL.defined()) gA = cat({add(gA, tril(gL.narrow(-2, 0, k), -1)), gL.narrow(-2, k, m - k)}, -2);
    gA = solve_triangular(mT(U), gA, /*upper=*/false, /*left=*/false);
    if (!gL.defined()) gA = cat({gA, zeros_like(L.narrow(-2, k, m - k))}, -2);
  }
  return matmul(P, gA);
}

// P (..., m, m) with A = P L U from getrf's 1-based row swaps (..., k).
Tensor permutation_of(const Tensor& pivots, int64_t m, const Tensor& like_t) {
  const int64_t k = pivots.size(-1), nb = count(leading(pivots, 1));
  const std::vector<int32_t> piv = pivots.to(Device::cpu()).contiguous().to_vector<int32_t>();
  std::vector<double> p(size_t(nb * m * m), 0.0);
  std::vector<int64_t> perm(static_cast<size_t>(m));
  for (int64_t b = 0; b < nb; ++b) {
    std::iota(perm.begin(), perm.end(), 0);
    for (int64_t i = 0; i < k; ++i) {
      const int64_t s = piv[size_t(b * k + i)] - 1;
      KILN_CHECK(s >= i && s < m, "lu_unpack: pivots[", i, "] = ", s + 1, " is out of range: expected a value in [",
                 i + 1, ", ", m, "] as getrf writes them", which(b, nb));
      std::swap(perm[size_t(i)], perm[size_t(s)]);
    }
    for (int64_t i = 0; i < m; ++i) p[size_t(b * m * m + perm[size_t(i)] * m + i)] = 1.0;  // (P^T A)_i = A_perm[i]
  }
  return like(p, with(leading(pivots, 1), {m, m}), like_t);
}

}  // namespace

LUFactor lu_factor(const Tensor& A, bool pivot) {
  check_matrix("linalg.lu_factor", A);
  const int64_t m = A.size(-2), n = A.size(-1), k = std::min(m, n), nb = count(leading(A, 2));
  std::vector<double> a = host64(A);
  std::vector<int32_t> piv(size_t(nb * k));
  for (int64_t i = 0; i < nb; ++i) getrf_f64(a.data() + i * m * n, m, n, piv.data() + i * k, pivot);
  Tensor LU = like(a, A.shape(), A);
  const Tensor pivots = from_vector(piv, with(leading(A, 2), {k}), {.dtype = DType::int32}).to(A.device());
  if (any_requires_grad({A})) {
    const Tensor LUd = LU.detach();
    record(LU, "linalg.lu_factor", {A}, {LUd, pivots}, [LUd, pivots, k](const Tensor& g, const std::vector<bool>&) {
      // PyTorch's lu_factor_ex_backward: L's gradient is the first k columns, U's the first k rows
      const PLU f = lu_unpack(saved_output(LUd), pivots);
      return std::vector<Tensor>{lu_backward(g.narrow(-1, 0, k), g.narrow(-2, 0, k), f.P, f.L, f.U)};
    });
    twice_differentiable(LU);
  }
  return {LU, pivots};
}

LUFactorEx lu_factor_ex(const Tensor& A, bool pivot) {
  check_matrix("linalg.lu_factor_ex", A);
  const LUFactor f = lu_factor(A, pivot);
  // getrf's info: the first exact zero on U's diagonal (1-based), 0 where none
  const int64_t m = A.size(-2), n = A.size(-1), k = std::min(m, n), nb = count(leading(A, 2));
  const std::vector<double> lu = host64(f.LU);
  std::vector<int32_t> info(size_t(nb), 0);
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t i = 0; i < k; ++i)
      if (lu[size_t(b * m * n + i * n + i)] == 0.0) {
        info[size_t(b)] = int32_t(i + 1);
        break;
      }
  return {f.LU, f.pivots, from_vector(info, leading(A, 2), {.dtype = DType::int32}).to(A.device())};
}

PLU lu_unpack(const Tensor& LU, const Tensor& pivots, bool unpack_data, bool unpack_pivots) {
  check_matrix("lu_unpack", LU);
  const int64_t m = LU.size(-2), n = LU.size(-1), k = std::min(m, n);
  KILN_CHECK(pivots.defined() && pivots.dtype() == DType::int32 && pivots.dim() == LU.dim() - 1 &&
                 pivots.size(-1) == k && leading(pivots, 1) == leading(LU, 2),
             "lu_unpack: expected int32 pivots of shape ", shape_str(with(leading(LU, 2), {k})), " for LU ",
             describe(LU), ", got ", pivots.defined() ? describe(pivots) : std::string("undefined"));
  PLU out;
  if (unpack_data) {
    const TensorOptions o{.dtype = LU.dtype(), .device = LU.device()};
    out.L = add(tril(LU.narrow(-1, 0, k), -1), eye(m, k, o));
    out.U = triu(LU.narrow(-2, 0, k));
  }
  if (unpack_pivots) out.P = permutation_of(pivots, m, LU);
  return out;
}

PLU lu(const Tensor& A, bool pivot) {
  check_matrix("linalg.lu", A);
  const LUFactor f = lu_factor(A, pivot);
  return lu_unpack(f.LU, f.pivots);
}

Tensor lu_solve(const Tensor& LU, const Tensor& pivots, const Tensor& B, bool left, bool adjoint) {
  check_square("linalg.lu_solve", LU);
  const int64_t n = LU.size(-1);
  KILN_CHECK(B.defined() && B.is_floating_point() && B.dim() >= 2 && (left ? B.size(-2) : B.size(-1)) == n,
             "linalg.lu_solve: expected B of shape (..., ", left ? std::to_string(n) + ", k)" : "k, " + std::to_string(n) + ")",
             " for LU ", describe(LU), " (left=", left ? "true" : "false", "), got ",
             B.defined() ? describe(B) : std::string("undefined"));
  const PLU f = lu_unpack(LU, pivots);
  const Tensor& P = f.P;
  const Tensor &L = f.L, &U = f.U;
  if (left && !adjoint)  // P L U X = B: X = U^-1 L^-1 P^T B
    return solve_triangular(U, solve_triangular(L, matmul(mT(P), B), false, true, true), true);
  if (left)  // U^T L^T P^T X = B: X = P L^-T U^-T B
    return matmul(P, solve_triangular(mT(L), solve_triangular(mT(U), B, false), true, true, true));
  if (!adjoint)  // X P L U = B: X = B U^-1 L^-1 P^T
    return matmul(solve_triangular(L, solve_triangular(U, B, true, false), false, false, true), mT(P));
  // X U^T L^T P^T = B: X = B P L^-T U^-T
  return solve_triangular(mT(U), solve_triangular(mT(L), matmul(B, P), true, false, true), false, false);
}

}  // namespace kiln::linalg
