// clip_grad_norm_ (2-, 1-, 3- and inf-norms, scaling, no-op below the limit, inf/NaN
// handling, generic path for bf16 / non-contiguous grads) and clip_grad_value_.
#include <doctest/doctest.h>
#include <cmath>
#include <limits>
#include <vector>
#include "gradcheck.h"

using namespace kiln;
namespace optim = kiln::optim;
using Vec = std::vector<double>;

namespace {

Tensor with_grad(const Vec& g, DType dt = DType::float32) {
  Tensor p = zeros({int64_t(g.size())}, {.dtype = dt});
  p.requires_grad_();
  p.set_grad(from_vector(g, {int64_t(g.size())}).to(dt));
  return p;
}

}  // namespace

TEST_CASE("clip_grad_norm_: total 2-norm over all grads, scaled by max_norm / (norm + 1e-6)") {
  for (DType dt : {DType::float32, DType::float64}) {
    Tensor a = with_grad({3.0, 4.0}, dt), b = with_grad({12.0}, dt), c = zeros({3});  // c: no grad
    c.requires_grad_();
    double n = optim::clip_grad_norm_({a, b, c}, 6.5);
    CHECK(n == doctest::Approx(13.0).epsilon(1e-12));
    const double coef = 6.5 / (13.0 + 1e-6);
    CHECK(a.grad().to_vector<double>()[0] == doctest::Approx(3.0 * coef).epsilon(1e-6));
    CHECK(a.grad().to_vector<double>()[1] == doctest::Approx(4.0 * coef).epsilon(1e-6));
    CHECK(b.grad().item() == doctest::Approx(12.0 * coef).epsilon(1e-6));
    CHECK(!c.grad().defined());
    // the clipped norm is now (just below) max_norm
    CHECK(optim::clip_grad_norm_({a, b}, 100.0) == doctest::Approx(6.5).epsilon(1e-5));
  }
}

TEST_CASE("clip_grad_norm_: below the limit nothing changes; other norms") {
  Tensor a = with_grad({3.0, -4.0}), b = with_grad({12.0});
  CHECK(optim::clip_grad_norm_({a, b}, 20.0) == doctest::Approx(13.0));
  CHECK(a.grad().to_vector<double>() == Vec{3.0, -4.0});
  CHECK(optim::clip_grad_norm_({a, b}, 100.0, 1.0) == doctest::Approx(19.0));
  CHECK(optim::clip_grad_norm_({a, b}, 100.0, 3.0) == doctest::Approx(std::cbrt(27.0 + 64.0 + 1728.0)));
  const double inf = std::numeric_limits<double>::infinity();
  CHECK(optim::clip_grad_norm_({a, b}, 100.0, inf) == 12.0);
  // inf-norm clipping
  CHECK(optim::clip_grad_norm_({a, b}, 6.0, inf) == 12.0);
  CHECK(b.grad().item() == doctest::Approx(6.0).epsilon(1e-6));
  CHECK(a.grad().to_vector<double>()[1] == doctest::Approx(-2.0).epsilon(1e-6));
  // no gradients at all
  Tensor d = zeros({2});
  d.requires_grad_();
  CHECK(optim::clip_grad_norm_({d}, 1.0) == 0.0);
}

TEST_CASE("clip_grad_norm_: a non-finite total norm is returned and nothing is scaled") {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  for (double norm_type : {2.0, inf}) {
    CAPTURE(norm_type);
    Tensor a = with_grad({3.0, inf}), b = with_grad({12.0});
    double n = optim::clip_grad_norm_({a, b}, 1.0, norm_type);
    CHECK(std::isinf(n));
    CHECK(b.grad().item() == 12.0);
    CHECK(a.grad().to_vector<double>()[0] == 3.0);
    Tensor c = with_grad({nan, 1.0}), d = with_grad({12.0});
    CHECK(std::isnan(optim::clip_grad_norm_({d, c}, 1.0, norm_type)));
    CHECK(d.grad().item() == 12.0);
    CHECK_THROWS_WITH_AS(optim::clip_grad_norm_({a, b}, 1.0, norm_type, true), doctest::Contains("non-finite"),
                         kiln::Error);
    // the generic path (bf16, or not contiguous) also says inf for an inf gradient (was NaN)
    Tensor h = with_grad({1.0, -inf, -2.0}, DType::bfloat16);
    CHECK(std::isinf(optim::clip_grad_norm_({h}, 1.0, norm_type)));
    Tensor hn = with_grad({1.0, nan}, DType::bfloat16);
    CHECK(std::isnan(optim::clip_grad_norm_({hn}, 1.0, norm_type)));
  }
  Tensor a = with_grad({1.0});
  CHECK_THROWS_AS(optim::clip_grad_norm_({a}, 1.0, 0.0), kiln::Error);
  CHECK_THROWS_AS(optim::clip_grad_norm_({a}, -1.0), kiln::Error);
}

