// Tests of the reduce family: sum/mean/var/std/logsumexp/max/min/argmax/argmin, softmax,
// log_softmax and sum_to: hand-computed values, a naive reference over random dim sets and
// layouts, gradient checks and error messages.
#include <doctest/doctest.h>
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include "gradcheck.h"
#include "kiln/ops/helpers.h"

using namespace kiln;
using namespace kiln::test;

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

std::vector<double> vals(const Tensor& t) { return t.to_vector<double>(); }

void check_values(const Tensor& t, const std::vector<double>& want, double tol = 1e-6) {
  auto got = vals(t);
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      CHECK(std::isnan(got[i]));
    } else if (std::isinf(want[i])) {
      CHECK(got[i] == want[i]);
    } else {
      CHECK(got[i] == doctest::Approx(want[i]).epsilon(tol));
    }
  }
}

Tensor arange_f64(int64_t n, const Shape& shape) {
  return arange(0, double(n), 1.0, {.dtype = DType::float64}).reshape(shape);
}

// ---- naive reference: groups the elements of x by their output index ----
struct Groups {
  Shape out_shape;
  std::vector<std::vector<double>> g;  // per output element, values in reduce order
};

Groups group(const Tensor& x, const Dims& dims_in, bool keepdim) {
  auto dims = wrap_dims(dims_in, x.dim(), "test");
  std::vector<bool> red(size_t(x.dim()), false);
  for (auto d : dims) red[size_t(d)] = true;
  Groups G;
  Shape kept;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (!red[size_t(d)]) { G.out_shape.push_back(x.size(d)); kept.push_back(x.size(d)); }
    else if (keepdim) G.out_shape.push_back(1);
  }
  G.g.resize(size_t(shape_numel(kept)));
  auto v = vals(x);
  const Shape& s = x.shape();
  for (int64_t f = 0; f < x.numel(); ++f) {
    int64_t rem = f, o = 0, mul = 1;
    Shape idx(s.size());
    for (int64_t d = x.dim() - 1; d >= 0; --d) { idx[size_t(d)] = rem % s[size_t(d)]; rem /= s[size_t(d)]; }
    for (int64_t d = x.dim() - 1; d >= 0; --d)
      if (!red[size_t(d)]) { o += idx[size_t(d)] * mul; mul *= s[size_t(d)]; }
    G.g[size_t(o)].push_back(v[size_t(f)]);
  }
  return G;
}

template <class F>
std::vector<double> map_groups(const Groups& G, F f) {
  std::vector<double> out;
  for (auto& g : G.g) out.push_back(f(g));
  return out;
}

double ref_sum(const std::vector<double>& g) { double s = 0; for (double v : g) s += v; return s; }
double ref_mean(const std::vector<double>& g) { return ref_sum(g) / double(g.size()); }
double ref_var(const std::vector<double>& g, double corr) {
  double m = ref_mean(g), s = 0;
  for (double v : g) s += (v - m) * (v - m);
  return s / (double(g.size()) - corr);
}
double ref_lse(const std::vector<double>& g) {
  double m = *std::max_element(g.begin(), g.end()), s = 0;
  for (double v : g) s += std::exp(v - m);
  return m + std::log(s);
}

// A random non-empty subset of dims of an nd tensor, with some dims negative.
Dims random_dims(std::mt19937& rng, int64_t nd) {
  Dims d;
  for (int64_t k = 0; k < nd; ++k)
    if (rng() % 2) d.push_back(rng() % 2 ? k : k - nd);
  if (d.empty()) d.push_back(int64_t(rng() % uint32_t(nd)));
  return d;
}

Shape random_shape(std::mt19937& rng, int64_t nd, int64_t max_size) {
  Shape s;
  for (int64_t k = 0; k < nd; ++k) s.push_back(1 + int64_t(rng() % uint32_t(max_size)));
  return s;
}

// x, or a non-contiguous tensor with the same values (transposed copy transposed back)
Tensor maybe_noncontiguous(const Tensor& x, bool nc) {
  if (!nc || x.dim() < 2) return x;
  return x.transpose(0, x.dim() - 1).contiguous().transpose(0, x.dim() - 1);
}

}  // namespace

// ================================================================ sum

TEST_CASE("sum: hand-computed values") {
  Tensor x = arange_f64(24, {2, 3, 4});
  CHECK(sum(x).dim() == 0);
  CHECK(sum(x).item() == 276.0);
  Tensor s0 = sum(x, {0});
  CHECK(s0.shape() == Shape{3, 4});
  check_values(s0, {12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 34});
  check_values(sum(x, {-1}), {6, 22, 38, 54, 70, 86});
  Tensor s02 = sum(x, {0, 2}, true);
  CHECK(s02.shape() == Shape{1, 3, 1});
  check_values(s02, {60, 92, 124});
  check_values(sum(x, {2, 0}), {60, 92, 124});
  check_values(sum(x, {1}), {12, 15, 18, 21, 48, 51, 54, 57});
  // non-contiguous input: transpose, slices with steps
  check_values(sum(x.transpose(0, 2), {2}), {12, 20, 28, 14, 22, 30, 16, 24, 32, 18, 26, 34});
  check_values(sum(x.slice(2, 0, 4, 2), {1, 2}), {30, 102});
  // float32 keeps its dtype
  CHECK(sum(x.to(DType::float32)).dtype() == DType::float32);
  CHECK(sum(x.to(DType::float32)).item() == 276.0);
  // 0-dim and size-1 dims
  CHECK(sum(scalar_tensor(2.5)).item() == 2.5);
  CHECK(sum(scalar_tensor(2.5), {0}).item() == 2.5);
  check_values(sum(arange_f64(3, {3, 1}), {1}), {0, 1, 2});
}

TEST_CASE("sum: integer and bool inputs sum in int64 and are not differentiable") {
  Tensor xi = from_vector<int32_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor s = sum(xi, {1});
  CHECK(s.dtype() == DType::int64);
  check_values(s, {6, 15});
  CHECK(sum(xi).item() == 21);
  Tensor xu = from_vector<uint8_t>({200, 200, 200}, {3});
  CHECK(sum(xu).item() == 600);  // no uint8 overflow
  Tensor b = gt(arange_f64(10, {10}), 6.0);
  CHECK(sum(b).dtype() == DType::int64);
  CHECK(sum(b).item() == 3);
  Tensor big = full({3}, 3e15, {.dtype = DType::int64});
  CHECK(sum(big).item<int64_t>() == int64_t(9e15));
  CHECK_FALSE(sum(xi).requires_grad());
}

