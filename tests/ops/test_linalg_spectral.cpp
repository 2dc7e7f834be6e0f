// torch.linalg's eigh, svd, qr, geqrf, householder_product, lu_factor(_ex), lu, lu_unpack,
// lu_solve, vecdot, norm, cond, vander, tensorinv, tensorsolve, pinv, lstsq, matrix_rank, matrix_norm, matrix_exp, matrix_power, multi_dot and
// cholesky_solve (ops/linalg.h): the defining identities on batches, LAPACK's (PyTorch's)
// conventions where they are unique, errors, and float64 first and second derivatives of
// sign-independent quantities.
#include <doctest/doctest.h>
#include <cmath>
#include <limits>
#include "gradcheck.h"

using namespace kiln;
using kiln::test::f64;
using kiln::test::gradcheck;
using kiln::test::gradgradcheck;
using kiln::test::T;
namespace L = kiln::linalg;

namespace {
double maxabs(const Tensor& t) { return max(abs(t)).item(); }
Tensor mT(const Tensor& t) { return t.transpose(-2, -1); }
Tensor sym(const Tensor& x) { return add(x, mT(x)); }
Tensor I(int64_t n) { return eye(n, -1, f64); }
}  // namespace

TEST_CASE("eigh and eigvalsh: A V = V diag(w), ascending, orthonormal, one triangle read") {
  manual_seed(41);
  const Tensor A = sym(randn({3, 5, 5}, f64));
  const L::Eigh e = L::eigh(A);
  CHECK(e.eigenvalues.shape() == Shape{3, 5});
  CHECK(maxabs(sub(matmul(A, e.eigenvectors), mul(e.eigenvectors, e.eigenvalues.unsqueeze(-2)))) < 1e-13);
  CHECK(maxabs(sub(matmul(mT(e.eigenvectors), e.eigenvectors), I(5))) < 1e-14);
  CHECK(min(diff(e.eigenvalues)).item() >= 0.0);
  CHECK(maxabs(sub(L::eigvalsh(A), e.eigenvalues)) < 1e-14);
  // lower triangle by default, upper with upper = true; the other is not read
  const Tensor junk = triu(randn({3, 5, 5}, f64), 1);
  CHECK(maxabs(sub(L::eigvalsh(add(tril(A), junk)), e.eigenvalues)) < 1e-13);
  CHECK(maxabs(sub(L::eigvalsh(add(triu(A), mT(junk)), true), e.eigenvalues)) < 1e-13);
  CHECK(maxabs(sub(L::eigvalsh(T({2, 1, 1, 2}, {2, 2})), T({1, 3}, {2}))) < 1e-15);
  CHECK(L::eigh(A.to(DType::float32)).eigenvectors.dtype() == DType::float32);
  CHECK_THROWS_WITH_AS(L::eigh(randn({2, 3}, f64)), doctest::Contains("linalg.eigh: expected a batch of square"),
                       kiln::Error);
  CHECK_THROWS_WITH_AS(L::eigvalsh(randn({3}, f64)), doctest::Contains("linalg.eigvalsh"), kiln::Error);
}

TEST_CASE("svd and svdvals: U diag(S) Vh = A, full and reduced, descending values") {
  manual_seed(42);
  for (const Shape& s : {Shape{2, 6, 4}, Shape{2, 4, 6}, Shape{5, 5}}) {
    CAPTURE(shape_str(s));
    const Tensor A = randn(s, f64);
    const int64_t m = s[s.size() - 2], n = s.back(), k = std::min(m, n);
    const L::SVD r = L::svd(A, false);
    CHECK(r.U.shape().back() == k);
    CHECK(r.Vh.size(-2) == k);
    CHECK(maxabs(sub(matmul(mul(r.U, r.S.unsqueeze(-2)), r.Vh), A)) < 1e-13);
    CHECK(maxabs(sub(matmul(mT(r.U), r.U), I(k))) < 1e-14);
    CHECK(maxabs(sub(matmul(r.Vh, mT(r.Vh)), I(k))) < 1e-14);
    CHECK(min(r.S).item() >= 0.0);
    CHECK(max(diff(r.S)).item() <= 0.0);
    const L::SVD f = L::svd(A);  // full_matrices, PyTorch's default
    CHECK(f.U.size(-1) == m);
    CHECK(f.Vh.size(-2) == n);
    CHECK(maxabs(sub(matmul(mT(f.U), f.U), I(m))) < 1e-14);
    CHECK(maxabs(sub(matmul(f.Vh, mT(f.Vh)), I(n))) < 1e-14);
    CHECK(maxabs(sub(f.S, r.S)) < 1e-14);
    CHECK(maxabs(sub(L::svdvals(A), r.S)) < 1e-14);
  }
  CHECK(maxabs(sub(L::svdvals(T({3, 0, 0, -4}, {2, 2})), T({4, 3}, {2}))) < 1e-15);
  CHECK(L::svd(zeros({3, 0}, f64)).U.shape() == Shape{3, 3});  // no values; full U an identity
  CHECK(L::svdvals(zeros({3, 0}, f64)).shape() == Shape{0});
  CHECK_THROWS_WITH_AS(L::svd(from_vector<int64_t>({1, 2}, {1, 2}, {.dtype = DType::int64})),
                       doctest::Contains("float32 or float64"), kiln::Error);
}

