// Testing helpers for people who write their own ops, layers or autograd functions:
// float64 finite-difference gradient checks (of a function, and of a module including its
// parameters) and tensor comparisons. Header-only, no test framework needed:
//
//   #include <kiln/testing.h>
//   using kiln::testing::gradcheck_report;
//   std::string r = gradcheck_report([](std::vector<kiln::Tensor>& in) { return my_op(in[0]); },
//                                    {kiln::randn({3, 4})});
//   if (!r.empty()) { std::cerr << r; return 1; }   // empty: analytic == numeric
//
// A check makes each floating input a float64 leaf that requires grad, runs f, and
// compares the analytic gradient of sum(f(in) * R) (R random) with central differences,
// element by element. gradgradcheck_report does the same for second derivatives.
#pragma once
#include <cmath>
#include <functional>
#include <sstream>
#include <string>
#include <vector>
#include "kiln/core/autograd.h"
#include "kiln/core/error.h"
#include "kiln/core/rng.h"
#include "kiln/core/tensor.h"
#include "kiln/nn/module.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape_ops.h"

namespace kiln::testing {

inline const TensorOptions f64{.dtype = DType::float64};

struct GradcheckOptions {
  double eps = 1e-6;   ///< the finite-difference step
  double atol = 1e-6;  ///< |analytic - numeric| <= atol + rtol |numeric|
  double rtol = 1e-4;
};

using TensorFn = std::function<Tensor(std::vector<Tensor>&)>;

/// The core of every gradient check: `eval()` computes the output from the float64 leaves
/// in `checked`, whose analytic gradients of sum(eval() * R) are already in .grad. Each
/// element is moved by +-eps in place and the central difference compared. Returns an
/// empty string when all agree, else a report naming the tensor and element.
inline std::string compare_with_finite_differences(const std::function<Tensor()>& eval, const Tensor& R,
                                                   const std::vector<Tensor>& checked, GradcheckOptions o) {
  std::ostringstream rep;
  for (size_t i = 0; i < checked.size(); ++i) {
    const Tensor& x = checked[i];
    Tensor g = x.grad();
    double* base = static_cast<double*>(x.storage()->data());
    const Shape& sh = x.shape();
    for (int64_t j = 0; j < x.numel(); ++j) {
      int64_t off = x.offset(), rem = j;  // element j's storage offset
      Shape idx(sh.size());
      for (int64_t d = int64_t(sh.size()) - 1; d >= 0; --d) {
        idx[d] = rem % sh[d];
        rem /= sh[d];
        off += idx[d] * x.strides()[d];
      }
      double orig = base[off], fp, fm;
      {
        NoGradGuard ng;
        base[off] = orig + o.eps;
        fp = sum(eval() * R).item();
        base[off] = orig - o.eps;
        fm = sum(eval() * R).item();
        base[off] = orig;
      }
      double num = (fp - fm) / (2 * o.eps);
      double ana = g.defined() ? g.at(idx) : 0.0;
      if (!(std::fabs(num - ana) <= o.atol + o.rtol * std::fabs(num))) {
        rep << "tensor " << i << " element " << shape_str(idx) << ": analytic " << ana << " numeric " << num << "\n";
        if (rep.str().size() > 2000) return rep.str();
      }
    }
  }
  return rep.str();
}

/// Empty when the analytic and numeric gradients of f over its floating inputs agree,
/// else a report of the elements that do not.
inline std::string gradcheck_report(const TensorFn& f, std::vector<Tensor> inputs, GradcheckOptions o = {}) {
  std::vector<Tensor> checked;
  for (auto& t : inputs) {
    if (!t.is_floating_point()) continue;
    if (t.dtype() != DType::float64) t = t.detach().to(DType::float64);
    t = t.detach();
    t.requires_grad_();
    checked.push_back(t);
  }
  auto eval = [&]() { return f(inputs).to(DType::float64); };
  Tensor out = eval();
  Tensor R = randn(out.shape(), f64);
  sum(out * R).backward();
  return compare_with_finite_differences(eval, R, checked, o);
}

/// gradcheck_report(...).empty().
inline bool gradcheck(const TensorFn& f, std::vector<Tensor> inputs, GradcheckOptions o = {}) {
  return gradcheck_report(f, std::move(inputs), o).empty();
}

/// The same over the inputs and every parameter of m that requires grad. The module must
/// already be float64 (m.to(DType::float64)); the random generator is replayed for every
/// evaluation, so dropout draws the same mask each time.
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
    KILN_CHECK(p.dtype() == DType::float64, "module_gradcheck: parameters must be float64 (call m.to(DType::float64)), "
               "got ", dtype_name(p.dtype()));
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

/// Max |a - b| over all elements (both converted to float64 on the CPU; NaN gives infinity).
inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  KILN_CHECK(a.shape() == b.shape(), "max_abs_diff: shapes differ: ", shape_str(a.shape()), " and ",
             shape_str(b.shape()));
  auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    double d = std::fabs(va[i] - vb[i]);
    if (std::isnan(d)) return INFINITY;
    m = std::max(m, d);
  }
  return m;
}