TEST_CASE("sum: empty tensors") {
  Tensor e = zeros({0, 3}, {.dtype = DType::float64});
  CHECK(sum(e).item() == 0.0);
  Tensor s0 = sum(e, {0});
  CHECK(s0.shape() == Shape{3});
  check_values(s0, {0, 0, 0});
  CHECK(sum(e, {1}).shape() == Shape{0});
  CHECK(std::isnan(mean(e).item()));
}

TEST_CASE("sum: large reductions (split and column paths) match a double reference") {
  manual_seed(3);
  // full reduction of a big vector: split over threads
  Tensor x = randn({200001}, {.dtype = DType::float32});
  auto v = vals(x);
  double ref = 0;
  for (double a : v) ref += a;
  CHECK(sum(x).item() == doctest::Approx(ref).epsilon(1e-6));
  CHECK(mean(x).item() == doctest::Approx(ref / 200001).epsilon(1e-6));
  // column sums of a tall matrix (bias gradient shape) and of a wide matrix
  for (Shape sh : {Shape{5000, 37}, Shape{3, 70000}, Shape{700, 300}}) {
    Tensor m = randn(sh, {.dtype = DType::float64});
    for (Dims d : {Dims{0}, Dims{1}}) {
      auto G = group(m, d, false);
      auto want = map_groups(G, ref_sum);
      Tensor got = sum(m, d);
      CHECK(max_abs_diff(got, from_vector(want, G.out_shape)) < 1e-9);
      CHECK(max_abs_diff(max(m, d[0]).values, from_vector(map_groups(G, [](auto& g) {
                                                  return *std::max_element(g.begin(), g.end()); }),
                                                G.out_shape)) == 0.0);
    }
  }
  // integers over a big range
  Tensor xi = arange(0, 300000, 1, {.dtype = DType::int64});
  CHECK(sum(xi).item<int64_t>() == int64_t(300000) * 299999 / 2);
}

TEST_CASE("reductions: random shapes, dim sets, keepdim and layouts match a naive reference") {
  std::mt19937 rng(7);
  manual_seed(11);
  for (int trial = 0; trial < 60; ++trial) {
    int64_t nd = 1 + int64_t(rng() % 4);
    Shape sh = random_shape(rng, nd, 5);
    Dims d = trial % 10 == 0 ? Dims{} : random_dims(rng, nd);
    bool keep = rng() % 2;
    bool nc = rng() % 2;
    Tensor x = maybe_noncontiguous(randn(sh, {.dtype = DType::float64}), nc);
    INFO("shape " << shape_str(sh) << " dims " << shape_str(d) << " keepdim " << keep << " nc " << nc);
    auto G = group(x, d, keep);
    auto cmp = [&](const Tensor& got, const std::vector<double>& want) {
      CHECK(got.shape() == G.out_shape);
      CHECK(max_abs_diff(got, from_vector(want, G.out_shape)) < 1e-10);
    };
    cmp(sum(x, d, keep), map_groups(G, ref_sum));
    cmp(mean(x, d, keep), map_groups(G, ref_mean));
    bool all_big = true;
    for (auto& g : G.g) all_big = all_big && g.size() > 1;
    if (all_big) {
      cmp(var(x, d, true, keep), map_groups(G, [](auto& g) { return ref_var(g, 1); }));
      cmp(kiln::std(x, d, true, keep), map_groups(G, [](auto& g) { return std::sqrt(ref_var(g, 1)); }));
    }
    cmp(var(x, d, false, keep), map_groups(G, [](auto& g) { return ref_var(g, 0); }));
    cmp(logsumexp(x, d, keep), map_groups(G, ref_lse));
    // float32 agrees with float64 to float precision
    CHECK(max_abs_diff(sum(x.to(DType::float32), d, keep), sum(x, d, keep)) < 1e-5);
    // single-dim max/min/argmax/argmin
    int64_t dim = d.empty() ? 0 : d[0];
    auto G1 = group(x, {dim}, keep);
    auto mx = max(x, dim, keep), mn = min(x, dim, keep);
    std::vector<double> wmax, wmin, wimax, wimin;
    for (auto& g : G1.g) {
      auto itx = std::max_element(g.begin(), g.end()), itn = std::min_element(g.begin(), g.end());
      wmax.push_back(*itx);
      wmin.push_back(*itn);
      wimax.push_back(double(itx - g.begin()));
      wimin.push_back(double(itn - g.begin()));
    }
    CHECK(mx.values.shape() == G1.out_shape);
    CHECK(mx.indices.dtype() == DType::int64);
    check_values(mx.values, wmax, 1e-12);
    check_values(mn.values, wmin, 1e-12);
    check_values(mx.indices, wimax);
    check_values(mn.indices, wimin);
    check_values(argmax(x, dim, keep), wimax);
    check_values(argmin(x, dim, keep), wimin);
  }
}

TEST_CASE("large reductions: first occurrence across split chunks, same result for any thread count") {
  const int64_t n = 300001;
  std::vector<double> v(size_t(n), 0.0);
  v[200] = 5;
  v[250000] = 5;  // a tie in a later chunk
  v[1000] = -3;
  v[290000] = -3;
  Tensor x = from_vector(v, {n});
  CHECK(argmax(x, 0).item() == 200);
  CHECK(argmin(x, 0).item() == 1000);
  Tensor xg = x.detach().requires_grad_();
  Tensor xd = x.detach().requires_grad_();
  max(xd, 0).values.backward();  // the dim form's gradient goes to the index it returns
  CHECK(xd.grad().at({200}) == 1.0);
  CHECK(xd.grad().at({250000}) == 0.0);
  max(xg).backward();  // the full max splits it between the tied elements
  CHECK(xg.grad().at({200}) == 0.5);
  CHECK(xg.grad().at({250000}) == 0.5);
  v[260000] = kNaN;
  CHECK(max(from_vector(v, {n}), 0).indices.item() == 260000);
  // bitwise identical sums with 1 and 2 threads
  manual_seed(13);
  Tensor r = randn({1 << 20}, {.dtype = DType::float32});
  Tensor c = randn({100000, 3}, {.dtype = DType::float32});
  int saved = get_num_threads();
  set_num_threads(1);
  double s1 = sum(r).item(), l1 = logsumexp(r, {0}).item();
  auto c1 = sum(c, {0}).to_vector<float>();
  set_num_threads(2);
  double s2 = sum(r).item(), l2 = logsumexp(r, {0}).item();
  auto c2 = sum(c, {0}).to_vector<float>();
  set_num_threads(saved);
  CHECK(s1 == s2);
  CHECK(l1 == l2);
  CHECK(c1 == c2);
}