TEST_CASE("qr: Q R = A, LAPACK's signs, modes") {
  manual_seed(43);
  // geqrf's Householder reflection sends (3, 4) to (-5, 0): R = -5, Q = -(0.6, 0.8), as PyTorch
  const L::QR t = L::qr(T({3, 4}, {2, 1}));
  CHECK(maxabs(sub(t.R, T({-5}, {1, 1}))) < 1e-15);
  CHECK(maxabs(sub(t.Q, T({-0.6, -0.8}, {2, 1}))) < 1e-15);
  for (const Shape& s : {Shape{2, 6, 4}, Shape{2, 4, 6}, Shape{4, 4}}) {
    CAPTURE(shape_str(s));
    const Tensor A = randn(s, f64);
    const int64_t m = s[s.size() - 2], n = s.back(), k = std::min(m, n);
    const L::QR r = L::qr(A);
    CHECK(r.Q.size(-1) == k);
    CHECK(r.R.size(-2) == k);
    CHECK(maxabs(sub(matmul(r.Q, r.R), A)) < 1e-13);
    CHECK(maxabs(sub(matmul(mT(r.Q), r.Q), I(k))) < 1e-14);
    CHECK(maxabs(tril(r.R, -1)) == 0.0);
    const L::QR c = L::qr(A, "complete");
    CHECK(c.Q.shape().back() == m);
    CHECK(c.R.size(-2) == m);
    CHECK(maxabs(sub(matmul(c.Q, c.R), A)) < 1e-13);
    CHECK(maxabs(sub(matmul(mT(c.Q), c.Q), I(m))) < 1e-14);
    const L::QR ro = L::qr(A, "r");
    CHECK_FALSE(ro.Q.defined());
    CHECK(maxabs(sub(ro.R, r.R)) == 0.0);
  }
  CHECK_THROWS_WITH_AS(L::qr(randn({3, 2}, f64), "economic"), doctest::Contains("'reduced', 'complete' or 'r'"),
                       kiln::Error);
  Tensor tall = randn({4, 2}, f64).requires_grad_(true);
  CHECK_THROWS_WITH_AS(L::qr(tall, "complete"), doctest::Contains("not differentiable when mode='complete'"),
                       kiln::Error);
  CHECK_THROWS_WITH_AS(sum(L::qr(tall, "r").R).backward(), doctest::Contains("mode='r'"), kiln::Error);
}

TEST_CASE("geqrf and householder_product: the packed QR, orgqr's Q, gradients at every order") {
  manual_seed(44);
  for (const Shape& s : {Shape{6, 4}, Shape{2, 5, 3}, Shape{4, 4}, Shape{3, 5}}) {
    CAPTURE(shape_str(s));
    const Tensor A = randn(s, f64);
    const Geqrf f = geqrf(A);
    const int64_t m = s[s.size() - 2], n = s.back(), k = std::min(m, n);
    CHECK(f.tau.size(-1) == k);
    const L::QR r = L::qr(A);
    // R is on and above the diagonal, and the reflections give qr's Q (LAPACK's signs both)
    CHECK(maxabs(sub(triu(f.a).narrow(-2, 0, k), r.R)) < 1e-13);
    if (m >= n) CHECK(maxabs(sub(L::householder_product(f.a, f.tau), r.Q)) < 1e-13);
  }
  // one reflection by hand: H = I - tau v v^T with v = (1, a_1, a_2)
  const Tensor a = T({9, 2, 7, -3, 5, 4}, {3, 2}), tau = T({0.5}, {1});
  const Tensor v = T({1, 7, 5}, {3, 1});
  const Tensor H = sub(I(3), mul(matmul(v, mT(v)), 0.5));
  CHECK(maxabs(sub(L::householder_product(a, tau), H.narrow(-1, 0, 2))) < 1e-15);
  CHECK(gradcheck([](std::vector<Tensor>& in) { return L::householder_product(in[0], in[1]); },
                  {randn({5, 3}, f64), randn({2}, f64)}));
  CHECK(gradgradcheck([](std::vector<Tensor>& in) { return L::householder_product(in[0], in[1]); },
                      {randn({2, 4, 3}, f64), randn({2, 3}, f64)}));
  CHECK_THROWS_WITH_AS(L::householder_product(randn({3, 4}, f64), randn({2}, f64)), doctest::Contains("m >= n"),
                       kiln::Error);
  CHECK_THROWS_WITH_AS(L::householder_product(randn({4, 3}, f64), randn({4}, f64)), doctest::Contains("k <= n"),
                       kiln::Error);
  Tensor leaf = randn({3, 3}, f64).requires_grad_(true);
  CHECK_THROWS_WITH_AS(sum(geqrf(leaf).a).backward(), doctest::Contains("geqrf: the derivative is not implemented"),
                       kiln::Error);
}

