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

using kiln::testing::module_gradcheck_report;

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