// ================================================================ mean / var / std

TEST_CASE("mean, var, std: hand-computed values") {
  Tensor x = T({1, 2, 3, 4, 2, 4, 6, 8}, {2, 4});
  CHECK(mean(x).item() == doctest::Approx(3.75));
  check_values(mean(x, {1}), {2.5, 5.0});
  check_values(mean(x, {0}), {1.5, 3, 4.5, 6});
  check_values(var(x, {1}), {5.0 / 3.0, 20.0 / 3.0});
  check_values(var(x, {1}, false), {1.25, 5.0});
  check_values(kiln::std(x, {1}), {std::sqrt(5.0 / 3.0), std::sqrt(20.0 / 3.0)});
  check_values(kiln::std(x, {1}, false, true), {std::sqrt(1.25), std::sqrt(5.0)});
  CHECK(kiln::std(x, {1}, false, true).shape() == Shape{2, 1});
  CHECK(var(x).item() == doctest::Approx(37.5 / 7.0));
  // one element: the unbiased variance is NaN, the biased one 0
  CHECK(std::isnan(var(T({3}, {1})).item()));
  CHECK(var(T({3}, {1}), {}, false).item() == 0.0);
  // var is shift-invariant even for a large offset (two-pass)
  Tensor big = T({1e6 + 1, 1e6 + 2, 1e6 + 3}, {3}, DType::float32);
  CHECK(var(big).item() == doctest::Approx(1.0).epsilon(1e-6));
}

TEST_CASE("mean of integers is float32") {
  Tensor xi = from_vector<int64_t>({1, 2, 3, 4}, {2, 2});
  Tensor m = mean(xi);
  CHECK(m.dtype() == DType::float32);
  CHECK(m.item() == doctest::Approx(2.5));
  check_values(mean(xi, {0}), {2, 3});
  Tensor acc = mean(eq(T({1, 2, 3, 4}, {4}), T({1, 0, 3, 0}, {4})));
  CHECK(acc.dtype() == DType::float32);
  CHECK(acc.item() == doctest::Approx(0.5));
}

// ================================================================ logsumexp

TEST_CASE("logsumexp: hand-computed values and stability") {
  check_values(logsumexp(T({1, 2, 3}, {3}), {0}), {3.4076059644443806});
  check_values(logsumexp(T({1000, 1000, -1000, -1000}, {2, 2}), {1}), {1000 + std::log(2.0), -1000 + std::log(2.0)});
  check_values(logsumexp(T({0, 0, 0, 0}, {2, 2}), {0}, true), {std::log(2.0), std::log(2.0)});
  check_values(logsumexp(T({-kInf, -kInf, -kInf, 1}, {2, 2}), {1}), {-kInf, 1});
  check_values(logsumexp(T({kInf, 1}, {2}), {0}), {kInf});
  CHECK(logsumexp(T({1, 2, 3, 4}, {2, 2}), {}).dim() == 0);
  CHECK(logsumexp(T({1, 2, 3, 4}, {2, 2}), {}).item() == doctest::Approx(4.4401896985611957));
  CHECK(logsumexp(T({1, 2}, {2}, DType::float32), {0}).dtype() == DType::float32);
}

// ================================================================ max / min

TEST_CASE("max, min, argmax, argmin: hand-computed values, ties, NaN, integers") {
  Tensor x = T({3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 9}, {3, 4});
  auto m1 = max(x, 1);
  check_values(m1.values, {4, 9, 9});
  check_values(m1.indices, {2, 1, 3});
  auto m0 = min(x, 0, true);
  CHECK(m0.values.shape() == Shape{1, 4});
  check_values(m0.values, {3, 1, 2, 1});
  check_values(m0.indices, {0, 0, 1, 0});
  check_values(argmax(x, 0), {1, 1, 2, 2});
  check_values(argmin(x, -1), {1, 2, 1});
  CHECK(argmax(x, 1, true).shape() == Shape{3, 1});
  // ties: first occurrence
  Tensor t = T({2, 7, 7, 1, 1, 7}, {6});
  CHECK(max(t, 0).indices.item() == 1);
  CHECK(min(t, 0).indices.item() == 3);
  CHECK(argmax(t, 0).item() == 1);
  // over all
  CHECK(max(x).item() == 9);
  CHECK(min(x).item() == 1);
  CHECK(max(x).dim() == 0);
  // NaN wins and propagates
  Tensor n = T({1, kNaN, 3, kNaN}, {4});
  CHECK(std::isnan(max(n).item()));
  CHECK(std::isnan(min(n, 0).values.item()));
  CHECK(max(n, 0).indices.item() == 1);
  // integers and bool keep their dtype
  Tensor xi = from_vector<int32_t>({-5, 3, 8, 8}, {2, 2});
  auto mi = max(xi, 1);
  CHECK(mi.values.dtype() == DType::int32);
  check_values(mi.values, {3, 8});
  check_values(mi.indices, {1, 0});
  CHECK(min(xi).item() == -5);
  Tensor b = gt(T({0, 2, 3}, {3}), 1.0);
  CHECK(max(b).dtype() == DType::bool_);
  CHECK(max(b).item() == 1);
  CHECK(argmin(b, 0).item() == 0);
  // 0-dim
  CHECK(max(scalar_tensor(4.0), 0).values.item() == 4.0);
  CHECK(max(scalar_tensor(4.0), 0).indices.item() == 0);
}

// ================================================================ softmax