TEST_CASE("lu_factor, lu, lu_unpack and lu_solve: P L U = A, LAPACK's pivots, the four solves, gradients") {
  manual_seed(45);
  // getrf's first step swaps in the row of largest |a(i, 0)|: pivots are 1-based
  const L::LUFactor t = L::lu_factor(T({1, 2, 4, 3}, {2, 2}));
  CHECK(t.pivots.dtype() == DType::int32);
  CHECK(t.pivots.to_vector<int32_t>() == std::vector<int32_t>{2, 2});
  CHECK(maxabs(sub(t.LU, T({4, 3, 0.25, 1.25}, {2, 2}))) < 1e-15);
  for (const Shape& s : {Shape{4, 4}, Shape{2, 3, 3}, Shape{5, 3}, Shape{3, 5}, Shape{2, 4, 6}}) {
    CAPTURE(shape_str(s));
    const Tensor A = randn(s, f64);
    const int64_t m = s[s.size() - 2], n = s.back(), k = std::min(m, n);
    const L::PLU f = L::lu(A);
    CHECK(f.L.size(-1) == k);
    CHECK(f.U.size(-2) == k);
    CHECK(maxabs(sub(matmul(f.P, matmul(f.L, f.U)), A)) < 1e-14);
    CHECK(maxabs(triu(f.L)) == maxabs(I(k)));  // unit lower: only the diagonal's ones above it
    CHECK(maxabs(tril(f.U, -1)) == 0.0);
    CHECK(maxabs(f.L) <= 1.0);  // partial pivoting: every multiplier at most 1
    CHECK(maxabs(sub(matmul(mT(f.P), f.P), I(m))) == 0.0);
  }
  const Tensor A = randn({2, 4, 4}, f64), B = randn({2, 4, 3}, f64), Bt = randn({2, 3, 4}, f64);
  const L::LUFactor f = L::lu_factor(A);
  CHECK(maxabs(sub(matmul(A, L::lu_solve(f.LU, f.pivots, B)), B)) < 1e-13);
  CHECK(maxabs(sub(matmul(mT(A), L::lu_solve(f.LU, f.pivots, B, true, true)), B)) < 1e-13);
  CHECK(maxabs(sub(matmul(L::lu_solve(f.LU, f.pivots, Bt, false), A), Bt)) < 1e-13);
  CHECK(maxabs(sub(matmul(L::lu_solve(f.LU, f.pivots, Bt, false, true), mT(A)), Bt)) < 1e-13);
  // gradients: of the factors (sign-free: P fixed under small steps away from ties)
  for (const Shape& s : {Shape{3, 3}, Shape{4, 2}, Shape{2, 4}}) {
    CAPTURE(shape_str(s));
    CHECK(gradcheck([](std::vector<Tensor>& in) { return L::lu_factor(in[0]).LU; }, {randn(s, f64)}));
    CHECK(gradcheck([](std::vector<Tensor>& in) { const L::PLU r = L::lu(in[0]); return cat({r.L.reshape({-1}), r.U.reshape({-1})}, 0); },
                    {randn(s, f64)}));
  }
  CHECK(gradgradcheck([](std::vector<Tensor>& in) { return L::lu_factor(in[0]).LU; }, {randn({3, 3}, f64)}));
  for (bool left : {true, false})
    for (bool adjoint : {true, false}) {
      CAPTURE(left);
      CAPTURE(adjoint);
      const Tensor Ai = randn({3, 3}, f64);
      CHECK(gradcheck([&](std::vector<Tensor>& in) {
              const L::LUFactor g = L::lu_factor(in[0]);
              return L::lu_solve(g.LU, g.pivots, in[1], left, adjoint);
            },
            {Ai, randn(left ? Shape{3, 2} : Shape{2, 3}, f64)}));
    }
  {  // without pivoting: A = L U, pivots 1..k, the identity P; the same as pivoting when no swap is made
    const Tensor Ad = add(randn({2, 4, 3}, f64), mul(eye(4, 3, f64), 6.0));  // a dominant diagonal: no swaps
    const L::PLU np = L::lu(Ad, false), pp = L::lu(Ad);
    CHECK(maxabs(sub(matmul(np.L, np.U), Ad)) < 1e-14);
    CHECK(maxabs(sub(np.P, I(4))) == 0.0);
    CHECK(maxabs(sub(np.L, pp.L)) == 0.0);
    CHECK(L::lu_factor(Ad, false).pivots.to_vector<int32_t>() == std::vector<int32_t>{1, 2, 3, 1, 2, 3});
    const Tensor swap_needed = T({1, 2, 4, 3}, {2, 2});  // pivoting would swap; without it L(1, 0) = 4
    const L::PLU ns = L::lu(swap_needed, false);
    CHECK(maxabs(sub(ns.L, T({1, 0, 4, 1}, {2, 2}))) == 0.0);
    CHECK(maxabs(sub(ns.U, T({1, 2, 0, -5}, {2, 2}))) == 0.0);
    CHECK(gradcheck([](std::vector<Tensor>& in) { return L::lu_factor(in[0], false).LU; }, {randn({3, 3}, f64)}));
    CHECK(L::lu_factor_ex(T({0, 1, 1, 0}, {2, 2}), false).info.to_vector<int32_t>() == std::vector<int32_t>{1});
  }
  CHECK_THROWS_WITH_AS(L::lu_solve(f.LU, f.pivots, randn({2, 3, 3}, f64)), doctest::Contains("expected B of shape"),
                       kiln::Error);
  CHECK_THROWS_WITH_AS(L::lu_unpack(f.LU, f.pivots.to(DType::int64)), doctest::Contains("int32 pivots"), kiln::Error);
  // a singular matrix factors without error: a zero on U's diagonal
  const L::LUFactor z = L::lu_factor(T({1, 2, 2, 4}, {2, 2}));
  CHECK(z.LU.to_vector<double>()[3] == 0.0);
}

