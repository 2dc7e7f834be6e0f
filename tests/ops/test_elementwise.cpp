// Elementwise ops: forward values by hand, broadcasting, promotion, gradchecks (including
// broadcast and non-contiguous inputs), 16-bit float rounding, and errors.
// GCC 12's AVX-512 intrinsics (simd::exp16's test, built with the library's -march=native)
// start some results from _mm512_undefined_*(): a false -Wmaybe-uninitialized (bug 105593).
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <doctest/doctest.h>
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <functional>
#include <cmath>
#include <limits>
#include <vector>
#include "gradcheck.h"
#include "kiln/ops/cpu/simd_exp.h"

using namespace kiln;
using kiln::test::f64;
using kiln::test::gradcheck;
using kiln::test::T;
using kiln::test::allclose;
using kiln::test::max_abs_diff;

TEST_CASE("binary ops: values, broadcasting and promotion") {
  Tensor a = T({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = T({10, 20, 30}, {3});
  CHECK((a + b).to_vector<double>() == std::vector<double>{11, 22, 33, 14, 25, 36});
  CHECK((a - b).to_vector<double>() == std::vector<double>{-9, -18, -27, -6, -15, -24});
  CHECK((a * b).at({1, 2}) == 180.0);
  CHECK((b / a).at({0, 1}) == 10.0);
  CHECK(pow(a, 2.0).at({1, 1}) == 25.0);
  CHECK(pow(2.0, a).at({0, 2}) == 8.0);
  CHECK(pow(a, T({2}, {1})).at({0, 2}) == 9.0);
  CHECK(maximum(a, T({3}, {1})).to_vector<double>() == std::vector<double>{3, 3, 3, 4, 5, 6});
  CHECK(minimum(a, T({3}, {1})).to_vector<double>() == std::vector<double>{1, 2, 3, 3, 3, 3});
  Tensor col = T({1, 2}, {2, 1});
  CHECK((a * col).to_vector<double>() == std::vector<double>{1, 2, 3, 8, 10, 12});
  CHECK((col + b).shape() == Shape{2, 3});
  CHECK((a + 1.0).at({0, 0}) == 2.0);
  CHECK((1.0 - a).at({0, 0}) == 0.0);
  CHECK((2.0 * a).at({1, 2}) == 12.0);
  CHECK((6.0 / a).at({0, 2}) == 2.0);
  CHECK((-a).at({1, 0}) == -4.0);
  // promotion
  Tensor i = from_vector<int64_t>({1, 2, 3});
  CHECK((i + i).dtype() == DType::int64);
  CHECK((i + i).to_vector<int64_t>() == std::vector<int64_t>{2, 4, 6});
  CHECK((i * 2.0).dtype() == DType::int64);
  CHECK((i * 2.5).dtype() == DType::float32);
  CHECK((i / i).dtype() == DType::float32);
  CHECK((i + ones({3})).dtype() == DType::float32);
  CHECK((ones({3}) + ones({3}, f64)).dtype() == DType::float64);
  // 0-dim with anything
  CHECK((scalar_tensor(2) * ones({2, 2})).shape() == Shape{2, 2});
  // large tensors take the parallel path
  Tensor big = ones({300, 1000});
  CHECK(sum(big + big).item() == 600000.0);
}

TEST_CASE("binary ops and where on long rows: split over threads, every element once") {
  // A contiguous tensor is one row of the strided loop; with 2 threads it is cut into
  // pieces. Each result element against its inputs, for 1 and 2 threads, contiguous, a
  // broadcast row, a scalar and a transposed (non-contiguous) operand.
  manual_seed(3);
  Tensor a = randn({3, 100003}), b = randn({3, 100003}), r = randn({100003}), s = randn({1});
  Tensor m = rand({3, 100003}) > 0.5;
  const int before = get_num_threads();
  std::vector<std::vector<float>> runs;
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (const Tensor& y : {a + b, a * r, a - s, where(m, a, b), a.t().contiguous().t() + b}) {
      runs.push_back(y.to_vector<float>());
    }
  }
  set_num_threads(before);
  const std::vector<float> av = a.to_vector<float>(), bv = b.to_vector<float>(), rv = r.to_vector<float>();
  const std::vector<uint8_t> mv = m.to(DType::uint8).to_vector<uint8_t>();
  const float sv = s.item<float>();
  size_t bad = 0;
  for (size_t i = 0; i < av.size(); ++i) {
    const size_t j = i % rv.size();
    bad += runs[0][i] != av[i] + bv[i];
    bad += runs[1][i] != av[i] * rv[j];
    bad += runs[2][i] != av[i] - sv;
    bad += runs[3][i] != (mv[i] ? av[i] : bv[i]);
    bad += runs[4][i] != av[i] + bv[i];
  }
  CHECK(bad == 0);
  for (size_t k = 0; k < 5; ++k) CHECK(runs[k] == runs[k + 5]);  // 1 thread == 2 threads
}

TEST_CASE("unary ops: values") {
  Tensor x = T({-2, -0.5, 0.5, 2}, {4});
  auto v = [](const Tensor& t) { return t.to_vector<double>(); };
  CHECK(v(relu(x)) == std::vector<double>{0, 0, 0.5, 2});
  CHECK(v(leaky_relu(x, 0.1))[0] == doctest::Approx(-0.2));
  CHECK(v(abs(x)) == std::vector<double>{2, 0.5, 0.5, 2});
  CHECK(v(neg(x))[3] == -2.0);
  CHECK(v(exp(x))[3] == doctest::Approx(std::exp(2.0)));
  CHECK(v(log(abs(x)))[0] == doctest::Approx(std::log(2.0)));
  CHECK(v(sqrt(abs(x)))[0] == doctest::Approx(std::sqrt(2.0)));
  CHECK(v(rsqrt(abs(x)))[1] == doctest::Approx(1 / std::sqrt(0.5)));
  CHECK(v(sin(x))[2] == doctest::Approx(std::sin(0.5)));
  CHECK(v(cos(x))[2] == doctest::Approx(std::cos(0.5)));
  CHECK(v(tanh(x))[0] == doctest::Approx(std::tanh(-2.0)));
  CHECK(v(sigmoid(x))[3] == doctest::Approx(1 / (1 + std::exp(-2.0))));
  CHECK(v(sigmoid(T({-1000, 1000}, {2}))) == std::vector<double>{0, 1});
  CHECK(v(silu(x))[3] == doctest::Approx(2 / (1 + std::exp(-2.0))));
  CHECK(v(softplus(x))[0] == doctest::Approx(std::log1p(std::exp(-2.0))));
  CHECK(v(softplus(T({30}, {1})))[0] == 30.0);  // above the threshold: x itself
  CHECK(std::abs(v(softplus(T({-200}, {1})))[0] / std::exp(-200.0) - 1) < 1e-12);  // float64: log1p keeps e^x
  // log_sigmoid = -softplus(-x) without overflow on either side; log1p / expm1 exact near 0
  CHECK(v(log_sigmoid(x))[0] == doctest::Approx(-std::log1p(std::exp(2.0))));
  CHECK(v(log_sigmoid(x))[3] == doctest::Approx(-std::log1p(std::exp(-2.0))));
  CHECK(v(log_sigmoid(T({-800, 800}, {2}))) == std::vector<double>{-800, -0.0});
  CHECK(v(log1p(T({1e-20, 1}, {2}))) == std::vector<double>{1e-20, std::log(2.0)});
  CHECK(v(expm1(T({1e-20, -1000}, {2}))) == std::vector<double>{1e-20, -1});
  CHECK(log_sigmoid(full({2}, -200.0, {.dtype = DType::float32})).at({0}) == -200.0);  // float32: no inf
  // the activations of PyTorch's nn (values from PyTorch 2.15, float64)
  const Tensor a = T({-4, -2, -0.5, 0.5, 2, 4}, {6});
  auto near = [&](const Tensor& got, const std::vector<double>& want) {
    const auto g = v(got);
    bool ok = g.size() == want.size();
    for (size_t i = 0; ok && i < g.size(); ++i) ok = std::abs(g[i] - want[i]) <= 1e-15 * std::max(1.0, std::abs(want[i]));
    return ok;
  };
  CHECK(near(elu(a, 0.7), {-0.687179052777886, -0.6052653017343711, -0.2754285382011566, 0.5, 2.0, 4.0}));
  CHECK(near(selu(a), {-1.7258986281898945, -1.5201664685956948, -0.6917581878028713, 0.5253504936777402,
                       2.101401974710961, 4.202803949421922}));
  CHECK(near(hardtanh(a, -1, 1.5), {-1, -1, -0.5, 0.5, 1.5, 1.5}));
  CHECK(near(relu6(a * 2.0), {0, 0, 0, 1, 4, 6}));
  CHECK(near(hardsigmoid(a), {0, 1.0 / 6, 2.5 / 6, 3.5 / 6, 5.0 / 6, 1}));
  CHECK(near(hardswish(a), {0, -1.0 / 3, -0.5 * 2.5 / 6, 0.5 * 3.5 / 6, 2 * 5.0 / 6, 4}));
  // their gradients at the kinks are PyTorch's
  Tensor b = T({-3, 3, 0, 6, -1, 1}, {6}).requires_grad_();
  auto grad_of = [&](Tensor (*f)(const Tensor&)) {
    b.set_grad(Tensor());
    sum(f(b)).backward();
    return v(b.grad());
  };
  CHECK(grad_of(hardsigmoid) == std::vector<double>{0, 0, double(1.0f / 6.0f), 0, double(1.0f / 6.0f),
                                                    double(1.0f / 6.0f)});
  CHECK(grad_of(hardswish) == std::vector<double>{0, 1, 0.5, 1, -1.0 / 3 + 0.5, 1.0 / 3 + 0.5});
  CHECK(grad_of(relu6) == std::vector<double>{0, 1, 0, 0, 0, 1});
  CHECK(grad_of([](const Tensor& t) { return hardtanh(t); }) == std::vector<double>{0, 0, 1, 0, 0, 0});
  CHECK_THROWS_AS(hardtanh(a, 1.0, -1.0), Error);
  // rounding and sign, PyTorch 2.15's values (round: half to even; sign of 0 and NaN is 0)
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const Tensor r = T({-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, -3.7, 3.7}, {8});
  CHECK(v(round(r)) == std::vector<double>{-2, -2, -0.0, 0, 2, 2, -4, 4});
  CHECK(v(floor(r)) == std::vector<double>{-3, -2, -1, 0, 1, 2, -4, 3});
  CHECK(v(ceil(r)) == std::vector<double>{-2, -1, -0.0, 1, 2, 3, -3, 4});
  CHECK(v(trunc(r)) == std::vector<double>{-2, -1, -0.0, 0, 1, 2, -3, 3});
  CHECK(std::signbit(v(round(r))[2]));  // -0.5 rounds to -0
  const std::vector<double> sg = v(sign(T({-0.0, nan, inf, -2, 3}, {5})));
  CHECK(sg == std::vector<double>{0, 0, 1, -1, 1});
  CHECK(!std::signbit(sg[0]));
  CHECK(std::isnan(v(floor(T({nan}, {1})))[0]));
  CHECK(round(full({3}, 2.5f, {.dtype = DType::float32})).at({0}) == 2.0);
  const Tensor ints = from_vector<int64_t>({-3, 0, 5}, {3});
  CHECK(sign(ints).to_vector<int64_t>() == std::vector<int64_t>{-1, 0, 1});
  CHECK(floor(ints).dtype() == DType::int64);
  CHECK(round(ints).to_vector<int64_t>() == std::vector<int64_t>{-3, 0, 5});
  // their gradient is 0, even for a NaN upstream gradient (PyTorch's zeros)
  Tensor q = T({0.3, -1.7}, {2}).requires_grad_();
  for (auto f : {&floor, &ceil, &trunc, &round, &sign}) {
    q.set_grad(Tensor());
    f(q).backward(T({nan, 2.0}, {2}));
    CHECK(v(q.grad()) == std::vector<double>{0, 0});
  }
  // the straight-through estimator: x + (round(x) - x).detach() passes the gradient
  Tensor st = T({0.4, 1.6}, {2}).requires_grad_();
  sum(st + (round(st) - st).detach()).backward();
  CHECK(v(st.grad()) == std::vector<double>{1, 1});
  CHECK(v(gelu(x))[3] == doctest::Approx(2 * 0.5 * (1 + std::erf(2 / std::sqrt(2.0)))));
  double u = std::sqrt(2 / M_PI) * (2 + 0.044715 * 8);
  CHECK(v(gelu(x, GeluApprox::tanh))[3] == doctest::Approx(0.5 * 2 * (1 + std::tanh(u))));
  CHECK(v(clamp(x, -1.0, 1.0)) == std::vector<double>{-1, -0.5, 0.5, 1});
  CHECK(v(clamp(x, std::nullopt, 0.0)) == std::vector<double>{-2, -0.5, 0, 0});
  CHECK(from_vector<int64_t>({-3}).to_vector<int64_t>()[0] == -3);
  CHECK(abs(from_vector<int64_t>({-3})).to_vector<int64_t>()[0] == 3);
}

TEST_CASE("float32 exp over its whole range: within an ulp of libm's double exp, subnormals, overflow at ln(FLT_MAX)") {
  // Every 4099th float pattern in [-110, 90] plus the edges (the largest float whose exp is
  // finite, the next one, the subnormal range, -inf, NaN). Old kiln gave inf from 88.0 and
  // 0 below -87.34; PyTorch gives exp(-90) = 8.194e-40 and exp(88.72283) = 3.40280e38.
  std::vector<float> xs;
  for (uint64_t b = 0; b < (uint64_t(1) << 32); b += 4099) {
    const float x = std::bit_cast<float>(uint32_t(b));
    if (x == x && x >= -110.0f && x <= 90.0f) xs.push_back(x);
  }
  const float last = 88.72283172607421875f;  // below ln(FLT_MAX) = 88.7228391...
  for (float x : {last, std::nextafter(last, 100.0f), -90.0f, -100.0f, -103.9f, -104.0f, -87.34f, -87.3f})
    xs.push_back(x);
  const int64_t n = int64_t(xs.size());
  const std::vector<float> y = exp(from_vector<float>(xs)).to_vector<float>();
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double ref = std::exp(double(xs[size_t(i)]));
    const float rf = float(ref);
    if (std::isinf(rf)) {
      bad += !std::isinf(y[size_t(i)]);
      continue;
    }
    const double ulp = std::max(double(std::nextafter(rf, INFINITY)) - double(rf), 1.401298464324817e-45);
    if (std::abs(double(y[size_t(i)]) - ref) > 1.01 * ulp) {
      if (bad < 5) MESSAGE("exp(", xs[size_t(i)], ") = ", y[size_t(i)], ", libm ", ref);
      ++bad;
    }
  }
  CHECK(bad == 0);
  CHECK(n > 200000);
  CHECK(std::isfinite(y[size_t(n) - 8]));
  CHECK(std::isinf(y[size_t(n) - 7]));
  CHECK(y[size_t(n) - 6] > 8.19e-40f);  // subnormal, not 0
  CHECK(y[size_t(n) - 3] == 0.0f);      // exp(-104) rounds to 0
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> e = exp(from_vector<float>({-inf, inf, nan})).to_vector<float>();
  CHECK(e[0] == 0.0f);
  CHECK(std::isinf(e[1]));
  CHECK(std::isnan(e[2]));
  // softmax keeps a subnormal probability as PyTorch (5.521e-42), not 0
  const std::vector<float> p = softmax(from_vector<float>({0.0f, -95.0f}), 0).to_vector<float>();
  CHECK(p[0] == 1.0f);
  CHECK(p[1] > 5.52e-42f);
  CHECK(p[1] < 5.53e-42f);
}