TEST_CASE("softmax and log_softmax: hand-computed values and stability") {
  Tensor x = T({1, 2, 3}, {3});
  check_values(softmax(x, 0), {0.090030573170380462, 0.24472847105479767, 0.66524095577481771});
  check_values(log_softmax(x, 0), {-2.4076059644443806, -1.4076059644443806, -0.40760596444438063});
  Tensor big = T({1000, 1001, -1000, -1001}, {2, 2});
  check_values(softmax(big, 1), {0.2689414213699951, 0.7310585786300049, 0.7310585786300049, 0.2689414213699951});
  check_values(log_softmax(big, -1), {-1.3132616875182228, -0.31326168751822286, -0.31326168751822286,
                                      -1.3132616875182228});
  // along dim 0 (inner > 1 path)
  Tensor c = T({1, 1000, 2, 1001, 3, 1002}, {3, 2});
  check_values(softmax(c, 0), {0.090030573170380462, 0.090030573170380462, 0.24472847105479767,
                               0.24472847105479767, 0.66524095577481771, 0.66524095577481771});
  check_values(log_softmax(c, 0), {-2.4076059644443806, -2.4076059644443806, -1.4076059644443806,
                                   -1.4076059644443806, -0.40760596444438063, -0.40760596444438063});
  // -inf entries get probability 0
  check_values(softmax(T({-kInf, 0, 0}, {3}), 0), {0, 0.5, 0.5});
  // rows sum to one for random 3-D input along every dim, float32 and float64
  manual_seed(5);
  for (DType dt : {DType::float32, DType::float64}) {
    Tensor r = randn({4, 5, 300}, {.dtype = dt});
    for (int64_t d = 0; d < 3; ++d) {
      Tensor s = sum(softmax(r, d), {d});
      CHECK(max_abs_diff(s, ones_like(s)) < 1e-5);
      CHECK(max_abs_diff(exp(log_softmax(r, d)), softmax(r, d)) < 1e-6);
      CHECK(max_abs_diff(log_softmax(r, d), sub(r, logsumexp(r, {d}, true))) < 1e-5);
    }
  }
  // float32 (vectorized exp) agrees with float64 to float precision, rows and columns
  Tensor r64 = mul(randn({8, 37, 300}, {.dtype = DType::float64}), 4.0);
  for (int64_t d = 0; d < 3; ++d) {
    CHECK(max_abs_diff(softmax(r64.to(DType::float32), d), softmax(r64, d)) < 1e-6);
    CHECK(max_abs_diff(log_softmax(r64.to(DType::float32), d), log_softmax(r64, d)) < 2e-5);
    CHECK(max_abs_diff(logsumexp(r64.to(DType::float32), {d}), logsumexp(r64, {d})) < 2e-5);
  }
  // masked (-inf) scores, along rows and along columns
  Tensor masked = T({0, -kInf, 1, -kInf, -kInf, 2}, {2, 3});
  check_values(softmax(masked, 1), {0.2689414213699951, 0, 0.7310585786300049, 0, 0, 1});
  check_values(softmax(masked.t(), 0), {0.2689414213699951, 0, 0, 0, 0.7310585786300049, 1});
  check_values(softmax(masked.to(DType::float32), 1), {0.2689414213699951, 0, 0.7310585786300049, 0, 0, 1});
  // non-contiguous input
  Tensor nc = T({1, 3, 2, 2, 3, 1}, {2, 3}).t();  // (3, 2): rows [1,2],[3,3],[2,1]
  check_values(softmax(nc, 1), {0.2689414213699951, 0.7310585786300049, 0.5, 0.5, 0.7310585786300049,
                                0.2689414213699951});
  // 0-dim
  CHECK(softmax(scalar_tensor(3.0), 0).item() == 1.0);
}

// ================================================================ 16-bit inputs

TEST_CASE("16-bit inputs compute in float32") {
  Tensor x = T({1, 2, 3, 4}, {2, 2}, DType::float16);
  CHECK(sum(x).dtype() == DType::float16);
  CHECK(sum(x).item() == 10.0);
  CHECK(mean(x, {1}).dtype() == DType::float16);
  check_values(mean(x, {1}), {1.5, 3.5});
  Tensor xb = x.to(DType::bfloat16);
  CHECK(max(xb, 1).values.dtype() == DType::bfloat16);
  check_values(max(xb, 1).values, {2, 4});
  CHECK(var(xb).dtype() == DType::bfloat16);
  // softmax-family: computed in float32 and rounded once to the input's dtype, as PyTorch
  // (it returned float32); under autocast float32 (tests/core/test_autocast.cpp)
  CHECK(softmax(xb, 1).dtype() == DType::bfloat16);
  CHECK(log_softmax(x, 1).dtype() == DType::float16);
  const std::vector<double> p = softmax(x, 1).to_vector<double>();
  for (size_t i = 0; i < p.size(); ++i) {
    const double want = i % 2 ? 0.7310585786300049 : 0.2689414213699951;
    CHECK(p[i] == full({}, want, {.dtype = DType::float16}).item());  // float16(float32 result)
  }
  CHECK(log_softmax(xb, 1).to_vector<double>()[0] == full({}, -1.3132616875182228, {.dtype = DType::bfloat16}).item());
  // gradients flow back to the 16-bit leaf in its dtype
  Tensor leaf = x.detach().requires_grad_();
  sum(softmax(leaf, 1) * T({1, 0, 0, 0}, {2, 2}, DType::float32)).backward();
  CHECK(leaf.grad().dtype() == DType::float16);
  check_values(leaf.grad(), {0.19661193, -0.19661193, 0, 0}, 1e-2);
}

TEST_CASE("16-bit sum and mean on the CPU: the float32 copy's bits, without the copy") {
  // The CPU kernel widens 16-bit values as it reads them (rows 512 at a time, column blocks
  // a row at a time); it must give exactly sum(x.to(float32)).to(dtype): rows shorter and
  // longer than a chunk and not a multiple of 8, column sums (a bias gradient) over one and
  // several column blocks, and a full reduction split over R.
  std::mt19937 g(7);
  std::normal_distribution<float> nd(0.f, 3.f);
  for (DType dt : {DType::float16, DType::bfloat16})
    for (const Shape& s : std::vector<Shape>{{3, 5}, {2, 1029}, {4, 8}, {300, 7}, {2048, 129}, {37, 600}, {70000}})
      for (const std::vector<int64_t>& dims : std::vector<std::vector<int64_t>>{{-1}, {0}, {}}) {
        if (s.size() == 1 && dims == std::vector<int64_t>{-1}) continue;  // the same as {}
        CAPTURE(std::string(dtype_name(dt)));
        CAPTURE(shape_str(s));
        CAPTURE(dims.size());
        std::vector<float> v(size_t(shape_numel(s)));
        for (auto& e : v) e = nd(g);
        const Tensor x = from_vector(v, s).to(dt);
        for (bool is_mean : {false, true}) {
          const Tensor got = is_mean ? mean(x, dims) : sum(x, dims);
          const Tensor want = (is_mean ? mean(x.to(DType::float32), dims) : sum(x.to(DType::float32), dims)).to(dt);
          REQUIRE(got.dtype() == dt);
          const auto a = got.to(DType::float32).to_vector<float>(), b = want.to(DType::float32).to_vector<float>();
          REQUIRE(a.size() == b.size());
          int bad = 0;
          for (size_t i = 0; i < a.size(); ++i) bad += !(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])));
          CHECK(bad == 0);
        }
      }
  // the gradient: ones (sum) and 1/n (mean) in the input's dtype
  Tensor leaf = from_vector(std::vector<float>(24, 1.f), {4, 6}).to(DType::bfloat16).requires_grad_();
  sum(mean(leaf, {0})).backward();
  REQUIRE(leaf.grad().dtype() == DType::bfloat16);
  check_values(leaf.grad(), std::vector<double>(24, 0.25));
}