TEST_CASE("vecdot, norm, cond, vander, tensorinv, tensorsolve, lu_factor_ex: definitions, gradients, errors") {
  manual_seed(46);
  const Tensor x = randn({3, 4}, f64), y = randn({3, 4}, f64);
  CHECK(maxabs(sub(L::vecdot(x, y), sum(mul(x, y), {-1}))) == 0.0);
  CHECK(L::vecdot(x, y, 0).shape() == Shape{4});
  // norm: vector or matrix by PyTorch's rule
  CHECK(std::abs(L::norm(x).item() - std::sqrt(sum(mul(x, x)).item())) < 1e-14);
  CHECK(std::abs(L::norm(x, 1.0).item() - L::matrix_norm(x, 1.0).item()) == 0.0);         // 2-D with ord: matrix
  CHECK(maxabs(sub(L::norm(x, 1.0, {1}), sum(abs(x), {1}))) < 1e-14);                      // one dim: vector
  CHECK(std::abs(L::norm(x, "nuc").item() - sum(L::svdvals(x)).item()) < 1e-14);
  const Tensor b3 = randn({2, 3, 5}, f64);
  CHECK(maxabs(sub(L::norm(b3, 2.0, {2, 0}), L::matrix_norm(b3.permute({1, 2, 0}), 2.0))) < 1e-14);
  CHECK(L::norm(b3, "fro", {0, 2}, true).shape() == Shape{1, 3, 1});
  CHECK_THROWS_WITH_AS(L::norm(b3, 2.0), doctest::Contains("must be 1-D or 2-D"), kiln::Error);
  // cond: the singular values' ratio, or norm(A) norm(A^-1); inf at a singular matrix
  const Tensor A = randn({2, 4, 4}, f64);
  const Tensor S = L::svdvals(A);
  CHECK(maxabs(sub(L::cond(A), div(S.select(-1, 0), S.select(-1, 3)))) < 1e-12);
  CHECK(maxabs(sub(L::cond(A, -2.0), div(S.select(-1, 3), S.select(-1, 0)))) < 1e-12);
  CHECK(maxabs(sub(L::cond(A, "fro"), mul(L::matrix_norm(A), L::matrix_norm(L::inv(A))))) < 1e-12);
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor sing = stack({T({1, 2, 2, 4}, {2, 2}), T({1, 2, 3, 4}, {2, 2})}, 0);
  const std::vector<double> cs = L::cond(sing, inf).to_vector<double>();
  CHECK(std::isinf(cs[0]));
  CHECK(std::abs(cs[1] - 7.0 * 3.0) < 1e-12);  // ||A||_inf 7, ||A^-1||_inf 3
  CHECK(gradcheck([](std::vector<Tensor>& in) { return L::cond(in[0]); }, {randn({3, 3}, f64)}));
  CHECK(gradcheck([](std::vector<Tensor>& in) { return L::cond(in[0], 1.0); }, {randn({3, 3}, f64)}));
  CHECK_THROWS_WITH_AS(L::cond(randn({3, 4}, f64), 1.0), doctest::Contains("linalg.cond(ord=1)"), kiln::Error);
  // vander: increasing powers
  const Tensor v = L::vander(T({2, 3}, {2}), 4);
  CHECK(v.to_vector<double>() == std::vector<double>{1, 2, 4, 8, 1, 3, 9, 27});
  CHECK(L::vander(randn({2, 3}, f64)).shape() == Shape{2, 3, 3});
  CHECK(gradcheck([](std::vector<Tensor>& in) { return L::vander(in[0], 4); }, {randn({3}, f64)}));
  // tensorinv / tensorsolve
  const Tensor T4 = randn({4, 6, 8, 3}, f64);
  const Tensor Ti = L::tensorinv(T4, 2);
  CHECK(Ti.shape() == Shape{8, 3, 4, 6});
  CHECK(maxabs(sub(tensordot(T4, Ti, 2), eye(24, -1, f64).reshape({4, 6, 4, 6}))) < 1e-12);
  const Tensor As = randn({2, 3, 6}, f64), Bs = randn({2, 3}, f64);
  const Tensor Xs = L::tensorsolve(As, Bs);
  CHECK(Xs.shape() == Shape{6});
  CHECK(maxabs(sub(tensordot(As, Xs, 1), Bs)) < 1e-12);
  const Tensor Ad = randn({6, 2, 3}, f64);
  CHECK(maxabs(sub(L::tensorsolve(Ad, Bs, {0}), L::tensorsolve(movedim(Ad, 0, 2), Bs))) == 0.0);
  CHECK(gradcheck([](std::vector<Tensor>& in) { return L::tensorsolve(in[0], in[1]); },
                  {randn({2, 2, 4}, f64), randn({2, 2}, f64)}));
  CHECK_THROWS_WITH_AS(L::tensorinv(randn({2, 3}, f64), 1), doctest::Contains("prod(A.shape[ind:])"), kiln::Error);
  // lu_factor_ex: getrf's info
  const L::LUFactorEx e = L::lu_factor_ex(stack({T({1, 2, 2, 4}, {2, 2}), I(2)}, 0));
  CHECK(e.info.dtype() == DType::int32);
  CHECK(e.info.to_vector<int32_t>() == std::vector<int32_t>{2, 0});
}

