// Special functions (ops/special_math.h through the elementwise table): values against
// 40-digit mpmath references, the edge values PyTorch gives, identities between them, float64
// first and second derivatives (gradcheck / gradgradcheck), and the functions built on them
// (mvlgamma, ndtr, xlog1py, logaddexp2, rrelu, Mish).
// (Against PyTorch 2.15: 27,303 values, first and second derivatives, docs/training.md.)
#include <doctest/doctest.h>
#include <cmath>
#include <functional>
#include <limits>
#include "gradcheck.h"

using namespace kiln;
using kiln::test::f64;
using kiln::test::gradcheck;
using kiln::test::gradgradcheck;
using kiln::test::T;

namespace {
std::vector<double> V(const Tensor& t) { return t.to(DType::float64).contiguous().to_vector<double>(); }

struct Ref {
  double x, y;
};
// f at each x in float64 within rtol of the reference (and within atol where it is near 0),
// and in float32 within 2e-6 relative (the float kernels).
void check_refs(const char* name, const std::function<Tensor(const Tensor&)>& f, const std::vector<Ref>& refs,
                double rtol = 4e-16, double atol = 1e-300) {
  std::vector<double> xs;
  for (const Ref& r : refs) xs.push_back(r.x);
  const std::vector<double> y64 = V(f(T(xs, {int64_t(xs.size())})));
  const std::vector<double> y32 = V(f(T(xs, {int64_t(xs.size())}).to(DType::float32)));
  for (size_t i = 0; i < refs.size(); ++i) {
    const double want = refs[i].y, x = refs[i].x;
    INFO(name, "(", x, ") = ", y64[i], ", expected ", want);
    if (std::isinf(want)) {
      CHECK(y64[i] == want);
      continue;
    }
    CHECK(std::fabs(y64[i] - want) <= std::max(rtol * std::fabs(want), atol));
    const float w32 = float(want);
    if (std::isfinite(w32) && std::fabs(w32) > 1e-30f && float(x) == x)
      CHECK(std::fabs(y32[i] - want) <= 2e-6 * std::fabs(want) + 1e-7);
  }
}
}  // namespace