// ================================================================ gradients

TEST_CASE("gradcheck: sum, mean, var, std, logsumexp over random dims, keepdim, layouts") {
  std::mt19937 rng(19);
  manual_seed(23);
  for (int trial = 0; trial < 12; ++trial) {
    int64_t nd = 1 + int64_t(rng() % 3);
    Shape sh = random_shape(rng, nd, 4);
    for (auto& s : sh) s = std::max<int64_t>(s, 2);
    Dims d = trial % 6 == 0 ? Dims{} : random_dims(rng, nd);
    bool keep = rng() % 2;
    bool nc = trial % 2 == 1 && nd >= 2;
    INFO("shape " << shape_str(sh) << " dims " << shape_str(d) << " keepdim " << keep << " nc " << nc);
    // non-contiguous: f receives the transposed data and transposes it back
    Shape in_shape = sh;
    if (nc) std::swap(in_shape[0], in_shape[size_t(nd - 1)]);
    auto view = [nc, nd](const Tensor& t) { return nc ? t.transpose(0, nd - 1) : t; };
    Tensor x = randn(in_shape, f64);
    CHECK(gradcheck([&](auto& in) { return sum(view(in[0]), d, keep); }, {x}));
    CHECK(gradcheck([&](auto& in) { return mean(view(in[0]), d, keep); }, {x}));
    CHECK(gradcheck([&](auto& in) { return var(view(in[0]), d, true, keep); }, {x}));
    CHECK(gradcheck([&](auto& in) { return var(view(in[0]), d, false, keep); }, {x}));
    CHECK(gradcheck([&](auto& in) { return kiln::std(view(in[0]), d, true, keep); }, {x}));
    CHECK(gradcheck([&](auto& in) { return logsumexp(view(in[0]), d, keep); }, {x}));
  }
}

TEST_CASE("gradcheck: max, min (dim and all) send the gradient to the chosen element") {
  manual_seed(29);
  for (Shape sh : {Shape{5}, Shape{3, 4}, Shape{2, 3, 4}}) {
    Tensor x = randn(sh, f64);
    int64_t nd = int64_t(sh.size());
    for (int64_t d = -nd; d < nd; ++d)
      for (bool keep : {false, true}) {
        CHECK(gradcheck([&](auto& in) { return max(in[0], d, keep).values; }, {x}));
        CHECK(gradcheck([&](auto& in) { return min(in[0], d, keep).values; }, {x}));
      }
    CHECK(gradcheck([&](auto& in) { return max(in[0]); }, {x}));
    CHECK(gradcheck([&](auto& in) { return min(in[0]); }, {x}));
    if (nd >= 2) {
      CHECK(gradcheck([&](auto& in) { return max(in[0].transpose(0, 1), 0).values; }, {x}));
      CHECK(gradcheck([&](auto& in) { return min(in[0].transpose(0, 1)); }, {x}));
    }
  }
  // ties, as in PyTorch: max(x) splits the gradient evenly among the tied elements (-0 ties
  // +0, NaN ties NaN); max(x, dim) sends it to the returned (first) index
  Tensor t = T({1, 5, 5, 2}, {4}).requires_grad_();
  max(t).backward();
  check_values(t.grad(), {0, 0.5, 0.5, 0});
  Tensor t3 = T({3, 1, 3, 3}, {4}).requires_grad_();
  min(t3).backward(scalar_tensor(6.0, f64));
  check_values(t3.grad(), {0, 6, 0, 0});
  Tensor z = T({-0.0, 0.0, -1}, {3}).requires_grad_();
  max(z).backward();
  check_values(z.grad(), {0.5, 0.5, 0});
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor n = T({1, nan, 7, nan}, {4}).requires_grad_();
  max(n).backward();
  check_values(n.grad(), {0, 0.5, 0, 0.5});
  Tensor t2 = T({1, 5, 5, 2}, {2, 2}).requires_grad_();
  max(t2, 0).values.backward(T({1, 1}, {2}));
  check_values(t2.grad(), {0, 1, 1, 0});
}

TEST_CASE("max / min backward with create_graph: an inf or NaN upstream gradient reaches only the chosen element") {
  const double inf = std::numeric_limits<double>::infinity();
  for (double up : {inf, -2.0}) {
    Tensor x = T({1, 5, 2, 0, 3, 9}, {2, 3}).requires_grad_();
    Tensor y = max(x, 1).values;
    Tensor g = kiln::grad({y}, {x}, {T({up, up}, {2})}, {.create_graph = true})[0];
    const std::vector<double> v = g.to_vector<double>();
    const std::vector<double> want = {0, up, 0, 0, 0, up};
    for (size_t i = 0; i < v.size(); ++i) {
      CAPTURE(i);
      CHECK(v[i] == want[i]);
      CHECK(!std::signbit(v[i] == 0 ? v[i] : 1.0));  // +0, as without create_graph
    }
    Tensor m = kiln::grad({min(x)}, {x}, {scalar_tensor(up, f64)}, {.create_graph = true})[0];
    const std::vector<double> mv = m.to_vector<double>();
    for (size_t i = 0; i < mv.size(); ++i) CHECK(mv[i] == (i == 3 ? up : 0.0));
  }
}

TEST_CASE("std backward is 0 where std is 0 (a constant row), as in PyTorch") {
  Tensor x = T({2, 2, 2, 1, 4, 7}, {2, 3}).requires_grad_();
  kiln::std(x, {1}).backward(T({3, 5}, {2}));
  const std::vector<double> v = x.grad().to_vector<double>();
  for (int i = 0; i < 3; ++i) CHECK(v[size_t(i)] == 0.0);
  for (int i = 3; i < 6; ++i) CHECK(std::isfinite(v[size_t(i)]));
  // a single element with the biased estimator, and squares that underflow to a zero variance
  Tensor one = T({3}, {1}).requires_grad_();
  kiln::std(one, {}, false).backward();
  check_values(one.grad(), {0});
  Tensor tiny = T({1e-300, -1e-300, 0}, {3}).requires_grad_();
  kiln::std(tiny, {}).backward();
  check_values(tiny.grad(), {0, 0, 0});
  // the second derivative of a constant row is finite too
  Tensor c = T({2, 2, 2}, {3}).requires_grad_();
  Tensor dc = kiln::grad({kiln::std(c, {})}, {c}, {}, {.create_graph = true})[0];
  Tensor d2 = kiln::grad({sum(dc)}, {c})[0];
  for (double e : d2.to_vector<double>()) CHECK(std::isfinite(e));
}

