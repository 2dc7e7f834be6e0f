// Test helpers for nn/: a finite-difference gradient check through a module that covers
// the module's parameters as well as the inputs (float64; the RNG state is replayed for
// every evaluation so dropout draws the same mask).
#pragma once
#include <cmath>
#include <functional>
#include <sstream>
#include <string>
#include <vector>
#include "gradcheck.h"
#include "kiln/kiln.h"

namespace kiln::test {

/// Checks d sum(f(inputs) * R) / d(inputs and m's parameters) against central
/// differences. The module must already be float64 (m.to(DType::float64)). Empty
/// string when they agree, else a report.
inline std::string module_gradcheck_report(nn::Module& m, const TensorFn& f, std::vector<Tensor> inputs,
                                           GradcheckOptions o = {}) {
  for (auto& t : inputs) {
    if (!t.is_floating_point()) continue;
    t = t.detach().to(DType::float64).contiguous().detach();
    t.requires_grad_();
  }
  std::vector<Tensor> checked;
  for (auto& t : inputs)
    if (t.is_floating_point()) checked.push_back(t);
  for (auto& p : m.parameters()) {
    REQUIRE(p.dtype() == DType::float64);
    if (p.requires_grad()) checked.push_back(p);
  }
  const RngState rs = get_rng_state();
  auto eval = [&]() {
    set_rng_state(rs);
    return f(inputs).to(DType::float64);
  };
  m.zero_grad();
  Tensor out = eval();
  Tensor R = randn(out.shape(), f64);
  sum(out * R).backward();
  std::string rep = compare_with_finite_differences(eval, R, checked, o);
  set_rng_state(rs);
  return rep;
}

inline bool module_gradcheck(nn::Module& m, const TensorFn& f, std::vector<Tensor> inputs, GradcheckOptions o = {}) {
  std::string r = module_gradcheck_report(m, f, std::move(inputs), o);
  if (!r.empty()) MESSAGE("module gradcheck mismatch:\n" << r);
  return r.empty();
}

/// Bitwise equality of two tensors (same shape, dtype and every element ==).
inline bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) return a.defined() == b.defined();
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  for (size_t i = 0; i < va.size(); ++i)
    if (!(va[i] == vb[i])) return false;
  return true;
}

}  // namespace kiln::test
