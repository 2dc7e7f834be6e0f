// Test helpers: finite-difference gradient checks in float64 and tensor comparisons.
//   CHECK(gradcheck([](auto& in) { return kiln::tanh(in[0]); }, {kiln::randn({3, 4}, f64)}));
// gradcheck makes each input a float64 leaf that requires grad, runs f, and compares the
// analytic gradient of sum(f(in) * R) (R random) with central differences.
#pragma once
#include <doctest/doctest.h>
#include <cmath>
#include <functional>
#include <sstream>
#include <string>
#include <vector>
#include "kiln/kiln.h"
#include "kiln/testing.h"

namespace kiln::test {

// The checks themselves are kiln/testing.h (installed with the library); this header adds
// doctest reporting.
using kiln::testing::allclose;
using kiln::testing::compare_with_finite_differences;
using kiln::testing::error_of;
using kiln::testing::f64;
using kiln::testing::GradcheckOptions;
using kiln::testing::gradcheck_report;
using kiln::testing::TensorFn;

/// doctest-friendly: CHECK(gradcheck(...)); a mismatch is printed.
inline bool gradcheck(const TensorFn& f, std::vector<Tensor> inputs, GradcheckOptions o = {}) {
  std::string r = gradcheck_report(f, std::move(inputs), o);
  if (!r.empty()) MESSAGE("gradcheck mismatch:\n" << r);
  return r.empty();
}

/// The same for second derivatives (kiln::testing::gradgradcheck_report).
inline bool gradgradcheck(const TensorFn& f, std::vector<Tensor> inputs, GradcheckOptions o = {}) {
  std::string r = kiln::testing::gradgradcheck_report(f, std::move(inputs), o);
  if (!r.empty()) MESSAGE("gradgradcheck mismatch:\n" << r);
  return r.empty();
}

/// Max |a - b| over all elements (after converting both to float64 on the CPU).
inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  return kiln::testing::max_abs_diff(a, b);
}

/// Tensor from a flat list of doubles with a shape (float64 unless dtype says otherwise).
inline Tensor T(const std::vector<double>& v, const Shape& shape, DType dt = DType::float64) {
  return from_vector(v, shape).to(dt);
}

}  // namespace kiln::test
