// torch.linalg's cholesky, solve, solve_triangular, inv, det, slogdet, logdet (ops/linalg.h):
// the defining identities on batches, PyTorch's broadcasting and vector rules, its failure
// messages, float32 in and out, and float64 first and second derivatives.
// (Against PyTorch 2.15: 1,901 values, gradients and second derivatives, docs/training.md.)
#include <doctest/doctest.h>
#include <cmath>
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
// A batch of well-conditioned symmetric positive-definite matrices of shape s (..., n, n).
Tensor spd(const Shape& s) {
  const Tensor m = randn(s, f64);
  return add(matmul(m, mT(m)), mul(eye(s.back(), -1, f64), double(s.back())));
}
}  // namespace

TEST_CASE("cholesky: L L^T = A, lower triangular, upper = L^T, PyTorch's error") {
  manual_seed(31);
  const Tensor A = spd({3, 2, 5, 5});
  const Tensor Lo = L::cholesky(A);
  CHECK(Lo.shape() == Shape{3, 2, 5, 5});
  CHECK(maxabs(sub(matmul(Lo, mT(Lo)), A)) < 1e-13);
  CHECK(maxabs(triu(Lo, 1)) == 0.0);
  CHECK(min(L::diagonal(Lo)).item() > 0.0);
  CHECK(maxabs(sub(L::cholesky(A, true), mT(Lo))) == 0.0);
  // only the lower triangle is read (LAPACK's potrf)
  CHECK(maxabs(sub(L::cholesky(add(A, triu(randn({3, 2, 5, 5}, f64), 1))), Lo)) == 0.0);
  const Tensor bad = T({4, 2, 0, 2, 1, 0, 0, 0, 1}, {3, 3});  // the 2 x 2 minor has det 0
  CHECK_THROWS_WITH_AS(L::cholesky(bad), doctest::Contains("the leading minor of order 2 is not positive-definite"),
                       kiln::Error);
  CHECK_THROWS_WITH_AS(L::cholesky(stack({eye(3, -1, f64), bad})), doctest::Contains("matrix 1 of the batch"),
                       kiln::Error);
  CHECK(L::cholesky(A.to(DType::float32)).dtype() == DType::float32);
  CHECK(L::cholesky(zeros({0, 0}, f64)).shape() == Shape{0, 0});
}

TEST_CASE("solve and solve_triangular: residuals, vectors, broadcasting, left and right") {
  manual_seed(32);
  const Tensor A = add(randn({2, 4, 4}, f64), mul(eye(4, -1, f64), 4.0));
  const Tensor B = randn({2, 4, 3}, f64);
  CHECK(maxabs(sub(matmul(A, L::solve(A, B)), B)) < 1e-13);
  // a vector, and A's batch + (n): PyTorch's vector rule
  const Tensor b = randn({4}, f64), bb = randn({2, 4}, f64);
  CHECK(L::solve(A, b).shape() == Shape{2, 4});
  CHECK(maxabs(sub(matmul(A, L::solve(A, bb).unsqueeze(-1)).squeeze(-1), bb)) < 1e-13);
  // batch dims broadcast: (2, 4, 4) with (3, 1, 4, 2)
  const Tensor Bc = randn({3, 1, 4, 2}, f64);
  const Tensor Xc = L::solve(A, Bc);
  CHECK(Xc.shape() == Shape{3, 2, 4, 2});
  CHECK(maxabs(sub(matmul(A, Xc), Bc)) < 1e-13);
  // right: X A = B
  const Tensor Bt = randn({2, 3, 4}, f64);
  CHECK(maxabs(sub(matmul(L::solve(A, Bt, false), A), Bt)) < 1e-13);
  // triangular: against the general solve; unitriangular ignores the diagonal
  const Tensor Tl = add(tril(randn({2, 4, 4}, f64)), mul(eye(4, -1, f64), 3.0));
  CHECK(maxabs(sub(L::solve_triangular(Tl, B, false), L::solve(Tl, B))) < 1e-13);
  CHECK(maxabs(sub(L::solve_triangular(mT(Tl), Bt, true, false), L::solve(mT(Tl), Bt, false))) < 1e-13);
  const Tensor unit = add(tril(Tl, -1), eye(4, -1, f64));
  CHECK(maxabs(sub(L::solve_triangular(Tl, B, false, true, true), L::solve(unit, B))) < 1e-13);
  // errors
  const Tensor singular = T({1, 2, 2, 4}, {2, 2});
  CHECK_THROWS_WITH_AS(L::solve(singular, T({1, 1}, {2})), doctest::Contains("singular"), kiln::Error);
  CHECK_THROWS_WITH_AS(L::inv(singular), doctest::Contains("diagonal element 2"), kiln::Error);
  CHECK_THROWS_WITH_AS(L::solve(randn({3, 4}, f64), B), doctest::Contains("square matrices"), kiln::Error);
  CHECK_THROWS_WITH_AS(L::solve(A, randn({2, 5, 3}, f64)), doctest::Contains("do not fit A X = B"), kiln::Error);
  CHECK_THROWS_AS(L::solve(from_vector<int64_t>({1, 0, 0, 1}, {2, 2}, {.dtype = DType::int64}), b), kiln::Error);
}