TEST_CASE("special functions: values against 40-digit references") {
  check_refs("lgamma", [](const Tensor& x) { return lgamma(x); },
             {{0.5, 0.5723649429247001}, {1e-3, 6.907178885383853}, {3.7, 1.428072326665388},
              {25.5, 56.389167643719944}, {171.5, 709.1431630309282}, {-0.5, 1.2655121234846454},
              {-2.5, -0.056243716497674054}},
             1e-15);
  check_refs("digamma", [](const Tensor& x) { return digamma(x); },
             {{1e-3, -1000.5755719318103}, {0.5, -1.9635100260214235}, {1.4616321449683622, -9.241265521729427e-17},
              {3.7, 1.1671535393615113}, {9.99, 2.250700372831201}, {10.0, 2.251752589066721},
              {123.4, 4.8113737751162775}, {-0.5, 0.03648997397857652}, {-2.7, -1.1153471291406896}},
             2e-15, 4e-16);
  // trigamma is PyTorch's: six recurrence steps, then an asymptotic series cut after x^-7,
  // good to about 1e-10 (kiln keeps PyTorch's values rather than more digits)
  check_refs("polygamma(1)", [](const Tensor& x) { return polygamma(1, x); },
             {{0.3, 12.245364546107732}, {2.5, 0.49035775610023485}, {11.0, 0.09516633568168574},
              {-1.3, 14.53687624413708}},
             3e-10);
  check_refs("polygamma(2)", [](const Tensor& x) { return polygamma(2, x); },
             {{0.3, -75.27253658872604}, {2.5, -0.2362040516417274}, {11.0, -0.009049834970802067}}, 2e-15);
  check_refs("polygamma(4)", [](const Tensor& x) { return polygamma(4, x); },
             {{0.7, -144.70825364302465}, {6.5, -0.004525930280322061}}, 2e-15);
  // near +-1 too, where a Newton step on erf(x) - y cancels (1 - 1e-12: 5.0420291 before)
  check_refs("erfinv", [](const Tensor& x) { return erfinv(x); },
             {{0.1, 0.08885599049425769}, {-0.5, -0.4769362762044699}, {0.7, 0.7328690779592167},
              {0.71, 0.7482049711849852}, {0.99, 1.8213863677184494}, {-0.999999, -3.458910737275499},
              {0.999999999999, 5.042031898572696}},
             1e-15);
  check_refs("i0", [](const Tensor& x) { return i0(x); },
             {{0.0, 1.0}, {0.5, 1.0634833707413236}, {-3.0, 4.8807925858650245}, {8.0, 427.5641157218048},
              {8.5, 683.1619269901156}, {30.0, 781672297823.9775}},
             2e-15);
  check_refs("i1", [](const Tensor& x) { return i1(x); },
             {{0.5, 0.2578943053908963}, {-3.0, -3.9533702174026093}, {8.0, 399.8731367825601},
              {8.5, 641.6199025400667}, {30.0, 768532038938.957}},
             2e-15);
  check_refs("i0e", [](const Tensor& x) { return i0e(x); },
             {{0.5, 0.6450352704491501}, {-3.0, 0.2430003541618254}, {50.0, 0.05656162664745419},
              {700.0, 0.015081295651531358}},
             2e-15);
  check_refs("i1e", [](const Tensor& x) { return i1e(x); },
             {{0.5, 0.1564208031848717}, {-3.0, -0.19682671329730086}, {50.0, 0.0559931238928954},
              {700.0, 0.015070519444716848}},
             2e-15);
  check_refs("ndtri", [](const Tensor& x) { return ndtri(x); },
             {{0.5, 0.0}, {0.2, -0.8416212335729142}, {0.95, 1.6448536269514722}, {1e-5, -4.264890793922825},
              {1e-20, -9.262340089798407}, {1e-300, -37.0470962993612}},
             2e-15);
  // far into the lower tail, where ndtr itself is 0 (the asymptotic series below -26 sqrt 2)
  check_refs("log_ndtr", [](const Tensor& x) { return log_ndtr(x); },
             {{2.0, -0.02301290932896349}, {0.0, -0.6931471805599453}, {-1.0, -1.8410216450092636},
              {-3.0, -6.607726221510349}, {-20.0, -203.91715537109727}, {-37.0, -689.0305855768906},
              {-100.0, -5005.524208694205}},
             1e-15);
  check_refs("sinc", [](const Tensor& x) { return sinc(x); },
             {{0.0, 1.0}, {0.25, 0.9003163161571061}, {-1.5, -0.2122065907891938}, {3.3, -0.0780357901212854}},
             1e-15);
  check_refs("mish", [](const Tensor& x) { return mish(x); },
             {{-5.0, -0.033576237730161704}, {-0.5, -0.22074377465173}, {0.5, 0.37524521130489513},
              {3.0, 2.9865350049679575}},
             1e-15);
  check_refs("asinh", [](const Tensor& x) { return asinh(x); },
             {{-2.5, -1.6472311463710958}, {0.1, 0.09983407889920756}, {1000.0, 7.600902709541988}});
  check_refs("acosh", [](const Tensor& x) { return acosh(x); }, {{1.5, 0.9624236501192069}, {10.0, 2.993222846126381}});
  check_refs("atanh", [](const Tensor& x) { return atanh(x); }, {{-0.9, -1.4722194895832204}, {0.3, 0.3095196042031117}});
  // mvlgamma(2.5, 3) = lgamma(2.5) + lgamma(2) + lgamma(1.5) + (3 * 2 / 4) log(pi)
  CHECK(V(mvlgamma(T({2.5}, {1}), 3))[0] == doctest::Approx(1.8809954616117741).epsilon(1e-15));
}