TEST_CASE("gradcheck: softmax and log_softmax along every dim, non-contiguous") {
  manual_seed(31);
  for (Shape sh : {Shape{6}, Shape{3, 5}, Shape{2, 3, 4}}) {
    Tensor x = randn(sh, f64);
    int64_t nd = int64_t(sh.size());
    for (int64_t d = -nd; d < nd; ++d) {
      CHECK(gradcheck([&](auto& in) { return softmax(in[0], d); }, {x}));
      CHECK(gradcheck([&](auto& in) { return log_softmax(in[0], d); }, {x}));
    }
    if (nd >= 2) {
      CHECK(gradcheck([&](auto& in) { return softmax(in[0].transpose(0, nd - 1), -1); }, {x}));
      CHECK(gradcheck([&](auto& in) { return log_softmax(in[0].transpose(0, nd - 1), 0); }, {x}));
    }
  }
  // a sliced (strided) input
  Tensor w = randn({4, 6}, f64);
  CHECK(gradcheck([&](auto& in) { return softmax(in[0].slice(1, 0, 6, 2), 1); }, {w}));
  CHECK(gradcheck([&](auto& in) { return log_softmax(in[0].slice(0, 1, 4), 0); }, {w}));
}

TEST_CASE("gradcheck: reductions chained with a broadcast (sum_to in the backward)") {
  manual_seed(37);
  Tensor a = randn({3, 4}, f64), b = randn({4}, f64);
  CHECK(gradcheck([](auto& in) { return sum(in[0] * in[1], {0}); }, {a, b}));
  CHECK(gradcheck([](auto& in) { return softmax(in[0] + in[1], 1); }, {a, b}));
}

// ================================================================ sum_to

TEST_CASE("sum_to") {
  Tensor g = arange_f64(24, {2, 3, 4});
  CHECK(sum_to(g, {2, 3, 4}).is_same(g));
  Tensor a = sum_to(g, {3, 1});
  CHECK(a.shape() == Shape{3, 1});
  check_values(a, {60, 92, 124});
  Tensor b = sum_to(g, {4});
  check_values(b, {60, 66, 72, 78});
  Tensor c = sum_to(g, {1, 3, 4});
  CHECK(c.shape() == Shape{1, 3, 4});
  check_values(c, {12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 34});
  CHECK(sum_to(g, {}).item() == 276);
  CHECK(sum_to(g, {1, 1, 1}).shape() == Shape{1, 1, 1});
  CHECK_THROWS_WITH_AS(sum_to(g, {5}), doctest::Contains("[2, 3, 4]"), kiln::Error);
  CHECK_THROWS_AS(sum_to(g, {1, 2, 3, 4, 5}), kiln::Error);
  CHECK_THROWS_AS(sum_to(g, {2, 4}), kiln::Error);
}

// ================================================================ errors

TEST_CASE("errors: bad dims, dtypes, empty reductions, undefined tensors") {
  Tensor x = arange_f64(6, {2, 3});
  CHECK_THROWS_WITH_AS(sum(x, {2}), doctest::Contains("sum: dim 2 is out of range for input of shape [2, 3]"),
                       kiln::Error);
  CHECK_THROWS_WITH_AS(sum(x, {-3}), doctest::Contains("[2, 3]"), kiln::Error);
  CHECK_THROWS_WITH_AS(mean(x, {0, 0}), doctest::Contains("twice (input shape [2, 3])"), kiln::Error);
  CHECK_THROWS_WITH_AS(var(x, {5}), doctest::Contains("[2, 3]"), kiln::Error);
  CHECK_THROWS_WITH_AS(logsumexp(x, {1, -1}), doctest::Contains("[2, 3]"), kiln::Error);
  CHECK_THROWS_WITH_AS(max(x, 2), doctest::Contains("[2, 3]"), kiln::Error);
  CHECK_THROWS_WITH_AS(argmin(x, -3), doctest::Contains("[2, 3]"), kiln::Error);
  CHECK_THROWS_WITH_AS(softmax(x, 2), doctest::Contains("softmax: dim 2"), kiln::Error);
  CHECK_THROWS_WITH_AS(log_softmax(x, -3), doctest::Contains("[2, 3]"), kiln::Error);
  CHECK_THROWS_AS(sum(scalar_tensor(1.0), {1}), kiln::Error);
  Tensor xi = from_vector<int64_t>({1, 2, 3}, {3});
  CHECK_THROWS_WITH_AS(var(xi), doctest::Contains("int64[3]"), kiln::Error);
  CHECK_THROWS_AS(kiln::std(xi), kiln::Error);
  CHECK_THROWS_AS(logsumexp(xi, {0}), kiln::Error);
  CHECK_THROWS_WITH_AS(softmax(xi, 0), doctest::Contains("int64[3]"), kiln::Error);
  CHECK_THROWS_AS(log_softmax(xi, 0), kiln::Error);
  Tensor e = zeros({2, 0}, f64);
  CHECK_THROWS_WITH_AS(max(e, 1), doctest::Contains("[2, 0]"), kiln::Error);
  CHECK_THROWS_WITH_AS(max(e), doctest::Contains("[2, 0]"), kiln::Error);
  CHECK_THROWS_AS(argmax(e, 1), kiln::Error);
  CHECK(max(e, 0).values.shape() == Shape{0});
  Tensor u;
  CHECK_THROWS_AS(sum(u), kiln::Error);
  CHECK_THROWS_AS(max(u), kiln::Error);
  CHECK_THROWS_AS(softmax(u, 0), kiln::Error);
}

TEST_CASE("max / min / argmax over rows holding only infinities") {
  // clang's simd max (min) reduction starts from the lowest (highest) finite value
  Tensor x = T({-kInf, -kInf, -kInf, 2, kInf, kInf}, {3, 2});
  check_values(argmax(x, 1), {0, 1, 0});
  check_values(argmin(x, 1), {0, 0, 0});
  CHECK(max(T({-kInf, -kInf, -kInf}, {3})).item() == -kInf);
  CHECK(min(T({kInf, kInf}, {2})).item() == kInf);
}