#if defined(__AVX512F__)
TEST_CASE("simd::exp16 (the AVX-512 GELU and bf16 attention's exp): within an ulp of libm, subnormals, inf, NaN") {
  // The same sweep as math::fast_exp's above, 16 lanes at a time through VSCALEFPS.
  std::vector<float> xs;
  for (uint64_t b = 0; b < (uint64_t(1) << 32); b += 4099) {
    const float x = std::bit_cast<float>(uint32_t(b));
    if (x == x && x >= -160.0f && x <= 160.0f) xs.push_back(x);
  }
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (float x : {88.72283172607421875f, 88.72284f, -90.0f, -103.9f, -104.0f, -149.9f, -inf, inf, nan, -0.0f})
    xs.push_back(x);
  while (xs.size() % 16) xs.push_back(0.0f);
  std::vector<float> y(xs.size());
  for (size_t i = 0; i < xs.size(); i += 16) _mm512_storeu_ps(&y[i], simd::exp16(_mm512_loadu_ps(&xs[i])));
  int64_t bad = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double ref = std::exp(double(xs[i]));
    const float rf = float(ref);
    if (std::isnan(xs[i])) {
      bad += !std::isnan(y[i]);
    } else if (std::isinf(rf) || rf == 0.0f) {
      bad += y[i] != rf;
    } else {
      const double ulp = std::max(double(std::nextafter(rf, INFINITY)) - double(rf), 1.401298464324817e-45);
      if (std::abs(double(y[i]) - ref) > 1.01 * ulp) {
        if (bad < 5) MESSAGE("exp16(", xs[i], ") = ", y[i], ", libm ", ref);
        ++bad;
      }
    }
  }
  CHECK(bad == 0);
  CHECK(xs.size() > 300000);
}
#endif

TEST_CASE("tanh-GELU in float32 against the tanh formula in double, values and gradient") {
  // The CPU computes it as x sigmoid(2u); the reference is GPT-2's 0.5 x (1 + tanh u).
  std::vector<float> xs;
  for (int i = -2400; i <= 2400; ++i) xs.push_back(float(i) / 200.f);  // [-12, 12]
  for (float big : {-100.f, -30.f, 30.f, 100.f}) xs.push_back(big);
  Tensor x = from_vector<float>(xs).requires_grad_();
  Tensor y = gelu(x, GeluApprox::tanh);
  y.backward(ones_like(y));
  const std::vector<float> yv = y.to_vector<float>(), gv = x.grad().to_vector<float>();
  double worst_y = 0, worst_g = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double t = xs[i], c = std::sqrt(2 / M_PI), u = c * (t + 0.044715 * t * t * t), th = std::tanh(u);
    const double ref_y = 0.5 * t * (1 + th);
    const double ref_g = 0.5 * (1 + th) + 0.5 * t * (1 - th * th) * c * (1 + 3 * 0.044715 * t * t);
    worst_y = std::max(worst_y, std::fabs(yv[i] - ref_y) / std::max(1e-3, std::fabs(ref_y)));
    worst_g = std::max(worst_g, std::fabs(gv[i] - ref_g) / std::max(1e-3, std::fabs(ref_g)));
  }
  CHECK(worst_y < 1e-5);
  CHECK(worst_g < 5e-5);  // the worst is at the gradient's zero (x = -0.755): 2e-8 absolute
  // The ends of the range (the AVX-512 path clamps the exponent and lets VSCALEFPS overflow
  // or underflow): x itself far right, -0 far left, inf, NaN and -0 kept; gradient 1 and 0.
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  Tensor e = from_vector<float>({inf, 1e30f, -1e30f, -20.f, nan, -0.f, 60.f, -60.f}).requires_grad_();
  Tensor ye = gelu(e, GeluApprox::tanh);
  ye.backward(ones_like(ye));
  const std::vector<float> ev = ye.to_vector<float>(), eg = e.grad().to_vector<float>();
  CHECK(ev[0] == inf);
  CHECK(ev[1] == 1e30f);
  CHECK((ev[2] == 0.f && std::signbit(ev[2])));
  CHECK((ev[3] == 0.f && std::signbit(ev[3])));
  CHECK(std::isnan(ev[4]));
  CHECK((ev[5] == 0.f && std::signbit(ev[5])));
  CHECK(ev[6] == 60.f);
  CHECK(eg[6] == 1.f);
  CHECK(eg[7] == 0.f);
  CHECK(std::isnan(eg[4]));
}

TEST_CASE("comparisons, where and masked_fill") {
  Tensor a = T({1, 2, 3}, {3});
  Tensor b = T({3, 2, 1}, {3});
  CHECK((a < b).dtype() == DType::bool_);
  CHECK((a < b).to_vector<uint8_t>() == std::vector<uint8_t>{1, 0, 0});
  CHECK((a <= b).to_vector<uint8_t>() == std::vector<uint8_t>{1, 1, 0});
  CHECK((a > b).to_vector<uint8_t>() == std::vector<uint8_t>{0, 0, 1});
  CHECK((a >= 2.0).to_vector<uint8_t>() == std::vector<uint8_t>{0, 1, 1});
  CHECK((a == b).to_vector<uint8_t>() == std::vector<uint8_t>{0, 1, 0});
  CHECK((a != 2.0).to_vector<uint8_t>() == std::vector<uint8_t>{1, 0, 1});
  CHECK(where(a < b, a, b).to_vector<double>() == std::vector<double>{1, 2, 1});
  CHECK(where(a > 1.0, a, T({0}, {1})).to_vector<double>() == std::vector<double>{0, 2, 3});
  CHECK(masked_fill(a, a == 2.0, -5).to_vector<double>() == std::vector<double>{1, -5, 3});
  Tensor m = zeros({2, 3});
  Tensor mask = from_vector<bool>({true, false, true}, {3});
  CHECK(masked_fill(m, mask, 1).to_vector<double>() == std::vector<double>{1, 0, 1, 1, 0, 1});
  CHECK_THROWS_AS(masked_fill(zeros({3}), from_vector<bool>({true, false, true, true}, {4}), 1), Error);
  CHECK_THROWS_AS(masked_fill(zeros({3}), zeros({2, 3}).to(DType::bool_), 1), Error);
  // the mask and the condition must be bool, as in PyTorch (a float 0/1 or 0/-inf attention
  // mask passed by mistake was silently read as "nonzero")
  CHECK_THROWS_WITH_AS(masked_fill(zeros({3}), from_vector<float>({1, 0, 1}), 1),
                       doctest::Contains("expected a bool mask, got float32"), Error);
  CHECK_THROWS_AS(masked_fill(zeros({3}), from_vector<uint8_t>({1, 0, 1}), 1), Error);
  CHECK_THROWS_WITH_AS(where(from_vector<int64_t>({1, 0, 1}), a, b), doctest::Contains("expected a bool condition"),
                       Error);
}

