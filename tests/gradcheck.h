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

namespace kiln::test {

inline const TensorOptions f64{.dtype = DType::float64};

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-6;
  double rtol = 1e-4;
};

using TensorFn = std::function<Tensor(std::vector<Tensor>&)>;

/// Returns an empty string when analytic and numeric gradients agree, else a report.
inline std::string gradcheck_report(const TensorFn& f, std::vector<Tensor> inputs, GradcheckOptions o = {}) {
  for (auto& t : inputs) {
    if (!t.is_floating_point()) continue;
    if (t.dtype() != DType::float64) t = t.detach().to(DType::float64);
    t = t.detach();
    t.requires_grad_();
  }
  Tensor out = f(inputs);
  Tensor R = randn(out.shape(), f64);
  Tensor loss = sum(out.to(DType::float64) * R);
  loss.backward();
  std::ostringstream rep;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor& x = inputs[i];
    if (!x.is_floating_point()) continue;
    Tensor g = x.grad();
    double* base = static_cast<double*>(x.storage()->data());
    const Shape& sh = x.shape();
    int64_t n = x.numel();
    for (int64_t j = 0; j < n; ++j) {
      // element j's storage offset
      int64_t off = x.offset(), rem = j;
      Shape idx(sh.size());
      for (int64_t d = int64_t(sh.size()) - 1; d >= 0; --d) {
        idx[d] = rem % sh[d];
        rem /= sh[d];
        off += idx[d] * x.strides()[d];
      }
      double orig = base[off];
      double fp, fm;
      {
        NoGradGuard ng;
        base[off] = orig + o.eps;
        fp = sum(f(inputs).to(DType::float64) * R).item();
        base[off] = orig - o.eps;
        fm = sum(f(inputs).to(DType::float64) * R).item();
        base[off] = orig;
      }
      double num = (fp - fm) / (2 * o.eps);
      double ana = g.defined() ? g.at(idx) : 0.0;
      if (!(std::fabs(num - ana) <= o.atol + o.rtol * std::fabs(num))) {
        rep << "input " << i << " element " << shape_str(idx) << ": analytic " << ana << " numeric " << num << "\n";
        if (rep.str().size() > 2000) return rep.str();
      }
    }
  }
  return rep.str();
}

/// doctest-friendly: CHECK(gradcheck(...)).
inline bool gradcheck(const TensorFn& f, std::vector<Tensor> inputs, GradcheckOptions o = {}) {
  std::string r = gradcheck_report(f, std::move(inputs), o);
  if (!r.empty()) MESSAGE("gradcheck mismatch:\n" << r);
  return r.empty();
}

/// Max |a - b| over all elements (after converting both to float64 on the CPU).
inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    double d = std::fabs(va[i] - vb[i]);
    if (std::isnan(d)) return INFINITY;
    m = std::max(m, d);
  }
  return m;
}

/// True when |a - b| <= atol + rtol |b| elementwise.
inline bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8) {
  if (a.shape() != b.shape()) return false;
  auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  for (size_t i = 0; i < va.size(); ++i)
    if (!(std::fabs(va[i] - vb[i]) <= atol + rtol * std::fabs(vb[i]))) return false;
  return true;
}

/// Tensor from a flat list of doubles with a shape (float64 unless dtype says otherwise).
inline Tensor T(const std::vector<double>& v, const Shape& shape, DType dt = DType::float64) {
  return from_vector(v, shape).to(dt);
}

}  // namespace kiln::test