TEST_CASE("vector_norm: PyTorch 2.15's values and gradients (zero norms, ties of the inf norm), errors") {
  using kiln::testing::error_of;
  const Tensor x = T({3, -4}, {2});
  CHECK(vector_norm(x).item() == 5.0);
  CHECK(vector_norm(x, 1).item() == 7.0);
  CHECK(vector_norm(x, kInf).item() == 4.0);
  CHECK(vector_norm(x, -kInf).item() == 3.0);
  CHECK(vector_norm(T({3, 0, -4}, {3}), 0).item() == 2.0);  // the count of nonzeros
  CHECK(vector_norm(x, 3).item() == doctest::Approx(std::cbrt(91.0)).epsilon(1e-15));
  CHECK(vector_norm(x, -1).item() == doctest::Approx(12.0 / 7.0).epsilon(1e-15));
  check_values(vector_norm(T({3, 4, 0, 0, 6, 8}, {3, 2}), 2, {1}, true), {5, 0, 10}, 1e-15);
  CHECK(vector_norm(T({1, 2, 3, 4}, {2, 2}), 1, {0, 1}).item() == 10.0);
  CHECK(vector_norm(ones({2, 3}, {.dtype = DType::bfloat16})).dtype() == DType::bfloat16);
  // gradients: 0 at a zero norm (PyTorch's subgradient), the inf norm's split among ties
  auto grad_of = [](const Tensor& v, double ord) {
    Tensor a = v.clone().requires_grad_(true);
    vector_norm(a, ord).backward();
    return a.grad().to_vector<double>();
  };
  for (double ord : {2.0, 3.0, 1.5, 0.5, kInf})
    CHECK(grad_of(T({0, 0, 0}, {3}), ord) == std::vector<double>{0, 0, 0});
  CHECK(grad_of(T({3, -3, 1}, {3}), kInf) == std::vector<double>{0.5, -0.5, 0});
  CHECK(grad_of(T({3, -4}, {2}), 2) == std::vector<double>{3 * (1 / 5.0), -4 * (1 / 5.0)});  // x (g / norm)
  CHECK(grad_of(T({2, 0}, {2}), 0.5) == std::vector<double>{1, 0});  // |x|^(p-1) taken as 0 at 0
  CHECK(grad_of(T({3, 0, -4}, {3}), 0) == std::vector<double>{0, 0, 0});
  manual_seed(41);
  const Tensor r = randn({3, 4}, f64);
  for (double ord : {1.0, 2.0, 3.0, 0.5, 1.5, -1.0, kInf, -kInf})
    for (const Dims& d : {Dims{}, Dims{0}, Dims{-1}, Dims{0, 1}}) {
      INFO("ord " << ord << " dims " << shape_str(d));
      CHECK(gradcheck([&](auto& in) { return vector_norm(in[0], ord, d, true); }, {r}));
    }
  CHECK(gradgradcheck([](auto& in) { return vector_norm(in[0], 2.0, {1}); }, {r}));
  CHECK(gradgradcheck([](auto& in) { return vector_norm(in[0], 3.0); }, {r}));
  CHECK(error_of([] { vector_norm(T({}, {0}), kInf); }).find("empty reduction") != std::string::npos);
  CHECK(error_of([] { vector_norm(T({}, {0}), -1); }).find("-1 norm") != std::string::npos);
  CHECK(vector_norm(T({}, {0}), 2).item() == 0.0);
  CHECK(error_of([] { vector_norm(from_vector<int64_t>({1, 2}, {2})); }).find("floating") != std::string::npos);
}