TEST_CASE("two bool tensors: add and maximum are or, mul and minimum are and, comparisons work (PyTorch's results)") {
  Tensor a = from_vector<bool>({true, false, true, false}), b = from_vector<bool>({true, true, false, false});
  auto v = [](const Tensor& t) {
    CHECK(t.dtype() == DType::bool_);
    return t.to_vector<uint8_t>();
  };
  using U = std::vector<uint8_t>;
  CHECK(v(a + b) == U{1, 1, 1, 0});
  CHECK(v(maximum(a, b)) == U{1, 1, 1, 0});
  CHECK(v(a * b) == U{1, 0, 0, 0});
  CHECK(v(minimum(a, b)) == U{1, 0, 0, 0});
  CHECK(v(a < b) == U{0, 1, 0, 0});
  CHECK(v(a <= b) == U{1, 1, 0, 1});
  CHECK(v(a > b) == U{0, 0, 1, 0});
  CHECK(v(a >= b) == U{1, 0, 1, 1});
  CHECK(v(a == b) == U{1, 0, 0, 1});
  CHECK(v(a != b) == U{0, 1, 1, 0});
  // broadcast and strided operands take the same path
  CHECK(v(a.reshape({2, 2}).t() + from_vector<bool>({false, false})) == U{1, 1, 0, 0});
  CHECK(v(add(a, from_vector<bool>({true}))) == U{1, 1, 1, 1});
  // the result is a bool byte 0 or 1, also when both are true (a byte sum would be 2)
  CHECK(sum(a + a).item<int64_t>() == 2);
  CHECK_THROWS_WITH_AS(a - b, doctest::Contains("subtraction with a bool tensor is not supported"), Error);
  CHECK(((a + b) / b).dtype() == DType::float32);  // true division promotes, as in PyTorch
}

TEST_CASE("gradcheck: binary ops with broadcasting and non-contiguous inputs") {
  auto r = [](Shape s) { return randn(s, f64); };
  auto pos = [](Shape s) { return rand(s, f64) + 0.5; };
  CHECK(gradcheck([](auto& in) { return in[0] + in[1]; }, {r({2, 3}), r({3})}));
  CHECK(gradcheck([](auto& in) { return in[0] - in[1]; }, {r({2, 1, 3}), r({4, 1})}));
  CHECK(gradcheck([](auto& in) { return in[0] * in[1]; }, {r({3, 4}), r({1, 4})}));
  CHECK(gradcheck([](auto& in) { return in[0].t() * in[1]; }, {r({4, 3}), r({3, 4})}));
  CHECK(gradcheck([](auto& in) { return in[0] / in[1]; }, {r({2, 3}), pos({2, 3})}));
  CHECK(gradcheck([](auto& in) { return in[0] / in[1].transpose(0, 1); }, {r({2, 3}), pos({3, 1})}));
  CHECK(gradcheck([](auto& in) { return pow(in[0], in[1]); }, {pos({2, 3}), r({3})}));
  CHECK(gradcheck([](auto& in) { return pow(in[0], 3.0); }, {r({5})}));
  CHECK(gradcheck([](auto& in) { return pow(in[0], 0.5); }, {pos({5})}));
  CHECK(gradcheck([](auto& in) { return pow(2.0, in[0]); }, {r({5})}));
  // maximum/minimum away from ties
  Tensor a = T({1, 5, -2, 0.3}, {4}), b = T({2, 3, -1, 0.1}, {4});
  CHECK(gradcheck([](auto& in) { return maximum(in[0], in[1]); }, {a, b}));
  CHECK(gradcheck([](auto& in) { return minimum(in[0], in[1]); }, {a, b}));
  CHECK(gradcheck([](auto& in) { return in[0] * 2.0 + 1.0 - in[0] / 4.0; }, {r({3})}));
  CHECK(gradcheck([](auto& in) { return 1.0 / in[0]; }, {pos({3})}));
  CHECK(gradcheck([](auto& in) { return where(in[0] > 0.0, in[0], in[1]); }, {r({3, 4}), r({4})}));
  CHECK(gradcheck([](auto& in) { return masked_fill(in[0], in[0] > 0.0, 0.5); }, {r({3, 4})}));
}

TEST_CASE("gradcheck: unary ops, inputs away from kinks") {
  auto away = [](Shape s) {  // |x| in [0.2, 1.7]
    Tensor u = rand(s, f64) * 1.5 + 0.2;
    return where(rand(s, f64) > 0.5, u, -u);
  };
  auto pos = [](Shape s) { return rand(s, f64) + 0.5; };
  using F = Tensor (*)(const Tensor&);
  for (F f : {F(neg), F(exp), F(sin), F(cos), F(tanh), F(sigmoid), F(relu), F(silu), F(softplus), F(abs),
              F(log_sigmoid), F(expm1), F(selu), F(hardswish), F(hardsigmoid), F(relu6)}) {
    CHECK(gradcheck([f](auto& in) { return f(in[0]); }, {away({3, 4})}));
    CHECK(gradcheck([f](auto& in) { return f(in[0].t()); }, {away({4, 3})}));
  }
  for (F f : {F(log), F(sqrt), F(rsqrt), F(log1p)})
    CHECK(gradcheck([f](auto& in) { return f(in[0]); }, {pos({3, 4})}));
  CHECK(gradcheck([](auto& in) { return leaky_relu(in[0], 0.2); }, {away({6})}));
  CHECK(gradcheck([](auto& in) { return elu(in[0], 0.6); }, {away({6})}));
  CHECK(gradcheck([](auto& in) { return hardtanh(in[0], -0.7, 0.9); }, {away({6})}));
  CHECK(gradcheck([](auto& in) { return hardswish(in[0] * 4.0) + hardsigmoid(in[0] * 4.0); }, {away({8})}));
  CHECK(gradcheck([](auto& in) { return gelu(in[0]); }, {away({6})}));
  CHECK(gradcheck([](auto& in) { return gelu(in[0], GeluApprox::tanh); }, {away({6})}));
  CHECK(gradcheck([](auto& in) { return clamp(in[0], -1.0, 1.0); }, {T({-1.5, -0.5, 0.5, 1.5}, {4})}));
  // softplus on both sides of its threshold (20)
  CHECK(gradcheck([](auto& in) { return softplus(in[0]); }, {from_vector<double>({-30, -3, 19.5, 20.5, 40}, {5})}));
}

TEST_CASE("16-bit floats compute in float32 and round the result") {
  Tensor a = full({4}, 1.0, {.dtype = DType::bfloat16});
  Tensor b = full({4}, std::ldexp(1.0, -9), {.dtype = DType::bfloat16});
  Tensor c = a + b;  // 1 + 2^-9 is not representable in bfloat16 -> rounds to 1
  CHECK(c.dtype() == DType::bfloat16);
  CHECK(c.at({0}) == 1.0);
  Tensor h = full({2}, 1.0, {.dtype = DType::float16}) + full({2}, std::ldexp(1.0, -10), {.dtype = DType::float16});
  CHECK(h.at({0}) == 1.0 + std::ldexp(1.0, -10));
  CHECK(relu(full({2}, -1.0, {.dtype = DType::float16})).at({1}) == 0.0);
  // gradient flows back in the leaf's dtype
  Tensor x = ones({3}).requires_grad_();
  sum(x.to(DType::bfloat16) * 3.0).backward();
  CHECK(x.grad().dtype() == DType::float32);
  CHECK(x.grad().at({0}) == 3.0);
}

TEST_CASE("binary ops on float16 / bfloat16 CPU operands: the bits of converting them to float32 first") {
  // A float32 computation reads 16-bit operands as they are and writes a 16-bit result
  // directly, a chunk of 512 at a time (ops/cpu/elementwise.cpp, binary_widened): every op
  // must give the bits of widening the operands, computing in float32 and rounding once,
  // contiguous, broadcast (a row, a column, a 0-dim tensor on either side), transposed, and
  // mixed with float32 or with the other 16-bit type, special values included.
  using Fn = Tensor (*)(const Tensor&, const Tensor&);
  const std::vector<std::pair<const char*, Fn>> ops = {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }},
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }},
      {"pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); }},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }},
      {"fmod", [](const Tensor& a, const Tensor& b) { return fmod(a, b); }},
      {"remainder", [](const Tensor& a, const Tensor& b) { return remainder(a, b); }},
      {"floor_divide", [](const Tensor& a, const Tensor& b) { return floor_divide(a, b); }},
      {"atan2", [](const Tensor& a, const Tensor& b) { return atan2(a, b); }},
      {"hypot", [](const Tensor& a, const Tensor& b) { return hypot(a, b); }},
      {"eq", [](const Tensor& a, const Tensor& b) { return eq(a, b); }},
      {"ne", [](const Tensor& a, const Tensor& b) { return ne(a, b); }},
      {"lt", [](const Tensor& a, const Tensor& b) { return lt(a, b); }},
      {"le", [](const Tensor& a, const Tensor& b) { return le(a, b); }},
      {"gt", [](const Tensor& a, const Tensor& b) { return gt(a, b); }},
      {"ge", [](const Tensor& a, const Tensor& b) { return ge(a, b); }}};
  manual_seed(31);
  const DType f32 = DType::float32, bf = DType::bfloat16, hf = DType::float16;
  auto values = [](const Shape& shape, DType dt) {  // normal values, some rounded to integers, and specials
    Tensor v = randn(shape) * 3.0;
    Tensor flat = v.reshape({v.numel()});
    const double special[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 2.0, -3.0, 1e-30, 65504.0};
    for (int64_t i = 0; i < flat.numel(); i += 7) flat.narrow(0, i, 1).fill_(special[(i / 7) % 9]);
    return v.to(dt);
  };
  // {a shape, a dtype, b shape, b dtype}; a transposed where noted
  struct Case {
    Shape sa;
    DType da;
    Shape sb;
    DType db;
    bool transpose_a;
  };
  const std::vector<Case> cases = {
      {{1300}, bf, {1300}, bf, false},   {{1300}, hf, {1300}, hf, false},   {{7, 600}, bf, {600}, bf, false},
      {{7, 600}, hf, {7, 1}, hf, false}, {{1300}, bf, {}, bf, false},       {{}, hf, {1300}, hf, false},
      {{600, 7}, bf, {7, 600}, bf, true}, {{3, 700}, f32, {3, 700}, bf, false}, {{3, 700}, hf, {700}, f32, false},
      {{1300}, bf, {1300}, hf, false}};
  for (const auto& c : cases)
    for (const auto& op : ops) {
      const char* name = op.first;  // (no structured binding: clang cannot capture one)
      const Fn fn = op.second;
      CAPTURE(name);
      CAPTURE(shape_str(c.sa));
      CAPTURE(std::string(dtype_name(c.da)));
      CAPTURE(shape_str(c.sb));
      CAPTURE(std::string(dtype_name(c.db)));
      Tensor a = values(c.sa, c.da), b = values(c.sb, c.db);
      if (c.transpose_a) a = a.transpose(0, 1);
      const Tensor got = fn(a, b);
      const Tensor want32 = fn(a.to(f32), b.to(f32));  // exact widening, then float32 math
      const Tensor want = want32.to(got.dtype());
      REQUIRE(got.dtype() == (want32.dtype() == DType::bool_ ? DType::bool_ : promote_types(c.da, c.db)));
      REQUIRE(got.shape() == want.shape());
      CHECK(std::memcmp(got.contiguous().raw_data(), want.contiguous().raw_data(),
                        size_t(got.numel()) * dtype_size(got.dtype())) == 0);
    }
}