TEST_CASE("clip_grad_norm_: bfloat16 and non-contiguous gradients (generic path)") {
  Tensor a = with_grad({3.0, 4.0}, DType::bfloat16);
  CHECK(optim::clip_grad_norm_({a}, 2.5) == doctest::Approx(5.0));
  CHECK(a.grad().dtype() == DType::bfloat16);
  CHECK(a.grad().to_vector<double>()[0] == doctest::Approx(1.5).epsilon(1e-2));
  Tensor p = zeros({3, 2});
  p.requires_grad_();
  Tensor g = from_vector(Vec{1, 2, 3, 4, 5, 6}, {2, 3}).to(DType::float32).t();  // (3, 2), not contiguous
  REQUIRE(!g.is_contiguous());
  p.set_grad(g);
  CHECK(optim::clip_grad_norm_({p}, 1.0) == doctest::Approx(std::sqrt(91.0)).epsilon(1e-6));
  CHECK(optim::clip_grad_norm_({p}, 100.0) == doctest::Approx(1.0).epsilon(1e-5));
  CHECK(optim::clip_grad_norm_({p}, 100.0, std::numeric_limits<double>::infinity()) ==
        doctest::Approx(6.0 / std::sqrt(91.0)).epsilon(1e-5));
}

TEST_CASE("clip_grad_value_ clamps every gradient in place") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor a = with_grad({-3.0, 0.5, 2.0, nan}), b = with_grad({-0.1, 7.0}, DType::float64);
  Tensor c = with_grad({-3.0, 3.0}, DType::bfloat16);
  optim::clip_grad_value_({a, b, c}, 1.0);
  auto va = a.grad().to_vector<double>();
  CHECK(va[0] == -1.0);
  CHECK(va[1] == 0.5);
  CHECK(va[2] == 1.0);
  CHECK(std::isnan(va[3]));
  CHECK(b.grad().to_vector<double>() == Vec{-0.1, 1.0});
  CHECK(c.grad().to_vector<double>() == Vec{-1.0, 1.0});
  CHECK_THROWS_AS(optim::clip_grad_value_({a}, -1.0), kiln::Error);
}

TEST_CASE("parameters_to_vector and vector_to_parameters") {
  Tensor a = from_vector(std::vector<double>{1, 2, 3, 4}, {2, 2}).requires_grad_();
  Tensor b = from_vector(std::vector<double>{5, 6}, {2}).requires_grad_();
  const Tensor v = optim::parameters_to_vector({a, b});
  CHECK(v.to_vector<double>() == std::vector<double>{1, 2, 3, 4, 5, 6});
  sum(mul(v, v)).backward();  // differentiable
  CHECK(b.grad().to_vector<double>() == std::vector<double>{10, 12});
  optim::vector_to_parameters(from_vector(std::vector<double>{6, 5, 4, 3, 2, 1}, {6}), {a, b});
  CHECK(a.to_vector<double>() == std::vector<double>{6, 5, 4, 3});
  CHECK(b.to_vector<double>() == std::vector<double>{2, 1});
  CHECK(a.is_leaf());
  CHECK_THROWS_AS(optim::vector_to_parameters(zeros({5}), {a, b}), kiln::Error);
  CHECK_THROWS_AS(optim::parameters_to_vector({}), kiln::Error);
}