TEST_CASE("special functions: PyTorch's edge values") {
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> dg = V(digamma(T({0.0, -0.0, -2.0, -1.0}, {4})));
  CHECK(dg[0] == -inf);
  CHECK(dg[1] == inf);
  CHECK(std::isnan(dg[2]));
  CHECK(std::isnan(dg[3]));
  CHECK(V(lgamma(T({-3.0, 1.0, 2.0}, {3}))) == std::vector<double>{inf, 0.0, 0.0});
  const std::vector<double> ei = V(erfinv(T({1.0, -1.0, 1.5, 0.0}, {4})));
  CHECK(ei[0] == inf);
  CHECK(ei[1] == -inf);
  CHECK(std::isnan(ei[2]));
  CHECK(ei[3] == 0.0);
  const std::vector<double> nd = V(ndtri(T({0.0, 1.0, -0.1, 1.1}, {4})));
  CHECK(nd[0] == -inf);
  CHECK(nd[1] == inf);
  CHECK(std::isnan(nd[2]));
  CHECK(std::isnan(nd[3]));
  const std::vector<double> en = V(entr(T({0.0, -1.0, 1.0, NAN}, {4})));
  CHECK(en[0] == 0.0);
  CHECK(en[1] == -inf);
  CHECK(en[2] == 0.0);
  CHECK(std::isnan(en[3]));
  CHECK(V(i1(T({0.0}, {1})))[0] == 0.0);
  CHECK(V(log_ndtr(T({inf, -inf}, {2}))) == std::vector<double>{0.0, -inf});
  // ndtr is PyTorch's (1 + erf(x / sqrt 2)) / 2: exactly 0 far below, where log_ndtr is finite
  CHECK(V(ndtr(T({-40.0, 0.0, 40.0}, {3}))) == std::vector<double>{0.0, 0.5, 1.0});
  CHECK_THROWS_WITH_AS(polygamma(-1, T({1.0}, {1})), doctest::Contains("non-negative"), kiln::Error);
  CHECK_THROWS_WITH_AS(mvlgamma(T({0.9, 2.0}, {2}), 3), doctest::Contains("greater than (p - 1) / 2 = 1"),
                       kiln::Error);
  CHECK_THROWS_WITH_AS(mvlgamma(T({2.0}, {1}), 0), doctest::Contains("at least 1"), kiln::Error);
  CHECK_THROWS_AS(lgamma(from_vector<int64_t>({1, 2}, {2}, {.dtype = DType::int64})), kiln::Error);
}

TEST_CASE("special functions: identities") {
  manual_seed(3);
  const Tensor x = add(mul(rand({200}, f64), 20.0), 0.05);  // (0.05, 20.05)
  const Tensor u = sub(mul(rand({200}, f64), 1.98), 0.99);  // (-0.99, 0.99)
  const Tensor p = add(mul(rand({200}, f64), 0.98), 0.01);  // (0.01, 0.99)
  const Tensor z = sub(mul(rand({200}, f64), 16.0), 8.0);
  auto close = [](const Tensor& a, const Tensor& b, double tol) { return max(abs(sub(a, b))).item() <= tol; };
  CHECK(close(sub(lgamma(add(x, 1.0)), lgamma(x)), log(x), 1e-13));  // Gamma(x + 1) = x Gamma(x)
  CHECK(close(sub(digamma(add(x, 1.0)), digamma(x)), reciprocal(x), 1e-13));
  CHECK(close(polygamma(0, x), digamma(x), 0.0));
  // polygamma(3, x + 1) - polygamma(3, x) = (-1)^3 3! / x^4, checked relative to 6 / x^4
  CHECK(close(mul(sub(polygamma(3, add(x, 1.0)), polygamma(3, x)), pow(x, 4.0)), full({}, -6.0, f64), 1e-12));
  CHECK(close(erf(erfinv(u)), u, 2e-16));
  CHECK(close(ndtr(ndtri(p)), p, 4e-16));
  CHECK(close(log_ndtr(add(z, 6.0)), log(ndtr(add(z, 6.0))), 1e-14));  // (-2, 14), where ndtr does not cancel
  CHECK(close(i0e(z), mul(i0(z), exp(neg(abs(z)))), 1e-15));
  CHECK(close(i1e(z), mul(i1(z), exp(neg(abs(z)))), 1e-15));
  CHECK(close(asinh(sinh(z)), z, 1e-14));
  CHECK(close(atanh(tanh(u)), u, 1e-15));
  CHECK(close(deg2rad(rad2deg(z)), z, 1e-14));
  CHECK(close(add(frac(z), trunc(z)), z, 0.0));
  CHECK(close(mvlgamma(add(x, 0.5), 1), lgamma(add(x, 0.5)), 0.0));
  CHECK(close(logaddexp2(z, u), log2(add(exp2(z), exp2(u))), 1e-14));
}