TEST_CASE("unary ops on float16 / bfloat16 CPU tensors: the bits of float32 math rounded once, forward and backward") {
  // The CPU kernels keep 16-bit storage and compute in float32 a chunk at a time
  // (ops/cpu/elementwise.cpp): the result must be exactly what widening the tensor,
  // computing in float32 and rounding gives, at lengths crossing the 512-value chunks and
  // the 16-value vectors. Backward: g * op'(s) on the widened g and s, rounded once; for
  // the ops whose derivative reads x that is exactly float32 autograd on the widened x.
  using F = std::function<Tensor(const Tensor&)>;
  struct Case {
    const char* name;
    F f;
    bool positive, reads_x;
    F dy = nullptr;  // the derivative from the output y, for the ops whose backward reads y
  };
  const std::vector<Case> cases = {
      {"neg", [](const Tensor& t) { return neg(t); }, false, false, [](const Tensor& y) { return full_like(y, -1.0); }},
      {"exp", [](const Tensor& t) { return exp(t); }, false, false, [](const Tensor& y) { return y; }},
      {"log", [](const Tensor& t) { return log(t); }, true, true},
      {"sqrt", [](const Tensor& t) { return sqrt(t); }, true, false, [](const Tensor& y) { return 0.5 / y; }},
      {"rsqrt", [](const Tensor& t) { return rsqrt(t); }, true, false, [](const Tensor& y) { return -0.5 * y * y * y; }},
      {"abs", [](const Tensor& t) { return abs(t); }, false, true},
      {"sin", [](const Tensor& t) { return sin(t); }, false, true},
      {"cos", [](const Tensor& t) { return cos(t); }, false, true},
      {"tanh", [](const Tensor& t) { return tanh(t); }, false, false, [](const Tensor& y) { return 1.0 - y * y; }},
      {"sigmoid", [](const Tensor& t) { return sigmoid(t); }, false, false,
       [](const Tensor& y) { return y * (1.0 - y); }},
      {"relu", [](const Tensor& t) { return relu(t); }, false, false,
       [](const Tensor& y) { return (y > 0.0).to(DType::float32); }},
      {"leaky_relu", [](const Tensor& t) { return leaky_relu(t, 0.1); }, false, true},
      {"gelu", [](const Tensor& t) { return gelu(t); }, false, true},
      {"gelu_tanh", [](const Tensor& t) { return gelu(t, GeluApprox::tanh); }, false, true},
      {"silu", [](const Tensor& t) { return silu(t); }, false, true},
      {"softplus", [](const Tensor& t) { return softplus(t); }, false, true},
      {"log_sigmoid", [](const Tensor& t) { return log_sigmoid(t); }, false, true},
      {"elu", [](const Tensor& t) { return elu(t, 0.8); }, false, true},
      {"selu", [](const Tensor& t) { return selu(t); }, false, true},
      {"hardtanh", [](const Tensor& t) { return hardtanh(t, -0.5, 0.75); }, false, true},
      {"hardsigmoid", [](const Tensor& t) { return hardsigmoid(t * 2.0); }, false, true},
      {"hardswish", [](const Tensor& t) { return hardswish(t * 2.0); }, false, true},
      {"floor", [](const Tensor& t) { return floor(t); }, false, true},
      {"round", [](const Tensor& t) { return round(t); }, false, true},
      {"sign", [](const Tensor& t) { return sign(t); }, false, true},
      {"log1p", [](const Tensor& t) { return log1p(t); }, true, true},
      {"expm1", [](const Tensor& t) { return expm1(t); }, false, false, [](const Tensor& y) { return y + 1.0; }},
      {"clamp", [](const Tensor& t) { return clamp(t, -0.5, 0.7); }, false, true},
      {"pow", [](const Tensor& t) { return pow(t, 1.75); }, true, true},  // an exponent 16 bits hold (it is rounded to the base's dtype)
  };
  manual_seed(5);
  for (DType dt : {DType::bfloat16, DType::float16})
    for (int64_t n : {int64_t(7), int64_t(1300)})
      for (const auto& c : cases) {
        CAPTURE(c.name);
        CAPTURE(std::string(dtype_name(dt)));
        CAPTURE(n);
        Tensor x32 = randn({n}) * 2.0;
        if (c.positive) x32 = abs(x32) + 0.05;
        const Tensor x = x32.to(dt).requires_grad_();
        const Tensor xw = x.detach().to(DType::float32).requires_grad_();  // widened, exact
        const Tensor y = c.f(x), yw = c.f(xw);
        REQUIRE(y.dtype() == dt);
        CHECK(max_abs_diff(y.to(DType::float32), yw.detach().to(dt).to(DType::float32)) == 0.0);
        const Tensor g = randn({n}).to(dt);
        y.backward(g);
        yw.backward(g.to(DType::float32));
        REQUIRE(x.grad().dtype() == dt);
        const Tensor got = x.grad().to(DType::float32);
        if (c.reads_x) {
          CHECK(max_abs_diff(got, xw.grad().to(dt).to(DType::float32)) == 0.0);
        } else {  // from the rounded output y, in float32 (the formula's order may differ: one 16-bit rounding)
          const Tensor want = (g.to(DType::float32) * c.dy(y.detach().to(DType::float32))).to(dt).to(DType::float32);
          CHECK(allclose(got, want, dt == DType::bfloat16 ? 0x1p-7 : 0x1p-10, 1e-30));
        }
      }
}

namespace {
/// The 16-bit patterns of a float16 / bfloat16 CPU tensor, and a tensor of given patterns.
std::vector<uint16_t> bits16(const Tensor& t) {
  const Tensor c = t.contiguous();
  const uint16_t* p = static_cast<const uint16_t*>(c.raw_data());
  return std::vector<uint16_t>(p, p + c.numel());
}
Tensor from_bits16(const std::vector<uint16_t>& b, DType dt) {
  Tensor t = Tensor::empty({int64_t(b.size())}, dt);
  std::copy(b.begin(), b.end(), static_cast<uint16_t*>(t.raw_data()));
  return t;
}
}  // namespace

TEST_CASE("relu on float16 / bfloat16: all 65536 bit patterns, forward and backward, bitwise the float32 path") {
  // The CPU relu of 16-bit tensors (relu16, ops/cpu/elementwise.cpp) selects bit patterns
  // in chunks of finite values and sends chunks holding an inf or NaN through float32: every
  // pattern (both zeros, subnormals, infinities, NaNs) must give the bits of relu on the
  // widened tensor rounded back, forward and backward, in chunks of each kind.
  std::vector<uint16_t> all(65536), shuffled(65536);
  for (uint32_t i = 0; i < 65536; ++i) {
    all[i] = uint16_t(i);
    shuffled[i] = uint16_t(i * 40503u);  // an odd multiplier: a permutation
  }
  const DType f32 = DType::float32;
  for (DType dt : {DType::float16, DType::bfloat16}) {
    CAPTURE(std::string(dtype_name(dt)));
    for (int pass = 0; pass < 2; ++pass) {  // x = all patterns with g shuffled, and the other way round
      CAPTURE(pass);
      const Tensor x16 = from_bits16(pass ? shuffled : all, dt), g16 = from_bits16(pass ? all : shuffled, dt);
      Tensor x = x16.clone().requires_grad_(), xw = x16.to(f32).requires_grad_();
      const Tensor y = relu(x), yw = relu(xw);
      REQUIRE(y.dtype() == dt);
      CHECK(bits16(y) == bits16(yw.detach().to(dt)));
      y.backward(g16);
      yw.backward(g16.to(f32));
      CHECK(bits16(x.grad()) == bits16(xw.grad().to(dt)));
    }
    // -0 and negatives give +0, and so does the gradient there (PyTorch's threshold_backward
    // selects +0, whatever g's sign)
    const Tensor x = from_bits16({0x8000, 0x8001, 0x0001, 0x3c00, 0xbc00}, dt).requires_grad_();
    const Tensor y = relu(x);
    CHECK(bits16(y) == std::vector<uint16_t>{0, 0, 0x0001, 0x3c00, 0});
    y.backward(from_bits16({0xbc00, 0xbc00, 0xbc00, 0xbc00, 0xbc00}, dt));
    CHECK(bits16(x.grad()) == std::vector<uint16_t>{0, 0, 0xbc00, 0xbc00, 0});
  }
}

TEST_CASE("elementwise errors name shapes, dtypes and devices") {
  std::string m = test::error_of([] { zeros({2, 3}) + zeros({4}); });
  CHECK(m.find("[2, 3]") != std::string::npos);
  CHECK(m.find("[4]") != std::string::npos);
  CHECK(test::error_of([] { exp(zeros({2}, {.dtype = DType::int64})); }).find("int64") != std::string::npos);
  CHECK(test::error_of([] { relu(Tensor()); }).find("undefined") != std::string::npos);
  CHECK(test::error_of([] { clamp(zeros({2}), 1.0, -1.0); }).find("greater") != std::string::npos);
  // subtracting a bool tensor is an error, as in PyTorch (a C++ number beside it too)
  const Tensor mask = gt(T({1, -1}, {2}), 0.0);
  CHECK(test::error_of([&] { sub(mask, zeros({2}, {.dtype = DType::float16})); }).find("bool") != std::string::npos);
  CHECK(test::error_of([&] { 1.0 - mask; }).find("bool") != std::string::npos);
  CHECK(test::error_of([&] { sub(mask, 1.0); }).find("bool") != std::string::npos);
  CHECK(eq(mask, 0.0).to_vector<double>() == std::vector<double>{0, 1});
}

TEST_CASE("in-place add_ and mul_ with broadcasting") {
  Tensor a = zeros({2, 3});
  a.add_(T({1, 2, 3}, {3}).to(DType::float32));
  a.add_(ones({2, 1}), 2.0);
  CHECK(a.to_vector<float>() == std::vector<float>{3, 4, 5, 3, 4, 5});
  a.mul_(2.0);
  CHECK(a.at({1, 2}) == 10.0);
  CHECK_THROWS_AS(a.add_(zeros({3, 3})), Error);
  // alpha * other in float32 (PyTorch's opmath), not in a 16-bit other's dtype (PyTorch 2.15's
  // values): a small increment is kept, a large one does not overflow
  Tensor p = zeros({1});
  p.add_(full({1}, 1e-4, {.dtype = DType::float16}), -1e-4);
  CHECK(p.item() == doctest::Approx(-1.00017e-8).epsilon(1e-4));
  Tensor w = zeros({1}, {.dtype = DType::bfloat16});
  w.add_(full({1}, 65504.0, {.dtype = DType::float16}), 3.0);
  CHECK(w.item() == 196608.0);
  CHECK(w.dtype() == DType::bfloat16);
}

