// The spectral and orthogonal factorizations behind torch.linalg's eigh, svd, qr, lstsq and
// matrix_exp (ops/kernels/linalg.h): Eigen's symmetric eigensolver, divide-and-conquer SVD,
// Householder QR, complete orthogonal decomposition and Pade matrix exponential, on float64
// row-major matrices copied into Eigen's column-major ones; and LAPACK's getrf (the
// rectangular LU of linalg.lu_factor) written out, row-major in place.
// GCC 12 reports false -Wmaybe-uninitialized inside Eigen's AVX-512 paths (-march=native),
// as in ops/cpu/linalg.cpp.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <Eigen/Eigenvalues>
#include <Eigen/QR>
#include <Eigen/SVD>
#include <unsupported/Eigen/MatrixFunctions>
#include "kiln/ops/kernels/linalg.h"

namespace kiln {
namespace {
using Mat = Eigen::MatrixXd;
using RowMat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMap = Eigen::Map<const RowMat>;
using Map = Eigen::Map<RowMat>;
}  // namespace

int64_t eigh_f64(const double* a, double* w, double* v, int64_t n, bool upper) {
  if (n == 0) return 0;
  // Eigen reads the lower triangle; A^T's lower triangle is A's upper one
  const Mat A = upper ? Mat(ConstMap(a, n, n).transpose()) : Mat(ConstMap(a, n, n));
  const Eigen::SelfAdjointEigenSolver<Mat> es(A, v ? Eigen::ComputeEigenvectors : Eigen::EigenvaluesOnly);
  if (es.info() != Eigen::Success) return 1;
  Eigen::Map<Eigen::VectorXd>(w, n) = es.eigenvalues();  // ascending
  if (v) Map(v, n, n) = es.eigenvectors();
  return 0;
}

int64_t svd_f64(const double* a, int64_t m, int64_t n, double* s, double* u, double* vt, bool full) {
  const int64_t k = std::min(m, n);
  if (k == 0) {  // no values; full U, V are identities (LAPACK's)
    if (u && full) Map(u, m, m).setIdentity();
    if (vt && full) Map(vt, n, n).setIdentity();
    return 0;
  }
  const unsigned vectors = !u ? 0u : full ? unsigned(Eigen::ComputeFullU | Eigen::ComputeFullV)
                                          : unsigned(Eigen::ComputeThinU | Eigen::ComputeThinV);
  const Eigen::BDCSVD<Mat> svd(Mat(ConstMap(a, m, n)), vectors);
  if (svd.info() != Eigen::Success) return 1;
  Eigen::Map<Eigen::VectorXd>(s, k) = svd.singularValues();
  if (u) {
    Map(u, m, full ? m : k) = svd.matrixU();
    Map(vt, full ? n : k, n) = svd.matrixV().transpose();
  }
  return 0;
}

void qr_f64(const double* a, int64_t m, int64_t n, double* q, double* r, bool complete) {
  const int64_t k = std::min(m, n), rows = complete ? m : k;
  if (m == 0 || n == 0) {
    if (q) Map(q, m, rows).setIdentity();
    Map(r, rows, n).setZero();
    return;
  }
  // Eigen's Householder vectors follow LAPACK's dlarfg (beta = -sign(alpha) |x|), so R's
  // diagonal has geqrf's signs
  const Eigen::HouseholderQR<Mat> qr(Mat(ConstMap(a, m, n)));
  Map(r, rows, n) = qr.matrixQR().topRows(rows).triangularView<Eigen::Upper>();
  if (q) Map(q, m, rows) = qr.householderQ() * Mat::Identity(m, rows);
}

int64_t getrf_f64(double* a, int64_t m, int64_t n, int32_t* piv, bool pivot) {
  const int64_t k = std::min(m, n);
  const double sfmin = std::numeric_limits<double>::min();
  int64_t info = 0;
  for (int64_t j = 0; j < k; ++j) {
    int64_t p = j;  // the first row of largest |a(i, j)|, as idamax
    if (pivot)
      for (int64_t i = j + 1; i < m; ++i)
        if (std::abs(a[i * n + j]) > std::abs(a[p * n + j])) p = i;
    piv[j] = int32_t(p + 1);
    const double pv = a[p * n + j];
    if (pv == 0.0 && info == 0) info = j + 1;
    // with pivoting a zero pivot means a zero column below it: nothing to eliminate; without,
    // the multipliers divide by it (inf or NaN, as a GPU's getrf without pivoting gives)
    if (pv != 0.0 || !pivot) {
      if (p != j)
        for (int64_t l = 0; l < n; ++l) std::swap(a[j * n + l], a[p * n + l]);
      if (std::abs(pv) >= sfmin) {
        const double r = 1.0 / pv;
        for (int64_t i = j + 1; i < m; ++i) a[i * n + j] *= r;
      } else {
        for (int64_t i = j + 1; i < m; ++i) a[i * n + j] /= pv;
      }
    }
    for (int64_t i = j + 1; i < m; ++i) {  // the trailing update
      const double lij = a[i * n + j];
      if (lij != 0.0)
        for (int64_t l = j + 1; l < n; ++l) a[i * n + l] -= lij * a[j * n + l];
    }
  }
  return info;
}

void geqrf_f64(const double* a, int64_t m, int64_t n, double* packed, double* tau) {
  const int64_t k = std::min(m, n);
  if (k == 0) return;
  const Eigen::HouseholderQR<Mat> qr(Mat(ConstMap(a, m, n)));
  Map(packed, m, n) = qr.matrixQR();
  for (int64_t i = 0; i < k; ++i) tau[i] = qr.hCoeffs()(i);
}

int64_t lstsq_f64(const double* a, const double* b, double* x, int64_t m, int64_t n, int64_t k, double rcond) {
  if (n == 0 || k == 0) return 0;
  if (m == 0) {
    Map(x, n, k).setZero();
    return 0;
  }
  Eigen::CompleteOrthogonalDecomposition<Mat> cod(m, n);
  cod.setThreshold(rcond);  // before compute: the rank it finds shapes the factorization
  cod.compute(Mat(ConstMap(a, m, n)));
  Map(x, n, k) = cod.solve(Mat(ConstMap(b, m, k)));
  return cod.rank();
}

void matrix_exp_f64(const double* a, double* out, int64_t n) {
  if (n == 0) return;
  Map(out, n, n) = Mat(ConstMap(a, n, n)).exp();
}

}  // namespace kiln