TEST_CASE("pinv, matrix_rank and lstsq: Moore-Penrose conditions, tolerances, minimum norm") {
  manual_seed(44);
  // rank 2 in a 5 x 4 matrix
  const Tensor A = matmul(randn({5, 2}, f64), randn({2, 4}, f64));
  const Tensor P = L::pinv(A);
  CHECK(P.shape() == Shape{4, 5});
  CHECK(maxabs(sub(matmul(matmul(A, P), A), A)) < 1e-12);
  CHECK(maxabs(sub(matmul(matmul(P, A), P), P)) < 1e-12);
  CHECK(maxabs(sub(mT(matmul(A, P)), matmul(A, P))) < 1e-12);
  CHECK(maxabs(sub(mT(matmul(P, A)), matmul(P, A))) < 1e-12);
  CHECK(L::matrix_rank(A).item<int64_t>() == 2);
  CHECK(L::matrix_rank(A).dtype() == DType::int64);
  CHECK(L::matrix_rank(randn({3, 6, 4}, f64)).to_vector<int64_t>() == std::vector<int64_t>{4, 4, 4});
  // tolerances: singular values 1, 1e-3: rtol 1e-2 drops the second, atol 0.1 too
  const Tensor D = T({1, 0, 0, 1e-3}, {2, 2});
  CHECK(L::matrix_rank(D).item<int64_t>() == 2);
  CHECK(L::matrix_rank(D, std::nullopt, 1e-2).item<int64_t>() == 1);
  CHECK(L::matrix_rank(D, 0.1).item<int64_t>() == 1);
  CHECK(maxabs(sub(L::pinv(D, std::nullopt, 1e-2), T({1, 0, 0, 0}, {2, 2}))) < 1e-15);
  CHECK(maxabs(sub(L::pinv(D), T({1, 0, 0, 1e3}, {2, 2}))) < 1e-10);
  // hermitian: through eigh, the same pseudo-inverse of a symmetric matrix
  const Tensor S = matmul(A, mT(A));
  CHECK(maxabs(sub(L::pinv(S, std::nullopt, std::nullopt, true), L::pinv(S))) < 1e-10);
  CHECK(L::matrix_rank(S, std::nullopt, std::nullopt, true).item<int64_t>() == 2);
  // lstsq: the normal equations' solution when A has full column rank
  const Tensor Af = randn({2, 6, 3}, f64), B = randn({2, 6, 2}, f64);
  const L::Lstsq r = L::lstsq(Af, B);
  CHECK(maxabs(sub(r.solution, L::solve(matmul(mT(Af), Af), matmul(mT(Af), B)))) < 1e-12);
  CHECK(r.rank.to_vector<int64_t>() == std::vector<int64_t>{3, 3});
  // rank-deficient and underdetermined: the minimum-norm solution, pinv(A) B
  const Tensor b = randn({5, 3}, f64);
  const L::Lstsq d = L::lstsq(A, b);
  CHECK(maxabs(sub(d.solution, matmul(P, b))) < 1e-11);
  CHECK(d.rank.item<int64_t>() == 2);
  const Tensor W = randn({3, 5}, f64), bw = randn({3}, f64);  // a vector right-hand side
  const Tensor xw = L::lstsq(W, bw).solution;
  CHECK(xw.shape() == Shape{5});
  CHECK(maxabs(sub(matmul(W, xw), bw)) < 1e-13);
  CHECK(maxabs(sub(xw, matmul(L::pinv(W), bw))) < 1e-13);
  CHECK(L::lstsq(Af, randn({4, 1, 6, 2}, f64)).solution.shape() == Shape{4, 2, 3, 2});  // broadcast
  CHECK_THROWS_WITH_AS(L::lstsq(Af, randn({2, 5, 2}, f64)), doctest::Contains("do not fit"), kiln::Error);
}