TEST_CASE("relu propagates NaN (as PyTorch), forward and backward; so do leaky_relu and clamp") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dt : {DType::float32, DType::float64}) {
    CAPTURE(std::string(dtype_name(dt)));
    Tensor x = T({nan, -1, 0, 2}, {4}).to(dt).requires_grad_();
    std::vector<double> y = relu(x).to_vector<double>();
    CHECK(std::isnan(y[0]));  // used to be 0
    CHECK(y[1] == 0);
    CHECK(y[2] == 0);
    CHECK(y[3] == 2);
    // backward passes the gradient except where x <= 0 (PyTorch's threshold_backward)
    relu(x).backward(ones({4}, {.dtype = dt}));
    CHECK(x.grad().to_vector<double>() == std::vector<double>{1, 0, 0, 1});
    CHECK(std::isnan(leaky_relu(x, 0.1).to_vector<double>()[0]));
    CHECK(std::isnan(clamp(x, 0.0, 1.0).to_vector<double>()[0]));
  }
}

TEST_CASE("an inf or NaN gradient stops where relu, clamp and pow(x, 0) have a zero derivative (PyTorch selects)") {
  // PyTorch 2.15: relu's backward is threshold_backward, clamp's and pow(x, 0)'s select 0;
  // g * 0 would turn an inf or NaN gradient into NaN there.
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  for (DType dt : {DType::float32, DType::float64, DType::float16, DType::bfloat16}) {
    CAPTURE(std::string(dtype_name(dt)));
    const Tensor g = T({inf, nan, -inf, 1}, {4}).to(dt);
    Tensor x = T({-1, -2, 0, 0.5}, {4}).to(dt).requires_grad_();
    relu(x).backward(g);
    std::vector<double> gx = x.grad().to_vector<double>();
    CHECK(gx[0] == 0);
    CHECK(gx[1] == 0);
    CHECK(gx[2] == 0);
    CHECK(gx[3] == 1);
    CHECK(!std::signbit(gx[2]));  // +0 (selected), not g * 0 = -0
    Tensor y = T({5, -3, 2, 1}, {4}).to(dt).requires_grad_();
    clamp(y, -1.5, 2.0).backward(g);
    CHECK(y.grad().to_vector<double>() == std::vector<double>{0, 0, 0, 1});
    Tensor z = T({1, 0, -2, 3}, {4}).to(dt).requires_grad_();
    pow(z, 0.0).backward(g);
    CHECK(z.grad().to_vector<double>() == std::vector<double>{0, 0, 0, 0});
    // inside, the gradient passes as it is: inf and NaN included
    Tensor w = T({1, 1, 1, 1}, {4}).to(dt).requires_grad_();
    relu(w).backward(g);
    gx = w.grad().to_vector<double>();
    CHECK(gx[0] == inf);
    CHECK(std::isnan(gx[1]));
    CHECK(gx[2] == -inf);
  }
}

TEST_CASE("scalars beside integer tensors: PyTorch's wrapped numbers, never undefined conversions") {
  const double inf = std::numeric_limits<double>::infinity();
  Tensor i = from_vector<int64_t>({3, -4});
  Tensor r = add(i, inf);  // was int64 -9.2e18: inf converted to int64 (undefined behaviour)
  CHECK(r.dtype() == DType::float32);
  CHECK(r.to_vector<double>() == std::vector<double>{inf, inf});
  CHECK(gt(i, 1e30).to_vector<double>() == std::vector<double>{0, 0});
  CHECK(lt(i, 1e30).to_vector<double>() == std::vector<double>{1, 1});
  CHECK(std::isnan(add(i, std::nan("")).to_vector<double>()[0]));
  CHECK(add(i, 0.5).dtype() == DType::float32);
  // a whole number is an integer scalar converted to the computation's dtype, as PyTorch's
  // int literals (values from PyTorch 2.15): wrapping in integer arithmetic and comparisons,
  // its own value in a true division
  Tensor i32 = from_vector<int32_t>({1, 2});
  CHECK(mul(i32, 3.0).dtype() == DType::int32);
  CHECK(lt(i32, 3e9).to_vector<double>() == std::vector<double>{0, 0});  // 3e9 wraps in int32
  Tensor u8 = from_vector<uint8_t>({3, 200, 0});
  CHECK(add(u8, -3.0).to_vector<double>() == std::vector<double>{0, 197, 253});
  CHECK(mul(u8, -3.0).to_vector<double>() == std::vector<double>{247, 168, 0});
  CHECK(lt(u8, -3.0).to_vector<double>() == std::vector<double>{1, 1, 1});
  CHECK(eq(from_vector<uint8_t>({255, 2}), -1.0).to_vector<double>() == std::vector<double>{1, 0});
  CHECK(add(from_vector<uint8_t>({1, 2}), 300.0).to_vector<double>() == std::vector<double>{45, 46});
  CHECK(div(from_vector<uint8_t>({3, 6}), -3.0).to_vector<double>() == std::vector<double>{-1, -2});  // was 3/253
  CHECK((-6.0 / from_vector<uint8_t>({3, 6})).to_vector<double>() == std::vector<double>{-2, -1});
  // scalar - tensor subtracts (it was -tensor + scalar, and -tensor wraps uint8)
  CHECK((-3.0 - u8).to_vector<double>() == std::vector<double>{250, 53, 253});
  CHECK((-1.5 - u8).to_vector<double>() == std::vector<double>{-4.5, -201.5, -1.5});
  CHECK((0.5 - from_vector<int32_t>({-2147483647 - 1, 5})).to_vector<double>() ==
        std::vector<double>{2147483648.0, -4.5});
  // masked_fill with a value an integer tensor cannot hold is an error (was garbage)
  Tensor m = from_vector<bool>({true, false});
  CHECK_THROWS_AS(masked_fill(i, m, std::nan("")), Error);
  CHECK_THROWS_AS(masked_fill(from_vector<int32_t>({1, 2}), m, 1e10), Error);
  CHECK(masked_fill(i, m, 7.0).to_vector<double>() == std::vector<double>{7, -4});
}

TEST_CASE("operands are rounded to a 16-bit result dtype before the float32 math; pow's exponent too (PyTorch 2.15's values)") {
  const DType bf = DType::bfloat16, f16 = DType::float16;
  // a 0-dim float32: 1.01171875 is bf16 1.015625 first (it was added unrounded: 1.0)
  CHECK(add(full({1}, -0.0108642578, {.dtype = bf}), scalar_tensor(1.01171875)).item() == 1.0078125);
  // a 0-dim float64 below float16's range is -inf, equal to a float16 -inf
  CHECK(eq(full({1}, -INFINITY, {.dtype = f16}), scalar_tensor(-3.39617733e38, {.dtype = DType::float64}))
            .item<bool>());
  // an int32 tensor: -293 is bf16 -292
  CHECK(add(full({1}, -0.0180664062, {.dtype = bf}), full({1}, -293.0, {.dtype = DType::int32})).item() == -292.0);
  CHECK(mul(full({1}, 0.75, {.dtype = bf}), full({1}, 293.0, {.dtype = DType::int32})).item() == 219.0);
  // mul and div by a 0-dim operand keep its value (PyTorch's opmath scalar): bf16(3) * 0.1f
  CHECK(mul(full({1}, 3.0, {.dtype = bf}), scalar_tensor(0.1)).item() == double(round_to_bf16(3.0f * 0.1f)));
  // pow's exponent in the base's dtype: 1e-8 is 0 in float16, so (-2)^0 = 1 (it was NaN)
  CHECK(pow(full({1}, -2.0, {.dtype = f16}), 1e-8).item() == 1.0);
  CHECK(pow(full({1}, 8.0, {.dtype = bf}), 1.0 / 3).item() == double(round_to_bf16(std::pow(8.0f, 0.333984375f))));
  CHECK(test::error_of([] { pow(full({1}, 2.0, {.dtype = f16}), 1e5); }).find("overflow") != std::string::npos);
  CHECK(test::error_of([] { pow(full({1}, 2.0), 1e39); }).find("float32") != std::string::npos);
}

TEST_CASE("pow's special exponents and log's backward at a subnormal input, as PyTorch 2.15") {
  const double inf = std::numeric_limits<double>::infinity();
  for (DType dt : {DType::float32, DType::float64, DType::bfloat16}) {
    CAPTURE(std::string(dtype_name(dt)));
    // +-0.5 are square roots (the C library's pow gives inf and +0 at -inf and -0)
    std::vector<double> r = pow(T({-inf, -0.0, 4}, {3}).to(dt), 0.5).to_vector<double>();
    CHECK(std::isnan(r[0]));
    CHECK((r[1] == 0 && std::signbit(r[1])));
    CHECK(r[2] == 2);
    r = pow(T({-inf, -0.0, 4}, {3}).to(dt), -0.5).to_vector<double>();
    CHECK(std::isnan(r[0]));
    CHECK(r[1] == -inf);
    CHECK(r[2] == 0.5);
    // the backward's x^(p - 1) takes the same path: x^1.5 at -inf has gradient NaN
    Tensor x = T({-inf, 4}, {2}).to(dt).requires_grad_();
    pow(x, 1.5).backward(ones({2}, {.dtype = dt}));
    r = x.grad().to_vector<double>();
    CHECK(std::isnan(r[0]));
    CHECK(r[1] == 3);
  }
  // log's backward is g / x: 1/x overflows float32 at a subnormal x, g / x need not
  Tensor x = from_vector(std::vector<float>{9.18354962e-41f}).requires_grad_();
  log(x).backward(from_vector(std::vector<float>{0.00752768153f}));
  CHECK(x.grad().item() == doctest::Approx(8.19691933e37).epsilon(1e-6));
}