TEST_CASE("inv, det, slogdet, logdet") {
  manual_seed(33);
  const Tensor A = add(randn({3, 4, 4}, f64), mul(eye(4, -1, f64), 2.0));
  CHECK(maxabs(sub(matmul(A, L::inv(A)), eye(4, -1, f64))) < 1e-13);
  CHECK(L::det(T({2, 1, 1, 3}, {2, 2})).item() == doctest::Approx(5.0).epsilon(1e-15));
  CHECK(L::det(T({0, 1, 1, 0}, {2, 2})).item() == -1.0);  // a row swap
  CHECK(L::det(T({1, 2, 2, 4}, {2, 2})).item() == 0.0);
  CHECK(L::det(zeros({0, 0}, f64)).item() == 1.0);
  const Tensor B = add(randn({3, 4, 4}, f64), mul(eye(4, -1, f64), 2.0));
  CHECK(maxabs(sub(L::det(matmul(A, B)), mul(L::det(A), L::det(B)))) < 1e-10 * maxabs(L::det(matmul(A, B))));
  const L::SignLogAbsDet s = L::slogdet(A);
  CHECK(maxabs(sub(mul(s.sign, exp(s.logabsdet)), L::det(A))) < 1e-12 * maxabs(L::det(A)));
  const L::SignLogAbsDet z = L::slogdet(T({1, 2, 2, 4}, {2, 2}));
  CHECK(z.sign.item() == 0.0);
  CHECK(z.logabsdet.item() == -INFINITY);
  CHECK(std::isnan(L::logdet(T({0, 1, 1, 0}, {2, 2})).item()));  // det -1
  CHECK(L::logdet(T({2, 0, 0, 3}, {2, 2})).item() == doctest::Approx(std::log(6.0)).epsilon(1e-15));
  // det's gradient at a singular matrix is its cofactor matrix (PyTorch 2.15's, through an SVD:
  // [[4, 4, -4], [-2, -2, 2], [0, 0, 0]]), and twice differentiable there
  Tensor sing = T({1, 2, 3, 2, 4, 6, 1, 0, 1}, {3, 3}).requires_grad_(true);
  const Tensor gs = kiln::grad({L::det(sing)}, {sing}, {}, {.create_graph = true})[0];
  CHECK(maxabs(sub(gs, T({4, 4, -4, -2, -2, 2, 0, 0, 0}, {3, 3}))) < 1e-14);
  CHECK(maxabs(sub(kiln::grad({sum(gs)}, {sing})[0], T({-1, 4, -3, 0, -2, 2, 1, -2, 1}, {3, 3}))) < 1e-14);
  CHECK(maxabs(sub(L::cofactor(A), mul(L::det(A).unsqueeze(-1).unsqueeze(-1), mT(L::inv(A))))) < 1e-12);
  CHECK(gradcheck([](auto& t) { return L::det(t[0]); }, {T({1, 2, 3, 2, 4, 6, 1, 0, 1}, {3, 3})}));
  // log |det|'s gradient there is infinite (cofactor / 0), as PyTorch's
  Tensor sing2 = T({1, 2, 2, 4}, {2, 2}).requires_grad_(true);
  L::slogdet(sing2).logabsdet.backward();
  CHECK(std::isinf(sing2.grad().to_vector<double>()[0]));
  CHECK(L::inv(A.to(DType::float32)).dtype() == DType::float32);
  CHECK(L::diagonal(T({1, 2, 3, 4, 5, 6}, {2, 3})).to_vector<double>() == std::vector<double>{1, 5});
}