TEST_CASE("matrix_norm, matrix_exp, matrix_power, multi_dot, cholesky_solve") {
  manual_seed(45);
  const Tensor A = T({1, -2, 3, 4}, {2, 2});
  // column sums of |A|: 4, 6; row sums: 3, 7; singular values sqrt(15 +- sqrt(125))
  const double s1 = std::sqrt(15 + std::sqrt(125.0)), s2 = std::sqrt(15 - std::sqrt(125.0));
  CHECK(L::matrix_norm(A).item() == doctest::Approx(std::sqrt(30.0)).epsilon(1e-15));
  CHECK(L::matrix_norm(A, "nuc").item() == doctest::Approx(s1 + s2).epsilon(1e-14));
  CHECK(L::matrix_norm(A, 2).item() == doctest::Approx(s1).epsilon(1e-14));
  CHECK(L::matrix_norm(A, -2).item() == doctest::Approx(s2).epsilon(1e-14));
  CHECK(L::matrix_norm(A, 1).item() == 6.0);
  CHECK(L::matrix_norm(A, -1).item() == 4.0);
  CHECK(L::matrix_norm(A, INFINITY).item() == 7.0);
  CHECK(L::matrix_norm(A, -INFINITY).item() == 3.0);
  CHECK(L::matrix_norm(randn({3, 2, 4}, f64), 1, true).shape() == Shape{3, 1, 1});
  CHECK(L::matrix_norm(randn({3, 2, 4}, f64), "nuc", true).shape() == Shape{3, 1, 1});
  CHECK_THROWS_WITH_AS(L::matrix_norm(A, 3), doctest::Contains("ord must be one of"), kiln::Error);
  CHECK_THROWS_WITH_AS(L::matrix_norm(A, "max"), doctest::Contains("'fro', 'nuc'"), kiln::Error);
  // exp: of a diagonal, of a nilpotent, of a rotation generator
  CHECK(maxabs(sub(L::matrix_exp(T({1, 0, 0, -2}, {2, 2})), T({std::exp(1.0), 0, 0, std::exp(-2.0)}, {2, 2}))) <
        1e-15);
  CHECK(maxabs(sub(L::matrix_exp(T({0, 1, 0, 0}, {2, 2})), T({1, 1, 0, 1}, {2, 2}))) < 1e-15);
  const double th = 0.7;
  CHECK(maxabs(sub(L::matrix_exp(T({0, -th, th, 0}, {2, 2})),
                   T({std::cos(th), -std::sin(th), std::sin(th), std::cos(th)}, {2, 2}))) < 1e-15);
  const Tensor M = randn({2, 4, 4}, f64);
  CHECK(maxabs(sub(matmul(L::matrix_exp(M), L::matrix_exp(neg(M))), I(4))) < 1e-12);
  // powers against repeated products
  Tensor p = I(4).expand({2, 4, 4});
  for (int64_t k = 0; k <= 7; ++k) {
    CAPTURE(k);
    CHECK(maxabs(sub(L::matrix_power(M, k), p)) < 1e-11 * (1 + maxabs(p)));
    p = matmul(p, M);
  }
  const Tensor Mi = add(M, mul(I(4), 4.0));
  CHECK(maxabs(sub(L::matrix_power(Mi, -3), L::inv(matmul(Mi, matmul(Mi, Mi))))) < 1e-14);
  // multi_dot: the same product in any order, vectors at the ends
  const Tensor a = randn({3}, f64), B1 = randn({3, 10}, f64), B2 = randn({10, 2}, f64), B3 = randn({2, 5}, f64),
               c = randn({5}, f64);
  CHECK(maxabs(sub(L::multi_dot({B1, B2, B3}), matmul(matmul(B1, B2), B3))) < 1e-13);
  const Tensor v = L::multi_dot({a, B1, B2, B3, c});
  CHECK(v.dim() == 0);
  CHECK(v.item() == doctest::Approx(matmul(matmul(matmul(matmul(a, B1), B2), B3), c).item()).epsilon(1e-13));
  CHECK_THROWS_WITH_AS(L::multi_dot({B1, B3}), doctest::Contains("cannot be multiplied"), kiln::Error);
  CHECK_THROWS_WITH_AS(L::multi_dot({B1}), doctest::Contains("at least 2"), kiln::Error);
  // cholesky_solve: A X = B from the factor, lower or upper
  const Tensor Ms = randn({2, 4, 4}, f64), Aspd = add(matmul(Ms, mT(Ms)), mul(I(4), 4.0)), Bc = randn({2, 4, 3}, f64);
  const Tensor Lc = L::cholesky(Aspd);
  CHECK(maxabs(sub(L::cholesky_solve(Bc, Lc), L::solve(Aspd, Bc))) < 1e-13);
  CHECK(maxabs(sub(L::cholesky_solve(Bc, mT(Lc), true), L::solve(Aspd, Bc))) < 1e-13);
}