TEST_CASE("a 0-dim tensor does not widen a dimensioned one of its category (PyTorch's result_type)") {
  Tensor f = T({1, 2, 3}, {3}).to(DType::float32);
  Tensor s64 = scalar_tensor(0.5, f64);
  CHECK(mul(f, s64).dtype() == DType::float32);
  CHECK(where(gt(f, 1.5), f, s64).dtype() == DType::float32);
  CHECK(add(f.to(DType::float16), scalar_tensor(1.0)).dtype() == DType::float16);
  Tensor i = from_vector<int64_t>({1, 2});
  CHECK(add(i, s64).dtype() == DType::float64);  // higher category: the 0-dim tensor counts
  CHECK(add(from_vector<int32_t>({1}), scalar_tensor(2, {.dtype = DType::int64})).dtype() == DType::int32);
  Tensor u8 = from_vector<uint8_t>({0, 1});
  CHECK(add(u8, scalar_tensor(-1, {.dtype = DType::int64})).dtype() == DType::uint8);
  CHECK(mul(scalar_tensor(2.0, f64), s64).dtype() == DType::float64);  // both 0-dim
  // a C++ number ranks below a 0-dim tensor too (PyTorch's wrapped numbers; values from 2.15)
  const Tensor u0 = scalar_tensor(200, {.dtype = DType::uint8});
  CHECK(add(u0, 100.0).dtype() == DType::uint8);  // PyTorch's u8 + 100: wraps to 44
  CHECK(add(u0, 100.0).item() == 44.0);
  CHECK(lt(scalar_tensor(5, {.dtype = DType::uint8}), -3.0).item() == 1.0);  // -3 as uint8 is 253
  CHECK(add(u0, 0.5).dtype() == DType::float32);                              // a fraction: float32
  CHECK(add(scalar_tensor(3, {.dtype = DType::int32}), 5.0).dtype() == DType::int32);
  const Tensor h0 = scalar_tensor(1.5, {.dtype = DType::float16});
  CHECK(mul(h0, 2.5).dtype() == DType::float16);
  CHECK(mul(h0, 2.5).item() == 3.75);
  CHECK(div(scalar_tensor(1.5, {.dtype = DType::bfloat16}), 3.0).dtype() == DType::bfloat16);
  // a number a 16-bit dtype cannot hold is +-inf as an operand (a fill with it stays an error)
  const Tensor x16 = from_vector<double>({1.0, -65000.0}, {2}).to(DType::float16);
  CHECK(add(x16, 70000.0).to_vector<double>() == std::vector<double>{INFINITY, INFINITY});
  CHECK(lt(x16, 1e5).to_vector<double>() == std::vector<double>{1, 1});
  CHECK(eq(scalar_tensor(1.0, {.dtype = DType::bfloat16}), 1e39).item() == 0.0);
  Tensor y16 = from_vector<double>({1e-3}, {1}).to(DType::float16);
  y16.mul_(1e5);
  CHECK(y16.item() == 100.0625);
  CHECK_THROWS_AS(full({1}, 70000.0, {.dtype = DType::float16}), Error);
  CHECK(mul(f, T({2}, {1})).dtype() == DType::float64);                  // both dimensioned
  // gradients come back in each input's dtype
  Tensor a = T({1, 2, 3}, {3}).to(DType::float32).requires_grad_();
  Tensor b = scalar_tensor(0.5, f64).requires_grad_();
  Tensor h = mul(a, a);  // an intermediate node: its input gets a float32 gradient
  sum(mul(h, b)).backward();
  CHECK(b.grad().dtype() == DType::float64);
  CHECK(b.grad().item() == 14.0);
  CHECK(a.grad().dtype() == DType::float32);
  CHECK(a.grad().to_vector<double>() == std::vector<double>{1, 2, 3});
}

TEST_CASE("pow, maximum, minimum, clamp: gradients at 0, NaN, ties and bounds as in PyTorch") {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  {  // values from PyTorch 2.15: a = [0, 0, 2, 0], b = [0, -1, 0, 0.5]
    Tensor a = T({0, 0, 2, 0}, {4}).requires_grad_(), b = T({0, -1, 0, 0.5}, {4}).requires_grad_();
    sum(pow(a, b)).backward();
    CHECK(a.grad().to_vector<double>() == std::vector<double>{0, -inf, 0, inf});
    const std::vector<double> gb = b.grad().to_vector<double>();
    CHECK(gb[0] == 0);
    CHECK(gb[1] == -inf);
    CHECK(gb[2] == doctest::Approx(std::log(2.0)));
    CHECK(gb[3] == 0);
    // a broadcast exponent 0: no NaN summed into the exponent's gradient
    Tensor e = T({0}, {1}).requires_grad_();
    Tensor base = T({0, 3}, {2}).requires_grad_();
    sum(pow(base, e)).backward();
    CHECK(base.grad().to_vector<double>() == std::vector<double>{0, 0});
    CHECK(e.grad().item() == doctest::Approx(std::log(3.0)));
  }
  {  // maximum / minimum: ties split, NaN gives both the whole gradient
    Tensor a = T({1, 2, nan, 3}, {4}).requires_grad_(), b = T({1, 5, 0, nan}, {4}).requires_grad_();
    maximum(a, b).backward(T({2, 2, 2, 2}, {4}));
    CHECK(a.grad().to_vector<double>() == std::vector<double>{1, 0, 2, 2});
    CHECK(b.grad().to_vector<double>() == std::vector<double>{1, 2, 2, 2});
    Tensor c = T({1, 2, nan}, {3}).requires_grad_(), d = T({1, 5, 0}, {3}).requires_grad_();
    minimum(c, d).backward(T({2, 2, 2}, {3}));
    CHECK(c.grad().to_vector<double>() == std::vector<double>{1, 2, 2});
    CHECK(d.grad().to_vector<double>() == std::vector<double>{1, 0, 2});
  }
  {  // clamp: 1 strictly inside, 0 at the bounds; an absent bound passes +-inf
    Tensor x = T({-inf, 0, 1, 1.5, 2, 3, inf, nan}, {8}).requires_grad_();
    sum(clamp(x, 1.0, 2.0)).backward();
    CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 0, 0, 1, 0, 0, 0, 0});
    Tensor y = T({-inf, 0, 1, 2, 3, inf, nan}, {7}).requires_grad_();
    sum(clamp(y, 1.0, std::nullopt)).backward();
    CHECK(y.grad().to_vector<double>() == std::vector<double>{0, 0, 0, 1, 1, 1, 0});
    Tensor z = T({-inf, 0, 1, 2, 3, inf, nan}, {7}).requires_grad_();
    sum(clamp(z, std::nullopt, 2.0)).backward();
    CHECK(z.grad().to_vector<double>() == std::vector<double>{1, 1, 1, 0, 0, 0, 0});
    // a NaN bound: all NaN, gradient 0 (was: the bound ignored, or a misleading min > max error)
    Tensor w = T({0, 5}, {2}).requires_grad_();
    Tensor cw = clamp(w, nan, 1.0);
    for (double v : cw.to_vector<double>()) CHECK(std::isnan(v));
    sum(cw).backward();
    CHECK(w.grad().to_vector<double>() == std::vector<double>{0, 0});
    CHECK(std::isnan(clamp(w, std::nullopt, nan).to_vector<double>()[1]));
  }
}

TEST_CASE("in-place ops on overlapping memory: refused on an expanded destination, a copy of an overlapping source") {
  Tensor b = T({1, 2, 3, 4}, {2, 2});
  b.add_(b.t());  // read whole before written: b + b^T (was [[2, 5], [8, 8]])
  CHECK(b.to_vector<double>() == std::vector<double>{2, 5, 5, 8});
  Tensor c = T({1, 2, 3, 4}, {2, 2});
  c.copy_(c.t());
  CHECK(c.to_vector<double>() == std::vector<double>{1, 3, 2, 4});
  Tensor r = T({1, 2, 3, 4, 5, 6}, {2, 3});
  r.add_(r.select(0, 0));  // a row of itself, broadcast
  CHECK(r.to_vector<double>() == std::vector<double>{2, 4, 6, 5, 7, 9});
  Tensor row = T({1, 2, 3}, {3});
  CHECK_THROWS_AS(row.expand({4, 3}).add_(ones({4, 3}, f64)), Error);
  CHECK_THROWS_AS(row.expand({4, 3}).mul_(2.0), Error);
  CHECK_THROWS_AS(row.expand({4, 3}).copy_(zeros({4, 3}, f64)), Error);
  CHECK(row.to_vector<double>() == std::vector<double>{1, 2, 3});  // untouched
  row.expand({4, 3}).fill_(7.0);  // writing one value is well defined
  CHECK(row.to_vector<double>() == std::vector<double>{7, 7, 7});
  // an in-place op cannot change an integer tensor into a float one
  Tensor i = from_vector<int64_t>({2, 3});
  CHECK_THROWS_AS(i.mul_(2.5), Error);
  CHECK_THROWS_AS(i.add_(T({0.5, 0.5}, {2})), Error);
  CHECK_THROWS_AS(i.add_(from_vector<int64_t>({1, 1}), 0.5), Error);
  i.mul_(2.0);
  CHECK(i.to_vector<double>() == std::vector<double>{4, 6});
  // the same view, and disjoint views of one storage, need no copy and work as before
  Tensor m = T({1, 2, 3, 4}, {4});
  m.add_(m);
  CHECK(m.to_vector<double>() == std::vector<double>{2, 4, 6, 8});
  m.slice(0, 0, 2).add_(m.slice(0, 2, 4));
  CHECK(m.to_vector<double>() == std::vector<double>{8, 12, 6, 8});
  CHECK(!m.slice(0, 0, 2).partially_overlaps(m.slice(0, 2, 4)));
  CHECK(m.slice(0, 0, 3).partially_overlaps(m.slice(0, 2, 4)));
}

TEST_CASE("pow of integer tensors is exact and stays integer (PyTorch 2.15's values)") {
  Tensor a = from_vector<int64_t>({2, -2, 3, 0, 10, 7});
  Tensor b = from_vector<int64_t>({3, 3, 0, 0, 15, 2});
  Tensor p = pow(a, b);
  CHECK(p.dtype() == DType::int64);
  CHECK(p.to_vector<int64_t>() == std::vector<int64_t>{8, -8, 1, 1, 1000000000000000, 49});  // was float32 999999986991104
  CHECK(pow(from_vector<int64_t>({3}), from_vector<int64_t>({39})).to_vector<int64_t>()[0] == 4052555153018976267);
  CHECK(pow(from_vector<int64_t>({2, -1, 1, -1, 5}), from_vector<int64_t>({-1, -1, -2, -2, -3})).to_vector<int64_t>() ==
        std::vector<int64_t>{0, -1, 1, 1, 0});
  CHECK(pow(2.0, from_vector<int64_t>({-1, 0, 2, 3})).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 4, 8});
  CHECK(pow(from_vector<int32_t>({2, -3, 5}), 2.0).to_vector<int32_t>() == std::vector<int32_t>{4, 9, 25});
  CHECK_THROWS_AS(pow(from_vector<int64_t>({-2, 0, 3}), -1.0), Error);  // PyTorch: not allowed
  CHECK(pow(from_vector<uint8_t>({2, 3}), 3.0).to_vector<uint8_t>() == std::vector<uint8_t>{8, 27});
  Tensor half = pow(from_vector<int64_t>({4, 9}), 0.5);  // a fractional exponent: float32
  CHECK(half.dtype() == DType::float32);
  CHECK(half.to_vector<double>() == std::vector<double>{2, 3});
  CHECK_THROWS_AS(pow(from_vector<bool>({true}), from_vector<bool>({true})), Error);  // PyTorch raises too
}

