// Exercise 1's test: values against the formula, and the gradient against finite differences.
#include <doctest/doctest.h>
#include <cmath>
#include <kiln/testing.h>
#include "exercise.h"

TEST_CASE("exercise 1: serf values") {
  const kiln::Tensor x = kiln::from_vector<double>({-3, -0.5, 0, 0.5, 3}, {5});
  const std::vector<double> y = serf(x).to_vector<double>();
  for (size_t i = 0; i < y.size(); ++i) {
    const double v = x.to_vector<double>()[i];
    CHECK(y[i] == doctest::Approx(v * std::erf(std::log1p(std::exp(v)))));
  }
}

TEST_CASE("exercise 1: serf gradient (float64 finite differences)") {
  kiln::manual_seed(1);
  const std::string report = kiln::testing::gradcheck_report(
      [](std::vector<kiln::Tensor>& in) { return serf(in[0]); }, {kiln::randn({4, 5}, {.dtype = kiln::DType::float64})});
  INFO(report);
  CHECK(report.empty());
}