/// True when |a - b| <= atol + rtol |b| elementwise (and the shapes are equal).
inline bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8) {
  if (a.shape() != b.shape()) return false;
  auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  for (size_t i = 0; i < va.size(); ++i)
    if (!(std::fabs(va[i] - vb[i]) <= atol + rtol * std::fabs(vb[i]))) return false;
  return true;
}

/// The second-order check (PyTorch's gradgradcheck): the gradients of f with respect to its
/// floating inputs for a random output gradient V, computed with create_graph, are
/// gradient-checked as a function of (inputs, V). Empty when the analytic second
/// derivatives agree with finite differences of the first, else a report (the last
/// tensor named in it is V).
inline std::string gradgradcheck_report(const TensorFn& f, std::vector<Tensor> inputs, GradcheckOptions o = {}) {
  std::vector<size_t> floating;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].is_floating_point()) floating.push_back(i);
  Shape out_shape;
  {
    NoGradGuard ng;
    std::vector<Tensor> probe = inputs;
    out_shape = f(probe).shape();
  }
  inputs.push_back(randn(out_shape, f64));  // V
  // The first-order gradients, flattened into one tensor, from a backward that records a
  // graph (create_graph) or not: the two run different formulas, so both are checked.
  auto first_order = [&f, floating](std::vector<Tensor>& in, bool create_graph) {
    GradModeGuard on(true);  // the finite differences evaluate under NoGradGuard
    std::vector<Tensor> xs(in.begin(), in.end() - 1), wrt;
    for (size_t i : floating) wrt.push_back(xs[i]);
    Tensor out = f(xs).to(DType::float64);
    std::vector<Tensor> g = grad({out}, wrt, {in.back()}, {.create_graph = create_graph, .allow_unused = true});
    std::vector<Tensor> flat;
    for (size_t k = 0; k < g.size(); ++k)
      flat.push_back((g[k].defined() ? g[k] : zeros_like(wrt[k])).reshape({-1}));
    return cat(flat);
  };
  std::vector<Tensor> leaves = inputs;
  for (size_t i : floating) leaves[i] = inputs[i].detach().to(DType::float64).requires_grad_();
  leaves.back().requires_grad_();
  Tensor plain = first_order(leaves, false), graph = first_order(leaves, true).detach();
  std::string rep = gradcheck_report(f, std::vector<Tensor>(inputs.begin(), inputs.end() - 1), o);
  if (!rep.empty()) return "first order:\n" + rep;
  if (!allclose(graph, plain, 1e-9, 1e-12))
    return "the create_graph backward's gradients differ from the plain backward's by up to " +
           std::to_string(max_abs_diff(graph, plain)) + "\n";
  return gradcheck_report([&](std::vector<Tensor>& in) { return first_order(in, true); }, std::move(inputs), o);
}

/// The message of the kiln::Error that f throws, or "(no error)" when it throws none.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace kiln::testing