TEST_CASE("16-bit and extreme divisors: div's gradient in PyTorch's order, pow's log in the result's precision") {
  // d(a/b)/db = -g (a/b)/b: -g a/(b*b) overflowed b*b in float16 for |b| >= 256 (gradient 0)
  // and underflowed it to 0 in float32 (0/0 = NaN)
  auto grad_b = [](const Tensor& a, Tensor b) {
    b.requires_grad_();
    div(a, b).backward(ones_like(b));
    return b.grad().to_vector<double>();
  };
  const TensorOptions h{.dtype = DType::float16};
  std::vector<double> g = grad_b(full({1}, 1000, h), full({1}, 300, h));
  CHECK(g[0] == doctest::Approx(-1000.0 / 90000).epsilon(1e-3));  // PyTorch 2.15: -0.011116
  g = grad_b(full({1}, 0.0), full({1}, 1e-30));
  CHECK(g[0] == 0.0);
  CHECK(std::signbit(g[0]));  // -0, as PyTorch (was NaN)
  g = grad_b(full({1}, 1.0), full({1}, 1e20));
  CHECK(g[0] == doctest::Approx(-1e-40).epsilon(1e-3));  // a float32 subnormal (was -0)
  // d a^b / db = a^b log a with log in the result's dtype (float32), not the float16 base's
  Tensor a = from_vector<double>({3.0, 0.7}).to(DType::float16), e = from_vector<float>({2.5f, -1.5f});
  e.requires_grad_();
  pow(a, e).backward(ones_like(e));
  const std::vector<float> ge = e.grad().to_vector<float>();
  CHECK(ge[0] == doctest::Approx(17.1256707).epsilon(1e-6));  // was 17.12599
  CHECK(ge[1] == doctest::Approx(-0.6082806).epsilon(1e-6));
}

TEST_CASE("a C++ scalar times or over a 16-bit tensor stays float32 (PyTorch's opmath), rounded once") {
  for (DType dt : {DType::bfloat16, DType::float16}) {
    CAPTURE(dtype_name(dt));
    Tensor x = from_vector<double>({7, 100, 3, -0.75}).to(dt);
    const std::vector<float> xv = x.to_vector<float>();
    auto round16 = [dt](float v) { return full({}, v, {.dtype = dt}).item(); };
    const std::vector<double> q = div(x, 0.3).to_vector<double>(), p = mul(x, 0.1).to_vector<double>();
    for (size_t i = 0; i < xv.size(); ++i) {
      CHECK(q[i] == round16(xv[i] / 0.3f));
      CHECK(p[i] == round16(xv[i] * 0.1f));
    }
    CHECK(div(x, 0.3).dtype() == dt);
  }
  // PyTorch 2.15: bf16 [7, 100] / 0.3 is [23.375, 334] (it was [23.25, 332])
  CHECK(div(from_vector<double>({7, 100}).to(DType::bfloat16), 0.3).to_vector<double>() ==
        std::vector<double>{23.375, 334});
  // the gradient multiplies by the same float32 scalar
  Tensor x = full({2}, 3.0, {.dtype = DType::bfloat16, .requires_grad = true});
  mul(x, 0.1).backward(ones_like(x));
  CHECK(x.grad().to_vector<double>()[0] == full({}, 0.1f, {.dtype = DType::bfloat16}).item());
}

TEST_CASE("reciprocal, square, tan, atan, asin, acos, sinh, cosh, erf, erfc, exp2, log2, log10: values, "
          "gradients twice, integers, 16 bits") {
  using F = Tensor (*)(const Tensor&);
  using D = double (*)(double);
  struct Row {
    const char* name;
    F f;
    D ref;
    double lo, hi;  // the input range of the checks
  };
  const Row rows[] = {
      {"reciprocal", F(reciprocal), [](double x) { return 1 / x; }, 0.3, 2},
      {"square", F(square), [](double x) { return x * x; }, -2, 2},
      {"tan", F(kiln::tan), [](double x) { return std::tan(x); }, -1.2, 1.2},
      {"atan", F(kiln::atan), [](double x) { return std::atan(x); }, -3, 3},
      {"asin", F(kiln::asin), [](double x) { return std::asin(x); }, -0.9, 0.9},
      {"acos", F(kiln::acos), [](double x) { return std::acos(x); }, -0.9, 0.9},
      {"sinh", F(kiln::sinh), [](double x) { return std::sinh(x); }, -3, 3},
      {"cosh", F(kiln::cosh), [](double x) { return std::cosh(x); }, -3, 3},
      {"erf", F(kiln::erf), [](double x) { return std::erf(x); }, -2, 2},
      {"erfc", F(kiln::erfc), [](double x) { return std::erfc(x); }, -2, 2},
      {"exp2", F(kiln::exp2), [](double x) { return std::exp2(x); }, -3, 3},
      {"log2", F(kiln::log2), [](double x) { return std::log2(x); }, 0.2, 4},
      {"log10", F(kiln::log10), [](double x) { return std::log10(x); }, 0.2, 4},
  };
  manual_seed(61);
  for (const Row& r : rows) {
    CAPTURE(r.name);
    const Tensor x = add(mul(rand({3, 4}, f64), r.hi - r.lo), r.lo);
    const auto xv = x.to_vector<double>(), yv = r.f(x).to_vector<double>();
    for (size_t i = 0; i < xv.size(); ++i) CHECK(yv[i] == doctest::Approx(r.ref(xv[i])).epsilon(1e-15));
    const auto y32 = r.f(x.to(DType::float32)).to_vector<float>();
    for (size_t i = 0; i < xv.size(); ++i)
      CHECK(y32[i] == doctest::Approx(r.ref(double(float(xv[i])))).epsilon(2e-6));
    CHECK(gradcheck([&](auto& in) { return r.f(in[0]); }, {x}));
    CHECK(kiln::test::gradgradcheck([&](auto& in) { return r.f(in[0]); }, {x}));
    const Tensor h = r.f(x.to(DType::bfloat16));
    CHECK(h.dtype() == DType::bfloat16);
    CHECK(max_abs_diff(h.to(DType::float32), r.f(x.to(DType::bfloat16).to(DType::float32)).to(DType::bfloat16).to(
                                                 DType::float32)) == 0);
  }
  // PyTorch's gradients at the edges: asin's is inf at 1 and NaN beyond; reciprocal's -1/x^2
  Tensor a = T({1, 2}, {2}).requires_grad_(true);
  sum(kiln::asin(a)).backward();
  CHECK(std::isinf(a.grad().to_vector<double>()[0]));
  CHECK(std::isnan(a.grad().to_vector<double>()[1]));
  Tensor b = T({-2}, {1}).requires_grad_(true);
  sum(reciprocal(b)).backward();
  CHECK(b.grad().item() == -0.25);
  CHECK(square(from_vector<int64_t>({-3, 4}, {2})).to_vector<int64_t>() == std::vector<int64_t>{9, 16});
  CHECK(kiln::testing::error_of([] { kiln::tan(from_vector<int64_t>({1}, {1})); }).find("float") != std::string::npos);
}

TEST_CASE("isnan, isinf, isfinite, logical_*, any, all, lerp, nan_to_num: PyTorch's results") {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor x = from_vector<double>({1, nan, inf, -inf, 0}, {5});
  auto b = [](const Tensor& t) {
    REQUIRE(t.dtype() == DType::bool_);
    return t.to(DType::int64).to_vector<int64_t>();
  };
  using V = std::vector<int64_t>;
  CHECK(b(isnan(x)) == V{0, 1, 0, 0, 0});
  CHECK(b(isinf(x)) == V{0, 0, 1, 1, 0});
  CHECK(b(isfinite(x)) == V{1, 0, 0, 0, 1});
  CHECK(b(isfinite(from_vector<int64_t>({3}, {1}))) == V{1});
  CHECK(b(isnan(from_vector<int64_t>({3}, {1}))) == V{0});
  CHECK(b(logical_not(x)) == V{0, 0, 0, 0, 1});  // NaN is true
  const Tensor p = from_vector<double>({0, 1, 2, 0}, {4}), q = from_vector<int64_t>({0, 0, 5, 3}, {4});
  CHECK(b(logical_and(p, q)) == V{0, 0, 1, 0});
  CHECK(b(logical_or(p, q)) == V{0, 1, 1, 1});
  CHECK(b(logical_xor(p, q)) == V{0, 1, 0, 1});
  CHECK(b(logical_and(gt(p, 0.5), ones({1}, {.dtype = DType::bool_}))) == V{0, 1, 1, 0});  // bool, broadcast
  CHECK(b(logical_not(gt(p, 0.5))) == V{1, 0, 0, 1});
  CHECK(b(any(p)) == V{1});
  CHECK(b(all(p)) == V{0});
  CHECK(b(all(x)) == V{0});
  CHECK(b(any(T({0, 0, 0, 1}, {2, 2}), {1})) == V{0, 1});
  CHECK(b(all(T({1, 2, 0, 1}, {2, 2}), {0}, true)) == V{0, 1});
  CHECK(all(T({1, 2, 0, 1}, {2, 2}), {0}, true).shape() == Shape{1, 2});
  // lerp: the start side below |w| = 0.5, the end side above (exact at w = 1)
  CHECK(lerp(T({1}, {1}), T({3}, {1}), 0.7).item() == 3 - (3 - 1) * (1 - 0.7));
  CHECK(lerp(T({1}, {1}), T({3}, {1}), 0.2).item() == 1 + (3 - 1) * 0.2);
  CHECK(lerp(T({0.1}, {1}), T({0.7}, {1}), 1.0).item() == 0.7);
  manual_seed(67);
  CHECK(gradcheck([](auto& in) { return lerp(in[0], in[1], in[2]); },
                  {randn({3}, f64), randn({2, 3}, f64), rand({2, 3}, f64)}));
  CHECK(gradcheck([](auto& in) { return lerp(in[0], in[1], 0.8); }, {randn({3}, f64), randn({3}, f64)}));
  const Tensor n = nan_to_num(x);
  CHECK(n.to_vector<double>() == std::vector<double>{1, 0, std::numeric_limits<double>::max(),
                                                     std::numeric_limits<double>::lowest(), 0});
  CHECK(nan_to_num(x.to(DType::float32), 9, 7, -7).to_vector<float>() == std::vector<float>{1, 9, 7, -7, 0});
  CHECK(nan_to_num(x.to(DType::bfloat16)).to(DType::float32).to_vector<float>()[2] == 3.3895313892515355e38f);
  Tensor g = x.clone().requires_grad_(true);
  sum(nan_to_num(g)).backward();
  CHECK(g.grad().to_vector<double>() == std::vector<double>{1, 0, 0, 0, 1});
}

TEST_CASE("where with a C++ number on one side: PyTorch's dtypes (wrapped numbers), values, gradient") {
  const Tensor c = gt(T({1, -1}, {2}), 0.0);
  const Tensor i = from_vector<int64_t>({1, 2}, {2});
  CHECK(where(c, i, 0.5).dtype() == DType::float32);
  CHECK(where(c, i, 0.5).to_vector<float>() == std::vector<float>{1, 0.5f});
  CHECK(where(c, i, 3.0).dtype() == DType::int64);
  CHECK(where(c, 2.5, i).dtype() == DType::float32);
  CHECK(where(c, 2.5, i).to_vector<float>() == std::vector<float>{2.5f, 2});
  CHECK(where(c, 2.0, i).dtype() == DType::int64);  // a whole C++ number beside integers is one (as add's)
  CHECK(where(c, T({1, 2}, {2}).to(DType::float16), 3.0).dtype() == DType::float16);
  Tensor x = T({4, 5}, {2}).requires_grad_(true);
  sum(where(c, x, -1.0)).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{1, 0});
}