TEST_CASE("spectral linalg: float64 first and second derivatives") {
  manual_seed(46);
  // eigh of a symmetric input; V's sign is arbitrary, so differentiate V's squares and
  // V diag(f(w)) V^T
  auto symf = [](const Tensor& x) { return sym(x); };
  CHECK(gradcheck([&](auto& t) { return L::eigh(symf(t[0])).eigenvalues; }, {randn({2, 4, 4}, f64)}));
  CHECK(gradcheck([&](auto& t) { return mul(L::eigh(symf(t[0])).eigenvectors, L::eigh(symf(t[0])).eigenvectors); },
                  {randn({4, 4}, f64)}));
  CHECK(gradcheck(
      [&](auto& t) {
        const L::Eigh e = L::eigh(symf(t[0]), true);
        return matmul(mul(e.eigenvectors, exp(e.eigenvalues).unsqueeze(-2)), mT(e.eigenvectors));
      },
      {randn({3, 3}, f64)}));
  CHECK(gradgradcheck([&](auto& t) { return L::eigvalsh(symf(t[0])); }, {randn({3, 3}, f64)}));
  CHECK(gradgradcheck(
      [&](auto& t) { return mul(L::eigh(symf(t[0])).eigenvectors, L::eigh(symf(t[0])).eigenvectors); },
      {randn({3, 3}, f64)}));
  // svd: S, and U Vh (the polar factor's orthogonal part) and U's squares, sign-free
  for (const Shape& s : {Shape{4, 3}, Shape{3, 4}, Shape{3, 3}}) {
    CAPTURE(shape_str(s));
    CHECK(gradcheck([](auto& t) { return L::svdvals(t[0]); }, {randn(s, f64)}));
    CHECK(gradcheck([](auto& t) { return L::svd(t[0], false).S; }, {randn(s, f64)}));
    CHECK(gradcheck(
        [](auto& t) {
          const L::SVD r = L::svd(t[0], false);
          return add(sum(matmul(r.U, r.Vh)), add(sum(mul(r.U, r.U)), sum(mul(r.Vh, r.Vh))));
        },
        {randn(s, f64)}));
    CHECK(gradgradcheck([](auto& t) { const L::SVD r = L::svd(t[0], false); return matmul(r.U, r.Vh); },
                        {randn(s, f64)}));
  }
  CHECK(gradcheck(
      [](auto& t) {
        const L::SVD r = L::svd(t[0]);  // full_matrices: the first k columns enter
        return matmul(r.U.narrow(-1, 0, 3), r.Vh);
      },
      {randn({5, 3}, f64)}));
  // repeated singular values and eigenvalues: the values' gradients stay finite (U Vh, V V^T)
  Tensor Id = I(3).requires_grad_(true);
  sum(L::svdvals(Id)).backward();
  CHECK(maxabs(sub(Id.grad(), I(3))) < 1e-15);
  Tensor Id2 = I(3).requires_grad_(true);
  sum(L::eigvalsh(Id2)).backward();
  CHECK(maxabs(sub(Id2.grad(), I(3))) < 1e-15);
  // qr: unique (R's diagonal signs fixed), so differentiated directly
  for (const Shape& s : {Shape{2, 5, 3}, Shape{3, 5}, Shape{4, 4}}) {
    CAPTURE(shape_str(s));
    CHECK(gradcheck([](auto& t) { return L::qr(t[0]).Q; }, {randn(s, f64)}));
    CHECK(gradcheck([](auto& t) { return L::qr(t[0]).R; }, {randn(s, f64)}));
  }
  CHECK(gradcheck([](auto& t) { return L::qr(t[0], "complete").Q; }, {randn({3, 5}, f64)}));
  CHECK(gradgradcheck([](auto& t) { const L::QR r = L::qr(t[0]); return add(sum(r.Q), sum(r.R)); },
                      {randn({4, 3}, f64)}));
  // pinv, lstsq, matrix_exp, matrix_power, multi_dot, cholesky_solve, matrix_norm
  for (const Shape& s : {Shape{4, 3}, Shape{3, 4}}) {
    CHECK(gradcheck([](auto& t) { return L::pinv(t[0]); }, {randn(s, f64)}));
    CHECK(gradgradcheck([](auto& t) { return L::pinv(t[0]); }, {randn(s, f64)}));
  }
  CHECK(gradcheck([&](auto& t) { return L::pinv(symf(t[0]), std::nullopt, std::nullopt, true); }, {randn({3, 3}, f64)}));
  CHECK(gradcheck([](auto& t) { return L::lstsq(t[0], t[1]).solution; }, {randn({5, 3}, f64), randn({2, 5, 2}, f64)}));
  CHECK(gradcheck([](auto& t) { return L::lstsq(t[0], t[1]).solution; }, {randn({3, 5}, f64), randn({3}, f64)}));
  CHECK(gradgradcheck([](auto& t) { return L::lstsq(t[0], t[1]).solution; }, {randn({4, 3}, f64), randn({4, 2}, f64)}));
  CHECK(gradcheck([](auto& t) { return L::matrix_exp(t[0]); }, {randn({2, 3, 3}, f64)}));
  CHECK(gradgradcheck([](auto& t) { return L::matrix_exp(t[0]); }, {randn({3, 3}, f64)}));
  CHECK(gradcheck([](auto& t) { return L::matrix_power(t[0], 5); }, {randn({3, 3}, f64)}));
  CHECK(gradcheck([](auto& t) { return L::matrix_power(t[0], -2); }, {add(randn({3, 3}, f64), mul(I(3), 3.0))}));
  CHECK(gradcheck([](auto& t) { return L::multi_dot({t[0], t[1], t[2]}); },
                  {randn({3}, f64), randn({3, 4}, f64), randn({4, 2}, f64)}));
  const Tensor Lf = add(tril(randn({3, 3}, f64)), mul(I(3), 3.0));
  // PyTorch's gradient treats the factor as a full matrix (cholesky_solve_backward), while the
  // solve reads one triangle: checked through tril / triu
  CHECK(gradcheck([](auto& t) { return L::cholesky_solve(t[0], tril(t[1])); }, {randn({2, 3, 2}, f64), Lf}));
  CHECK(gradgradcheck([](auto& t) { return L::cholesky_solve(t[0], triu(t[1]), true); }, {randn({3, 2}, f64), mT(Lf)}));
  for (const double ord : {2.0, -2.0, 1.0, -double(INFINITY)}) {
    CAPTURE(ord);
    CHECK(gradcheck([ord](auto& t) { return L::matrix_norm(t[0], ord); }, {randn({2, 3, 4}, f64)}));
  }
  CHECK(gradcheck([](auto& t) { return L::matrix_norm(t[0], "nuc"); }, {randn({3, 4}, f64)}));
  CHECK(gradcheck([](auto& t) { return L::matrix_norm(t[0]); }, {randn({3, 4}, f64)}));
}
