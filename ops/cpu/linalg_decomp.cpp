// The dense factorizations behind torch.linalg's cholesky, solve, inv, det, slogdet and
// solve_triangular (ops/kernels/linalg.h): Eigen's blocked LLT and partial-pivoting LU on
// float64 row-major matrices, with LAPACK's failure reports (the order of the first
// non-positive-definite minor, the first zero pivot).
// GCC 12 reports false -Wmaybe-uninitialized inside Eigen's AVX-512 paths (-march=native),
// as in ops/cpu/linalg.cpp.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <Eigen/Cholesky>
#include <Eigen/Core>
#include <Eigen/LU>
#include <cmath>
#include <limits>
#include "kiln/ops/kernels/linalg.h"

namespace kiln {
namespace {
using RowMat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMap = Eigen::Map<const RowMat>;
using Map = Eigen::Map<RowMat>;
}  // namespace

int64_t cholesky_f64(const double* a, double* l, int64_t n) {
  if (n == 0) return 0;
  const ConstMap A(a, n, n);
  Map L(l, n, n);
  Eigen::LLT<RowMat, Eigen::Lower> llt(A);
  if (llt.info() == Eigen::Success) {
    L = llt.matrixL();
    return 0;
  }
  // Eigen does not say where it stopped: the unblocked recurrence finds the first minor
  L.setZero();
  for (int64_t j = 0; j < n; ++j) {
    double d = A(j, j);
    for (int64_t k = 0; k < j; ++k) d -= L(j, k) * L(j, k);
    if (!(d > 0)) return j + 1;
    L(j, j) = std::sqrt(d);
    for (int64_t i = j + 1; i < n; ++i) {
      double s = A(i, j);
      for (int64_t k = 0; k < j; ++k) s -= L(i, k) * L(j, k);
      L(i, j) = s / L(j, j);
    }
  }
  return n;  // rounding made Eigen fail where the recurrence did not: report the last minor
}

int64_t lu_solve_f64(const double* a, const double* b, double* x, int64_t n, int64_t k) {
  if (n == 0) return 0;
  const Eigen::PartialPivLU<RowMat> lu(ConstMap(a, n, n));
  const auto d = lu.matrixLU().diagonal();
  for (int64_t i = 0; i < n; ++i)
    if (d(i) == 0.0) return i + 1;
  Map(x, n, k) = lu.solve(ConstMap(b, n, k));
  return 0;
}

void lu_det_f64(const double* a, int64_t n, double* sign, double* logabsdet, double* det) {
  if (n == 0) {
    *sign = 1.0, *logabsdet = 0.0, *det = 1.0;
    return;
  }
  const Eigen::PartialPivLU<RowMat> lu(ConstMap(a, n, n));
  const auto d = lu.matrixLU().diagonal();
  double s = double(lu.permutationP().determinant()), la = 0.0, p = s;
  for (int64_t i = 0; i < n; ++i) {
    p *= d(i);
    la += std::log(std::fabs(d(i)));
    s *= d(i) > 0 ? 1.0 : (d(i) < 0 ? -1.0 : 0.0);
  }
  *sign = s;
  *logabsdet = s == 0.0 ? -std::numeric_limits<double>::infinity() : la;
  *det = p;
}

void triangular_solve_f64(const double* a, const double* b, double* x, int64_t n, int64_t k, bool upper, bool left,
                          bool unit) {
  if (n == 0 || k == 0) return;
  const ConstMap A(a, n, n);
  Map X(x, left ? n : k, left ? k : n);
  X = ConstMap(b, left ? n : k, left ? k : n);
  if (left) {
    if (upper && unit) A.triangularView<Eigen::UnitUpper>().solveInPlace(X);
    else if (upper) A.triangularView<Eigen::Upper>().solveInPlace(X);
    else if (unit) A.triangularView<Eigen::UnitLower>().solveInPlace(X);
    else A.triangularView<Eigen::Lower>().solveInPlace(X);
  } else {
    if (upper && unit) A.triangularView<Eigen::UnitUpper>().solveInPlace<Eigen::OnTheRight>(X);
    else if (upper) A.triangularView<Eigen::Upper>().solveInPlace<Eigen::OnTheRight>(X);
    else if (unit) A.triangularView<Eigen::UnitLower>().solveInPlace<Eigen::OnTheRight>(X);
    else A.triangularView<Eigen::Lower>().solveInPlace<Eigen::OnTheRight>(X);
  }
}

}  // namespace kiln
