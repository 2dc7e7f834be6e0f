// PyTorch's smaller tensor utilities (ops/tensor_utils.h): values by hand, gradients where
// PyTorch has them (float64 gradcheck), the data-dependent ones' edge cases, and errors.
// (Against PyTorch 2.15: 617 values and gradients, docs/training.md.)
#include <doctest/doctest.h>
#include <cmath>
#include "gradcheck.h"

using namespace kiln;
using kiln::test::f64;
using kiln::test::gradcheck;
using kiln::test::T;

namespace {
std::vector<double> V(const Tensor& t) { return t.to(DType::float64).contiguous().to_vector<double>(); }
std::vector<int64_t> I64(const Tensor& t) { return t.to(DType::int64).contiguous().to_vector<int64_t>(); }
Tensor I(std::vector<int64_t> v) { return from_vector(v, {int64_t(v.size())}, {.dtype = DType::int64}); }
}  // namespace

TEST_CASE("repeat_interleave and tile") {
  const Tensor x = T({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(V(repeat_interleave(x, 2, 1)) == std::vector<double>{1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6});
  CHECK(V(repeat_interleave(x, I({1, 0, 2}), 1)) == std::vector<double>{1, 3, 3, 4, 6, 6});
  CHECK(V(repeat_interleave(x, 2)) == std::vector<double>{1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6});
  CHECK(repeat_interleave(x, 0, 0).shape() == Shape{0, 3});
  CHECK(tile(x, {2}).shape() == Shape{2, 6});
  CHECK(tile(x, {2, 1, 1}).shape() == Shape{2, 2, 3});
  CHECK(gradcheck([](auto& t) { return repeat_interleave(t[0], I({2, 1, 3}), 1); }, {randn({2, 3}, f64)}));
  CHECK_THROWS_WITH_AS(repeat_interleave(x, I({1, 2}), 1), doctest::Contains("has 2 entries"), kiln::Error);
  CHECK_THROWS_WITH_AS(repeat_interleave(x, I({1, -1, 2}), 1), doctest::Contains(">= 0"), kiln::Error);
  CHECK_THROWS_AS(repeat_interleave(x, T({1.0}, {1})), kiln::Error);
}

TEST_CASE("searchsorted, bucketize, bincount, histc") {
  const Tensor s = T({1, 3, 5, 7, 9, 2, 4, 6, 8, 10}, {2, 5});
  const Tensor v = T({3, 6, 9, 0, 1, 11, 4, 4}, {2, 4});
  CHECK(I64(searchsorted(s, v)) == std::vector<int64_t>{1, 3, 4, 0, 0, 5, 1, 1});
  CHECK(I64(searchsorted(s, v, true)) == std::vector<int64_t>{2, 3, 5, 0, 0, 5, 2, 2});
  CHECK(I64(searchsorted(T({1, 2, 2, 3}, {4}), T({2, 2.5, NAN}, {3}))) == std::vector<int64_t>{1, 3, 4});
  CHECK(I64(bucketize(T({0.5, 1, 2, 9}, {4}), T({1, 2, 3}, {3}))) == std::vector<int64_t>{0, 0, 1, 3});
  CHECK(I64(bucketize(T({0.5, 1, 2, 9}, {4}), T({1, 2, 3}, {3}), true)) == std::vector<int64_t>{0, 1, 2, 3});
  CHECK_THROWS_AS(searchsorted(T({1, 2, 3, 4}, {2, 2}), T({1, 2, 3}, {3})), kiln::Error);
  CHECK(I64(bincount(I({0, 3, 3, 1}))) == std::vector<int64_t>{1, 1, 0, 2});
  CHECK(bincount(I({0, 3, 3, 1}), {}, 6).shape() == Shape{6});
  const Tensor w = bincount(I({0, 3, 3}), T({0.5, 1, 2}, {3}).to(DType::float32));
  CHECK(w.dtype() == DType::float32);
  CHECK(V(w) == std::vector<double>{0.5, 0, 0, 3});
  CHECK(bincount(I({1}), T({2}, {1}).to(DType::int64)).dtype() == DType::float64);
  CHECK_THROWS_WITH_AS(bincount(I({0, -1})), doctest::Contains("non-negative"), kiln::Error);
  CHECK_THROWS_AS(bincount(T({1, 2}, {2})), kiln::Error);
  // histc: the top edge in the last bin, outside and NaN ignored; the data's range when min == max
  const Tensor h = T({0, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 1.5, -0.2, NAN}, {10});
  CHECK(V(histc(h, 5, 0, 1)) == std::vector<double>{2, 2, 1, 1, 1});
  CHECK(V(histc(T({1, 2, 1}, {3}), 4)) == std::vector<double>{2, 0, 0, 1});
  CHECK(V(histc(T({3, 3}, {2}), 2)) == std::vector<double>{0, 2});  // an empty range widened by 1
  CHECK_THROWS_AS(histc(I({1, 2})), kiln::Error);
  CHECK_THROWS_AS(histc(h, 0), kiln::Error);
}

TEST_CASE("unique and unique_consecutive: values, inverse, counts, NaN each its own") {
  auto [v, inv, cnt] = unique(T({3, 1, 2, 3, 1, NAN, 5, NAN}, {8}), true, true);
  const auto vv = V(v);
  CHECK(vv.size() == 6);
  CHECK(std::vector<double>(vv.begin(), vv.begin() + 4) == std::vector<double>{1, 2, 3, 5});
  CHECK((std::isnan(vv[4]) && std::isnan(vv[5])));
  CHECK(I64(inv) == std::vector<int64_t>{2, 0, 1, 2, 0, 4, 3, 5});
  CHECK(I64(cnt) == std::vector<int64_t>{2, 1, 2, 1, 1, 1});
  auto [c, ci, cc] = unique_consecutive(I({1, 1, 2, 2, 3, 1}), true, true);
  CHECK(I64(c) == std::vector<int64_t>{1, 2, 3, 1});
  CHECK(c.dtype() == DType::int64);
  CHECK(I64(ci) == std::vector<int64_t>{0, 0, 1, 1, 2, 3});
  CHECK(I64(cc) == std::vector<int64_t>{2, 2, 1, 1});
  auto [u, ui, uc] = unique(from_vector(std::vector<int64_t>{2, 1, 1, 7}, {2, 2}, {.dtype = DType::int64}));
  CHECK(I64(u) == std::vector<int64_t>{1, 2, 7});
  CHECK_FALSE(ui.defined());
  CHECK_FALSE(uc.defined());
}

TEST_CASE("take_along_dim, tril_indices, triu_indices") {
  const Tensor x = T({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(V(take_along_dim(x, from_vector(std::vector<int64_t>{2, 0}, {2, 1}, {.dtype = DType::int64}), 1)) ==
        std::vector<double>{3, 4});
  // x (3, 1) broadcast against indices (1, 3) along dim 1
  CHECK(take_along_dim(T({1, 2, 3}, {3, 1}), from_vector(std::vector<int64_t>{0, 0, 0}, {1, 3},
                                                         {.dtype = DType::int64}), 1).shape() == Shape{3, 3});
  CHECK(V(take_along_dim(x, I({5, 0}))) == std::vector<double>{6, 1});
  CHECK(gradcheck([](auto& t) { return take_along_dim(t[0], from_vector(std::vector<int64_t>{2, 0, 1}, {1, 3},
                                                                        {.dtype = DType::int64}), 0); },
                  {randn({3, 3}, f64)}));
  CHECK(I64(tril_indices(3, 3)) == std::vector<int64_t>{0, 1, 1, 2, 2, 2, 0, 0, 1, 0, 1, 2});
  CHECK(I64(triu_indices(2, 3, 1)) == std::vector<int64_t>{0, 0, 1, 1, 2, 2});
  CHECK(tril_indices(3, 4, -5).shape() == Shape{2, 0});
}

TEST_CASE("cross, cov, corrcoef, rot90, block_diag, cartesian_prod") {
  CHECK(V(cross(T({1, 0, 0}, {3}), T({0, 1, 0}, {3}))) == std::vector<double>{0, 0, 1});
  CHECK(cross(randn({4, 1, 3}), randn({2, 3})).shape() == Shape{4, 2, 3});
  CHECK(gradcheck([](auto& t) { return cross(t[0], t[1], 0); }, {randn({3, 2}, f64), randn({3, 2}, f64)}));
  CHECK_THROWS_AS(cross(randn({4}), randn({4})), kiln::Error);
  // two perfectly anti-correlated variables
  const Tensor obs = T({1, 2, 3, 4, 8, 6, 4, 2}, {2, 4});
  CHECK(V(cov(obs)) == std::vector<double>{5.0 / 3, -10.0 / 3, -10.0 / 3, 20.0 / 3});
  CHECK(V(cov(obs, 0))[0] == 1.25);
  CHECK(V(corrcoef(obs)) == std::vector<double>{1, -1, -1, 1});
  CHECK(cov(T({1, 2, 3}, {3})).item() == 1.0);
  CHECK(gradcheck([](auto& t) { return corrcoef(t[0]); }, {randn({3, 6}, f64)}));
  const Tensor m = T({1, 2, 3, 4}, {2, 2});
  CHECK(V(rot90(m)) == std::vector<double>{2, 4, 1, 3});
  CHECK(V(rot90(m, 2)) == std::vector<double>{4, 3, 2, 1});
  CHECK(V(rot90(m, -1)) == std::vector<double>{3, 1, 4, 2});
  CHECK(V(rot90(m, 4)) == V(m));
  CHECK_THROWS_AS(rot90(m, 1, {0, 0}), kiln::Error);
  const Tensor bd = block_diag({m, T({5, 6}, {2}), T({7}, {})});
  CHECK(bd.shape() == Shape{4, 5});
  CHECK(V(bd) == std::vector<double>{1, 2, 0, 0, 0, 3, 4, 0, 0, 0, 0, 0, 5, 6, 0, 0, 0, 0, 0, 7});
  CHECK(gradcheck([](auto& t) { return block_diag({t[0], t[1]}); }, {randn({2, 2}, f64), randn({1, 3}, f64)}));
  const Tensor cp = cartesian_prod({T({1, 2}, {2}), T({3, 4, 5}, {3})});
  CHECK(cp.shape() == Shape{6, 2});
  CHECK(V(cp) == std::vector<double>{1, 3, 1, 4, 1, 5, 2, 3, 2, 4, 2, 5});
}

TEST_CASE("logit, isclose, clamp with tensor bounds, fmax, fmin, heaviside") {
  CHECK(logit(T({0.5}, {1})).item() == 0.0);
  CHECK(V(logit(T({0.01, 1.0}, {2}), 0.1))[1] == doctest::Approx(std::log(9.0)));
  Tensor x = T({0.05, 0.5, 0.99}, {3}).requires_grad_();
  sum(logit(x, 0.05)).backward();
  const auto g = V(x.grad());
  CHECK(g[0] == doctest::Approx(1 / (0.05 * 0.95)));  // the end of [eps, 1 - eps] keeps its gradient
  CHECK(g[1] == 4.0);
  CHECK(g[2] == 0.0);
  CHECK(gradcheck([](auto& t) { return logit(t[0]); }, {T({0.2, 0.5, 0.7}, {3})}));
  const Tensor a = T({1, 1 + 1e-9, INFINITY, NAN, 2, -INFINITY}, {6}), b = T({1, 1, INFINITY, NAN, 2.1, INFINITY}, {6});
  CHECK(V(isclose(a, b)) == std::vector<double>{1, 1, 1, 0, 0, 0});
  CHECK(V(isclose(a, b, 0.1, 1e-8, true)) == std::vector<double>{1, 1, 1, 1, 1, 0});
  CHECK(V(isclose(I({1, 5}), I({1, 6}), 0.25, 0))[1] == 1);
  CHECK_THROWS_AS(isclose(a, b.to(DType::float32)), kiln::Error);
  const Tensor lo = T({0, 0, 0}, {3}), hi = T({1, 1, 1}, {3});
  CHECK(V(clamp(T({-1, 0.5, 2}, {3}), lo, hi)) == std::vector<double>{0, 0.5, 1});
  CHECK(V(clamp(T({-1, 0.5, 2}, {3}), Tensor(), hi)) == std::vector<double>{-1, 0.5, 1});
  CHECK(std::isnan(V(clamp(T({NAN}, {1}), T({0}, {1}), T({1}, {1})))[0]));
  CHECK(gradcheck([](auto& t) { return clamp(t[0], t[1], t[2]); },
                  {T({-1, 0.5, 2}, {3}), T({0, 0.1, 0.2}, {3}), T({1, 1.1, 1.2}, {3})}));
  const Tensor p = T({1, NAN, 3, NAN, 2}, {5}), q = T({2, 1, NAN, NAN, 2}, {5});
  const auto mx = V(fmax(p, q)), mn = V(fmin(p, q));
  CHECK(mx[0] == 2);
  CHECK(mx[1] == 1);
  CHECK(mx[2] == 3);
  CHECK(std::isnan(mx[3]));
  CHECK(mn[0] == 1);
  CHECK(mn[2] == 3);
  Tensor pa = p.clone().requires_grad_(), qa = q.clone().requires_grad_();
  sum(fmax(pa, qa)).backward();
  CHECK(V(pa.grad()) == std::vector<double>{0, 0, 1, 1, 0.5});  // ties halved; both NaN: a's
  CHECK(V(qa.grad()) == std::vector<double>{1, 1, 0, 0, 0.5});
  CHECK(V(heaviside(T({-1, 0, 2}, {3}), T({0.5, 0.25, 0.5}, {3}))) == std::vector<double>{0, 0.25, 1});
}