TEST_CASE("cumsum: values (int64 for integers, float32 accumulated in double), gradient, errors") {
  using kiln::testing::error_of;
  const Tensor a = T({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(vals(cumsum(a, 1)) == std::vector<double>{1, 3, 6, 4, 9, 15});
  CHECK(vals(cumsum(a, 0)) == std::vector<double>{1, 2, 3, 5, 7, 9});
  CHECK(vals(cumsum(a, -2)) == std::vector<double>{1, 2, 3, 5, 7, 9});
  const Tensor b = cumsum(from_vector<int32_t>({1, -2, 3}, {3}), 0);
  CHECK(b.dtype() == DType::int64);
  CHECK(b.to_vector<int64_t>() == std::vector<int64_t>{1, -1, 2});
  CHECK(cumsum(ones({3}, {.dtype = DType::bool_}), 0).to_vector<int64_t>() == std::vector<int64_t>{1, 2, 3});
  CHECK(cumsum(scalar_tensor(2.5, {.dtype = DType::float64}), 0).item() == 2.5);
  // 2^24 + 1 + 1: a float32 running sum would stay at 2^24; PyTorch's CPU kernel (double) reaches 2^24 + 2
  const Tensor f = cumsum(from_vector<float>({16777216.f, 1.f, 1.f}, {3}), 0);
  CHECK(f.to_vector<float>() == std::vector<float>{16777216.f, 16777216.f, 16777218.f});
  CHECK(cumsum(ones({4}, {.dtype = DType::bfloat16}), 0).dtype() == DType::bfloat16);
  // gradient: the reversed cumulative sum; a large (O, R, I) with I > 256 runs several column blocks
  Tensor x = a.clone().requires_grad_(true);
  cumsum(x, 1).backward(T({1, 1, 1, 1, 2, 3}, {2, 3}));
  CHECK(vals(x.grad()) == std::vector<double>{3, 2, 1, 6, 5, 3});
  manual_seed(43);
  CHECK(gradcheck([](auto& in) { return cumsum(in[0], 1); }, {randn({2, 5, 3}, f64)}));
  CHECK(gradgradcheck([](auto& in) { return cumsum(mul(in[0], in[0]), 0); }, {randn({4, 2}, f64)}));
  const Tensor big = randn({3, 7, 300}, f64);
  std::vector<double> bv = big.to_vector<double>(), want(bv.size());
  for (int64_t o = 0; o < 3; ++o)
    for (int64_t i = 0; i < 300; ++i) {
      double s = 0;
      for (int64_t r = 0; r < 7; ++r) want[size_t((o * 7 + r) * 300 + i)] = s += bv[size_t((o * 7 + r) * 300 + i)];
    }
  CHECK(cumsum(big, 1).to_vector<double>() == want);
  CHECK(error_of([&] { cumsum(a, 2); }).find("out of range") != std::string::npos);
}

TEST_CASE("amax, amin: over several dims, the gradient split among ties, NaN, empty dims") {
  using kiln::testing::error_of;
  const Tensor x = T({3, 1, 3, 2, -5, 0}, {2, 3});
  CHECK(amax(x).item() == 3);
  CHECK(amin(x).item() == -5);
  CHECK(vals(amax(x, {1})) == std::vector<double>{3, 2});
  CHECK(vals(amin(x, {0}, true)) == std::vector<double>{2, -5, 0});
  CHECK(amin(x, {0}, true).shape() == Shape{1, 3});
  CHECK(amax(from_vector<int64_t>({4, 9, 2}, {3})).item() == 9);
  Tensor a = x.clone().requires_grad_(true);
  amax(a).backward();
  CHECK(vals(a.grad()) == std::vector<double>{0.5, 0, 0.5, 0, 0, 0});
  CHECK(std::isnan(amax(from_vector<double>({1, kNaN}, {2})).item()));
  manual_seed(71);
  CHECK(gradcheck([](auto& in) { return amax(in[0], {0, 2}); }, {randn({2, 3, 4}, f64)}));
  CHECK(gradcheck([](auto& in) { return amin(in[0], {-1}, true); }, {randn({2, 3, 4}, f64)}));
  CHECK(amax(randn({2, 0}), {0}).shape() == Shape{0});
  CHECK(error_of([] { amax(randn({2, 0}), {1}); }).find("dim 1 of size 0") != std::string::npos);
  CHECK(error_of([] { amin(randn({0})); }).find("size 0") != std::string::npos);
}

TEST_CASE("var_mean and std_mean are var / std and mean together") {
  manual_seed(94);
  const Tensor x = randn({4, 5}, {.dtype = DType::float64});
  const auto [v, m] = var_mean(x, {1});
  CHECK(kiln::test::max_abs_diff(v, var(x, {1})) == 0);
  CHECK(kiln::test::max_abs_diff(m, mean(x, {1})) == 0);
  const auto [s, m0] = std_mean(x, {0}, false, true);
  CHECK(s.shape() == Shape{1, 5});
  CHECK(kiln::test::max_abs_diff(s, kiln::std(x, {0}, false, true)) == 0);
  CHECK(kiln::test::max_abs_diff(m0, mean(x, {0}, true)) == 0);
}

TEST_CASE("prod, cumprod, logcumsumexp, cummax, cummin, nansum, nanmean, count_nonzero: values, zeros, NaN, grads") {
  const auto V = [](const Tensor& t) { return t.to(DType::float64).contiguous().to_vector<double>(); };
  const Tensor x = T({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(prod(x).item() == 720);
  CHECK(V(prod(x, {1})) == std::vector<double>{6, 120});
  CHECK(prod(x, {0}, true).shape() == Shape{1, 3});
  CHECK(V(prod(x, {0}, true)) == std::vector<double>{4, 10, 18});
  CHECK(prod(zeros({2, 0})).item() == 1);  // the empty product
  CHECK(V(cumprod(x, 1)) == std::vector<double>{1, 2, 6, 4, 20, 120});
  CHECK(V(cumprod(x, 0)) == std::vector<double>{1, 2, 3, 4, 10, 18});
  // integers multiply in int64
  const Tensor xi = x.to(DType::int32);
  CHECK(prod(xi, {1}).dtype() == DType::int64);
  CHECK(V(cumprod(xi, 1)) == std::vector<double>{1, 2, 6, 4, 20, 120});
  // a zero: the gradient of each entry is the product of the others (no division)
  Tensor z = T({2, 0, 3, 0.5}, {4}).requires_grad_();
  prod(z).backward();
  CHECK(V(z.grad()) == std::vector<double>{0, 3, 0, 0});
  manual_seed(51);
  Tensor r = randn({3, 7}, f64);
  r = where(gt(r, 1.0), 0.0, r);  // some zeros
  CHECK(gradcheck([](auto& t) { return prod(t[0], {1}); }, {r}));
  CHECK(gradcheck([](auto& t) { return prod(t[0]); }, {randn({2, 3}, f64)}));
  CHECK(gradcheck([](auto& t) { return cumprod(t[0], 1); }, {r}));
  CHECK(gradcheck([](auto& t) { return logcumsumexp(t[0], 0); }, {randn({5, 2}, f64)}));
  // logcumsumexp is log(cumsum(exp)) without overflow
  const Tensor big = T({1000, 1000, -5}, {3});
  const std::vector<double> lb = V(logcumsumexp(big, 0));
  CHECK(lb[0] == 1000);
  CHECK(lb[1] == doctest::Approx(1000 + std::log(2.0)));
  CHECK(lb[2] == doctest::Approx(1000 + std::log(2.0)));
  CHECK(allclose(logcumsumexp(r, 1), log(cumsum(exp(r), 1))));
  // cummax / cummin: ties go to the later index; a NaN stays
  const Tensor t = T({1, 3, 3, 2, 3, 0.5, 3}, {7});
  CHECK(V(cummax(t, 0).values) == std::vector<double>{1, 3, 3, 3, 3, 3, 3});
  CHECK(cummax(t, 0).indices.to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 2, 4, 4, 6});
  CHECK(cummin(t, 0).indices.to_vector<int64_t>() == std::vector<int64_t>{0, 0, 0, 0, 0, 5, 5});
  const Tensor tn = T({1, NAN, 5, NAN, 0}, {5});
  CHECK(cummax(tn, 0).indices.to_vector<int64_t>() == std::vector<int64_t>{0, 1, 1, 3, 3});
  CHECK(cummin(tn, 0).indices.to_vector<int64_t>() == std::vector<int64_t>{0, 1, 1, 3, 3});
  CHECK(V(cummax(xi, 1).values) == std::vector<double>{1, 2, 3, 4, 5, 6});
  CHECK(gradcheck([](auto& a) { return cummax(a[0], 1).values; }, {randn({3, 6}, f64)}));
  CHECK(gradcheck([](auto& a) { return cummin(a[0], 0).values; }, {randn({6, 2}, f64)}));
  // NaN-aware sums
  const Tensor n = T({1, NAN, 2, NAN, NAN, NAN}, {2, 3});
  CHECK(V(nansum(n, {1})) == std::vector<double>{3, 0});
  const std::vector<double> nm = V(nanmean(n, {1}));
  CHECK(nm[0] == 1.5);
  CHECK(std::isnan(nm[1]));
  Tensor ng = n.clone().requires_grad_();
  nansum(ng).backward();
  CHECK(V(ng.grad()) == std::vector<double>{1, 0, 1, 0, 0, 0});
  CHECK(count_nonzero(T({0, 1, 0, 2}, {2, 2}), {1}).to_vector<int64_t>() == std::vector<int64_t>{1, 1});
  CHECK(count_nonzero(T({0, 1, 0, 2}, {2, 2})).item() == 2);
  CHECK_THROWS_AS(prod(x, {2}), kiln::Error);
  CHECK_THROWS_AS(cumprod(x, -3), kiln::Error);
  CHECK_THROWS_AS(logcumsumexp(xi, 0), kiln::Error);
  CHECK_THROWS_AS(nanmean(xi), kiln::Error);
}