TEST_CASE("special functions: float64 first and second derivatives") {
  manual_seed(4);
  const Tensor pos = add(mul(rand({6}, f64), 5.0), 0.3);
  const Tensor unit = sub(mul(rand({6}, f64), 1.6), 0.8);
  const Tensor prob = add(mul(rand({6}, f64), 0.9), 0.05);
  const Tensor any = sub(mul(rand({6}, f64), 12.0), 6.0);
  const Tensor gt1 = add(mul(rand({6}, f64), 5.0), 1.2);
  const std::vector<std::pair<std::function<Tensor(const Tensor&)>, Tensor>> fs = {
      {[](const Tensor& t) { return asinh(t); }, any},        {[](const Tensor& t) { return acosh(t); }, gt1},
      {[](const Tensor& t) { return atanh(t); }, unit},       {[](const Tensor& t) { return lgamma(t); }, pos},
      {[](const Tensor& t) { return digamma(t); }, pos},      {[](const Tensor& t) { return polygamma(2, t); }, pos},
      {[](const Tensor& t) { return erfinv(t); }, unit},      {[](const Tensor& t) { return i0(t); }, any},
      {[](const Tensor& t) { return i0e(t); }, any},          {[](const Tensor& t) { return i1(t); }, any},
      {[](const Tensor& t) { return i1e(t); }, any},          {[](const Tensor& t) { return ndtri(t); }, prob},
      {[](const Tensor& t) { return log_ndtr(t); }, any},     {[](const Tensor& t) { return sinc(t); }, any},
      {[](const Tensor& t) { return mish(t); }, any},         {[](const Tensor& t) { return entr(t); }, pos},
      {[](const Tensor& t) { return ndtr(t); }, any},         {[](const Tensor& t) { return mvlgamma(t, 3); }, gt1},
      {[](const Tensor& t) { return frac(t); }, any},         {[](const Tensor& t) { return deg2rad(t); }, any},
  };
  for (size_t i = 0; i < fs.size(); ++i) {
    const auto& f = fs[i].first;
    INFO("function #", i);
    CHECK(gradcheck([&f](auto& t) { return f(t[0]); }, {fs[i].second.clone()}));
    CHECK(gradgradcheck([&f](auto& t) { return f(t[0]); }, {fs[i].second.clone()}));
  }
  // the lower tail, where log_ndtr's gradient phi / Phi is computed without cancellation
  // (40-digit references: 3.2831, 30.0333, 100.0100)
  Tensor t = T({-3.0, -30.0, -100.0}, {3}).requires_grad_(true);
  const std::vector<double> g = V(kiln::grad({sum(log_ndtr(t))}, {t})[0]);
  CHECK(g[0] == doctest::Approx(3.2830986549304364).epsilon(1e-15));
  CHECK(g[1] == doctest::Approx(30.033259667433676).epsilon(5e-13));  // x / sqrt 2 rounded, times 2u^2 in erfc
  CHECK(g[2] == doctest::Approx(100.00999800099926).epsilon(1e-15));
  // PyTorch's values where the formulas are 0/0: i1' = i1e' = 1/2 and sinc' = 0 at 0
  Tensor zero = T({0.0}, {1}).requires_grad_(true);
  CHECK(V(kiln::grad({sum(i1(zero))}, {zero})[0])[0] == 0.5);
  CHECK(V(kiln::grad({sum(i1e(zero))}, {zero})[0])[0] == 0.5);
  CHECK(V(kiln::grad({sum(sinc(zero))}, {zero})[0])[0] == 0.0);
}

TEST_CASE("xlog1py and logaddexp2") {
  const Tensor x = T({0.0, 0.0, 2.0, -1.5, 0.0}, {5}), y = T({-1.0, NAN, 0.5, 3.0, 4.0}, {5});
  const std::vector<double> v = V(xlog1py(x, y));
  CHECK(v[0] == 0.0);  // 0 * log1p(-1) = 0 * -inf is 0, as PyTorch's
  CHECK(std::isnan(v[1]));
  CHECK(v[2] == doctest::Approx(2.0 * std::log1p(0.5)));
  CHECK(v[3] == doctest::Approx(-1.5 * std::log1p(3.0)));
  CHECK(v[4] == 0.0);
  manual_seed(5);
  const Tensor a = randn({3, 4}, f64), b = add(mul(rand({4}, f64), 3.0), -0.5);
  CHECK(gradcheck([](auto& t) { return xlog1py(t[0], t[1]); }, {a, b}));
  CHECK(gradgradcheck([](auto& t) { return xlog1py(t[0], t[1]); }, {a, b}));
  CHECK(gradcheck([](auto& t) { return logaddexp2(t[0], t[1]); }, {a, randn({3, 1}, f64)}));
  // d/dx at x == 0 and y <= -1 is 0 (PyTorch's masked_fill)
  Tensor x0 = T({0.0, 0.0}, {2}).requires_grad_(true);
  CHECK(V(kiln::grad({sum(xlog1py(x0, T({-1.0, 1.0}, {2})))}, {x0})[0]) == std::vector<double>{0.0, std::log(2.0)});
  const double inf = std::numeric_limits<double>::infinity();
  CHECK(V(logaddexp2(T({inf, -inf, 3.0}, {3}), T({inf, -inf, 3.0}, {3}))) == std::vector<double>{inf, -inf, 4.0});
}