// The expected values are PyTorch 2.15's (torch.fmod, remainder, floor_divide, atan2 on the
// same inputs), printed by a script.
TEST_CASE("fmod, remainder, floor_divide, atan2: PyTorch's values, signs of zero, inf and NaN, integers") {
  const double inf = INFINITY;
  auto same = [](const Tensor& t, const std::vector<double>& want) {
    const std::vector<double> got = t.to(DType::float64).to_vector<double>();
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      CAPTURE(i);
      CAPTURE(got[i]);
      CHECK(((std::isnan(got[i]) && std::isnan(want[i])) ||
             (got[i] == want[i] && std::signbit(got[i]) == std::signbit(want[i]))));
    }
  };
  const Tensor a = T({5.5, -5.5, 5.5, -5.5, 0.0, -0.0, 7.0, -7.0, 1.0, -1.0, inf, 5.1, 3.0}, {13});
  const Tensor b = T({2.0, 2.0, -2.0, -2.0, -3.0, 3.0, inf, inf, 0.0, 0.0, 2.0, 0.1, -0.0}, {13});
  same(fmod(a, b), {1.5, -1.5, 1.5, -1.5, 0.0, -0.0, 7.0, -7.0, NAN, NAN, NAN, 0.09999999999999937, NAN});
  same(remainder(a, b), {1.5, 0.5, -0.5, -1.5, 0.0, -0.0, 7.0, inf, NAN, NAN, NAN, 0.09999999999999937, NAN});
  same(a % b, {1.5, 0.5, -0.5, -1.5, 0.0, -0.0, 7.0, inf, NAN, NAN, NAN, 0.09999999999999937, NAN});
  same(floor_divide(a, b), {2.0, -3.0, -3.0, 2.0, -0.0, -0.0, 0.0, -1.0, inf, -inf, NAN, 50.0, -inf});
  same(fmod(a.to(DType::float32), b.to(DType::float32)).to(DType::float64),
       {1.5, -1.5, 1.5, -1.5, 0.0, -0.0, 7.0, -7.0, NAN, NAN, NAN, double(std::fmod(5.1f, 0.1f)), NAN});
  const Tensor y = T({1.0, -1.0, 0.0, -0.0, 0.0, 1.0, -2.0}, {7}), x = T({0.0, 0.0, -1.0, -1.0, 0.0, inf, -3.0}, {7});
  const std::vector<double> angles{1.5707963267948966, -1.5707963267948966, 3.141592653589793, -3.141592653589793,
                                   0.0, 0.0, -2.5535900500422257};
  const std::vector<double> got = atan2(y, x).to_vector<double>();
  for (size_t i = 0; i < angles.size(); ++i) CHECK(got[i] == doctest::Approx(angles[i]).epsilon(1e-15));

  // integers stay integers (uint8 too); a C++ number beside them follows the wrapped-number rule
  const Tensor ia = from_vector<int64_t>({7, -7, 7, -7, 0, -9, 9}, {7}), ib = from_vector<int64_t>({3, 3, -3, -3, 5, -1, -4}, {7});
  using I = std::vector<int64_t>;
  CHECK(fmod(ia, ib).to_vector<int64_t>() == I{1, -1, 1, -1, 0, 0, 1});
  CHECK(remainder(ia, ib).to_vector<int64_t>() == I{1, 2, -2, -1, 0, 0, -3});
  CHECK(floor_divide(ia, ib).to_vector<int64_t>() == I{2, -3, -3, 2, 0, 9, -3});
  CHECK(floor_divide(ia.to(DType::int32), ib.to(DType::int32)).dtype() == DType::int32);
  CHECK(remainder(ia, -3.0).to_vector<int64_t>() == I{-2, -1, -2, -1, 0, 0, 0});
  CHECK(fmod(ia, 2.5).dtype() == DType::float32);
  CHECK(fmod(ia, 2.5).to_vector<float>() == std::vector<float>{2, -2, 2, -2, 0, -1.5, 1.5});
  CHECK(atan2(ia, ib).dtype() == DType::float32);
  const Tensor u = from_vector<int64_t>({200, 7, 0, 255}, {4}).to(DType::uint8);
  const Tensor v = from_vector<int64_t>({7, 200, 3, 16}, {4}).to(DType::uint8);
  CHECK(remainder(u, v).to(DType::int64).to_vector<int64_t>() == I{4, 7, 0, 15});
  CHECK(floor_divide(u, v).to(DType::int64).to_vector<int64_t>() == I{28, 0, 0, 15});
  const Tensor imin = from_vector<int64_t>({std::numeric_limits<int64_t>::min()}, {1});
  CHECK(fmod(imin, -1.0).to_vector<int64_t>() == I{0});  // C++'s min % -1 overflows; 0, as the result is
  CHECK(floor_divide(imin, -1.0).to_vector<int64_t>() == I{std::numeric_limits<int64_t>::min()});  // wraps
  // 16-bit: float32 math rounded once
  const Tensor h = T({5.5, -7.25, 100.0}, {3}).to(DType::bfloat16), hd = T({2.0, 2.0, -3.0}, {3}).to(DType::bfloat16);
  CHECK(remainder(h, hd).dtype() == DType::bfloat16);
  same(remainder(h, hd), {1.5, 0.75, -2.0});
  same(floor_divide(h, hd), {2.0, -4.0, -34.0});
}

TEST_CASE("fmod, remainder, atan2: gradients (float64 finite differences, PyTorch's at the origin); errors") {
  manual_seed(71);
  // away from the jumps of fmod and remainder (a / b not near a whole number)
  const Tensor a = T({2.3, -2.3, 4.6, -0.4, 0.7, 3.3}, {2, 3}), b = T({0.9, -1.3, 1.7}, {3});
  CHECK(gradcheck([](auto& in) { return fmod(in[0], in[1]); }, {a, b}));
  CHECK(gradcheck([](auto& in) { return remainder(in[0], in[1]); }, {a, b}));
  CHECK(gradcheck([](auto& in) { return in[0] % 0.75; }, {a}));
  CHECK(kiln::test::gradgradcheck([](auto& in) { return remainder(in[0] * in[0], in[1]); }, {a, b}));
  CHECK(gradcheck([](auto& in) { return atan2(in[0], in[1]); }, {randn({2, 3}, f64), randn({3}, f64)}));
  CHECK(kiln::test::gradgradcheck([](auto& in) { return atan2(in[0], in[1]); }, {randn({3}, f64), randn({3}, f64)}));
  {  // at the origin PyTorch's 1 / (y^2 + x^2) is taken as 0: gradients 0 and -0, not NaN
    Tensor y0 = T({0.0}, {1}).requires_grad_(true), x0 = T({0.0}, {1}).requires_grad_(true);
    sum(atan2(y0, x0)).backward();
    CHECK(y0.grad().item() == 0);
    CHECK(x0.grad().item() == 0);
    CHECK(std::signbit(x0.grad().item()));
  }
  {  // floor_divide is not differentiable: a constant, as its derivative is 0 wherever it exists
    Tensor p = T({3.5}, {1}).requires_grad_(true);
    CHECK_FALSE(floor_divide(p, 2.0).requires_grad());
  }
  const Tensor ia = from_vector<int64_t>({7, 8}, {2}), zero = from_vector<int64_t>({3, 0}, {2});
  CHECK(kiln::testing::error_of([&] { fmod(ia, zero); }).find("division by zero") != std::string::npos);
  CHECK(kiln::testing::error_of([&] { remainder(ia, 0.0); }).find("division by zero") != std::string::npos);
  CHECK(kiln::testing::error_of([&] { floor_divide(ia, zero); }).find("remainder") == std::string::npos);
  CHECK_THROWS_AS(floor_divide(ia, zero), kiln::Error);
  CHECK(kiln::testing::error_of([&] { remainder(gt(ia, 7.0), gt(ia, 6.0)); }).find("bool") != std::string::npos);
  CHECK(fmod(T({1.0}, {1}), 0.0).to_vector<double>()[0] != fmod(T({1.0}, {1}), 0.0).to_vector<double>()[0]);  // NaN
}

// The special values are PyTorch 2.15's (torch.hypot, logaddexp, xlogy and their gradients).
TEST_CASE("hypot, logaddexp, xlogy: PyTorch's values at the extremes and its gradients") {
  const double inf = INFINITY, nan = std::nan("");
  const std::vector<double> h = hypot(T({3, 1e200, -1e200, 0, 1e-200}, {5}), T({4, 1e200, 1e199, 5, 1e-200}, {5})).to_vector<double>();
  CHECK(h[0] == 5);
  CHECK(h[1] == doctest::Approx(std::sqrt(2.0) * 1e200));  // no overflow on the way
  CHECK(h[3] == 5);
  CHECK(h[4] == doctest::Approx(std::sqrt(2.0) * 1e-200));
  CHECK(hypot(from_vector<int64_t>({3}, {1}), from_vector<int64_t>({4}, {1})).dtype() == DType::float32);
  const std::vector<double> l =
      logaddexp(T({1, -2, inf, -inf, inf, 3, 1e300}, {7}), T({1, 5, inf, -inf, 1, -1e10, 1e300}, {7})).to_vector<double>();
  CHECK(l[0] == doctest::Approx(1 + std::log(2.0)));
  CHECK(l[1] == doctest::Approx(5 + std::log1p(std::exp(-7.0))));
  CHECK(l[2] == inf);
  CHECK(l[3] == -inf);
  CHECK(l[4] == inf);
  CHECK(l[5] == 3);
  CHECK(l[6] == doctest::Approx(1e300));
  const std::vector<double> xl = xlogy(T({0, 0, 0, 2, 3}, {5}), T({0, inf, nan, 0.5, 0}, {5})).to_vector<double>();
  CHECK(xl[0] == 0);
  CHECK(xl[1] == 0);
  CHECK(std::isnan(xl[2]));
  CHECK(xl[3] == doctest::Approx(2 * std::log(0.5)));
  CHECK(xl[4] == -inf);
  {  // d/dx is log(y) even at x == 0, 0 where both are 0; d/dy = x / y
    Tensor x = T({0, 0, 3}, {3}).requires_grad_(true), y = T({0, 3, 2}, {3}).requires_grad_(true);
    sum(xlogy(x, y)).backward();
    const std::vector<double> gx = x.grad().to_vector<double>(), gy = y.grad().to_vector<double>();
    CHECK(gx[0] == 0);
    CHECK(gx[1] == doctest::Approx(std::log(3.0)));
    CHECK(gx[2] == doctest::Approx(std::log(2.0)));
    CHECK(std::isnan(gy[0]));
    CHECK(gy[1] == 0);
    CHECK(gy[2] == 1.5);
  }
  manual_seed(93);
  CHECK(gradcheck([](auto& in) { return hypot(in[0], in[1]); }, {randn({2, 3}, f64), randn({3}, f64)}));
  CHECK(gradcheck([](auto& in) { return logaddexp(in[0], in[1]); }, {randn({2, 3}, f64), randn({3}, f64)}));
  CHECK(gradcheck([](auto& in) { return xlogy(in[0], in[1]); }, {randn({4}, f64), rand({4}, f64) + 0.5}));
  CHECK(kiln::test::gradgradcheck([](auto& in) { return hypot(in[0], in[1]) + xlogy(in[0], in[1] * in[1] + 0.5); },
                                  {randn({3}, f64), randn({3}, f64)}));
}