TEST_CASE("linalg: float64 first and second derivatives") {
  manual_seed(34);
  // cholesky reads one triangle: differentiate through a symmetric, positive-definite input
  auto sym_pd = [](const Tensor& x) { return add(matmul(x, mT(x)), mul(eye(x.size(-1), -1, f64), 2.0)); };
  CHECK(gradcheck([&](auto& t) { return L::cholesky(sym_pd(t[0])); }, {randn({2, 3, 3}, f64)}));
  CHECK(gradgradcheck([&](auto& t) { return L::cholesky(sym_pd(t[0])); }, {randn({3, 3}, f64)}));
  CHECK(gradcheck([&](auto& t) { return L::cholesky(sym_pd(t[0]), true); }, {randn({3, 3}, f64)}));
  const Tensor A = add(randn({2, 3, 3}, f64), mul(eye(3, -1, f64), 3.0));
  CHECK(gradcheck([](auto& t) { return L::solve(t[0], t[1]); }, {A, randn({2, 3, 2}, f64)}));
  CHECK(gradgradcheck([](auto& t) { return L::solve(t[0], t[1]); }, {A, randn({2, 3, 2}, f64)}));
  CHECK(gradcheck([](auto& t) { return L::solve(t[0], t[1]); }, {A, randn({3}, f64)}));
  CHECK(gradcheck([](auto& t) { return L::solve(t[0], t[1], false); }, {A, randn({4, 3}, f64)}));
  CHECK(gradcheck([](auto& t) { return L::solve(t[0], t[1]); }, {A, randn({2, 1, 3, 2}, f64)}));  // broadcast
  CHECK(gradcheck([](auto& t) { return L::inv(t[0]); }, {A}));
  CHECK(gradgradcheck([](auto& t) { return L::inv(t[0]); }, {A}));
  CHECK(gradcheck([](auto& t) { return L::det(t[0]); }, {A}));
  CHECK(gradgradcheck([](auto& t) { return L::det(t[0]); }, {A}));
  CHECK(gradcheck([](auto& t) { return L::slogdet(t[0]).logabsdet; }, {A}));
  CHECK(gradcheck([&](auto& t) { return L::logdet(sym_pd(t[0])); }, {randn({3, 3}, f64)}));
  // triangular: the input's other triangle is not read, so its gradient there is 0
  auto lower = [](const Tensor& x) { return add(tril(x), mul(eye(x.size(-1), -1, f64), 3.0)); };
  CHECK(gradcheck([&](auto& t) { return L::solve_triangular(lower(t[0]), t[1], false); },
                  {randn({3, 3}, f64), randn({2, 3, 2}, f64)}));
  CHECK(gradgradcheck([&](auto& t) { return L::solve_triangular(lower(t[0]), t[1], false); },
                      {randn({3, 3}, f64), randn({3, 2}, f64)}));
  CHECK(gradcheck([&](auto& t) { return L::solve_triangular(mT(lower(t[0])), t[1], true, false, true); },
                  {randn({3, 3}, f64), randn({2, 3}, f64)}));
  CHECK(gradcheck([](auto& t) { return L::solve_triangular(t[0], t[1], false); },
                  {add(tril(randn({3, 3}, f64)), mul(eye(3, -1, f64), 3.0)), randn({3, 2}, f64)}));
  Tensor Tm = add(tril(randn({3, 3}, f64)), mul(eye(3, -1, f64), 3.0)).requires_grad_(true);
  const Tensor gT = kiln::grad({sum(L::solve_triangular(Tm, randn({3, 2}, f64), false))}, {Tm})[0];
  CHECK(maxabs(triu(gT, 1)) == 0.0);
  CHECK(gradcheck([](auto& t) { return L::diagonal(t[0]); }, {randn({2, 3, 4}, f64)}));
}