TEST_CASE("rrelu and the Mish and RReLU modules") {
  manual_seed(6);
  const Tensor x = randn({64}, f64);
  // evaluation: leaky_relu with the mean slope
  CHECK(V(rrelu(x, 0.1, 0.3)) == V(leaky_relu(x, 0.2)));
  // training: each negative entry scaled by its own slope in [lower, upper], the same in the gradient
  Tensor xt = x.clone().requires_grad_(true);
  const Tensor y = rrelu(xt, 0.1, 0.3, true);
  const std::vector<double> g = V(kiln::grad({sum(y)}, {xt})[0]);
  const std::vector<double> xv = V(x), yv = V(y);
  std::vector<double> slopes;
  for (size_t i = 0; i < xv.size(); ++i) {
    if (xv[i] >= 0) {
      CHECK(yv[i] == xv[i]);
      CHECK(g[i] == 1.0);
    } else {
      CHECK(g[i] >= 0.1);
      CHECK(g[i] <= 0.3);
      CHECK(yv[i] == doctest::Approx(xv[i] * g[i]).epsilon(1e-15));
      slopes.push_back(g[i]);
    }
  }
  REQUIRE(slopes.size() > 10);
  CHECK(slopes.front() != slopes.back());  // drawn per entry
  CHECK_THROWS_WITH_AS(rrelu(x, 0.4, 0.2, true), doctest::Contains("must not exceed upper"), kiln::Error);

  nn::RReLU m(0.1, 0.3);
  m.eval();
  CHECK(V(m.forward(x)) == V(leaky_relu(x, 0.2)));
  m.train();
  CHECK(V(m.forward(x)) != V(leaky_relu(x, 0.2)));
  nn::Mish mish_module;
  CHECK(V(mish_module.forward(x)) == V(mish(x)));
}

TEST_CASE("special functions on float32 and bfloat16 agree with float64") {
  manual_seed(7);
  const Tensor x = add(mul(rand({300}), 6.0), 0.2);
  const Tensor u = sub(mul(rand({300}), 1.8), 0.9);
  const std::vector<std::pair<std::function<Tensor(const Tensor&)>, Tensor>> fs = {
      {[](const Tensor& t) { return lgamma(t); }, x},   {[](const Tensor& t) { return digamma(t); }, x},
      {[](const Tensor& t) { return polygamma(3, t); }, x}, {[](const Tensor& t) { return erfinv(t); }, u},
      {[](const Tensor& t) { return i0(t); }, x},       {[](const Tensor& t) { return i1e(t); }, u},
      {[](const Tensor& t) { return log_ndtr(t); }, u}, {[](const Tensor& t) { return mish(t); }, u},
      {[](const Tensor& t) { return sinc(t); }, x},     {[](const Tensor& t) { return entr(t); }, x},
  };
  for (size_t i = 0; i < fs.size(); ++i) {
    INFO("function #", i);
    const Tensor ref = fs[i].first(fs[i].second.to(DType::float64));
    const Tensor scale = add(abs(ref), 1.0);  // relative, or absolute near a zero (digamma's, sinc's)
    CHECK(max(div(abs(sub(fs[i].first(fs[i].second).to(DType::float64), ref)), scale)).item() < 3e-6);
    const Tensor b = fs[i].second.to(DType::bfloat16);
    const Tensor refb = fs[i].first(b.to(DType::float64));
    CHECK(max(div(abs(sub(fs[i].first(b).to(DType::float64), refb)), add(abs(refb), 1e-2))).item() < 1e-2);
  }
}
