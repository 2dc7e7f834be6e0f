// clip_grad_norm_ / clip_grad_value_: a deterministic blocked CPU reduction for contiguous
// float32/float64 gradients, tensor ops (any device) otherwise.
#include "kiln/optim/clip_grad.h"
#include <cmath>
#include "kiln/core/autograd.h"
#include "kiln/core/parallel.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/helpers.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape_ops.h"

namespace kiln::optim {

namespace {

constexpr int64_t kBlock = 8192;

// sum |g|^p (or max |g| when p is inf) in double, over fixed-size blocks so the result
// does not depend on the thread count.
template <class T>
double norm_accum_cpu(const T* g, int64_t n, double p) {
  const bool is_inf = std::isinf(p);
  const int64_t nb = (n + kBlock - 1) / kBlock;
  std::vector<double> part(size_t(nb), 0.0);
  parallel_for(0, nb, 2, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      const int64_t lo = k * kBlock, hi = std::min(n, lo + kBlock);
      double acc = 0;
      if (is_inf) {
        for (int64_t i = lo; i < hi; ++i) {
          const double a = std::fabs(double(g[i]));
          if (std::isnan(a)) { acc = a; break; }  // NaN wins
          if (a > acc) acc = a;
        }
      } else if (p == 2.0) {
        for (int64_t i = lo; i < hi; ++i) acc += double(g[i]) * double(g[i]);
      } else if (p == 1.0) {
        for (int64_t i = lo; i < hi; ++i) acc += std::fabs(double(g[i]));
      } else {
        for (int64_t i = lo; i < hi; ++i) acc += std::pow(std::fabs(double(g[i])), p);
      }
      part[size_t(k)] = acc;
    }
  });
  double tot = 0;
  for (double v : part) {
    if (is_inf) tot = (std::isnan(v) || v > tot) ? v : tot;
    else tot += v;
    if (std::isnan(tot)) return tot;
  }
  return tot;
}

bool cpu_fast(const Tensor& g) {
  return g.is_cpu() && g.is_contiguous() && (g.dtype() == DType::float32 || g.dtype() == DType::float64);
}

// One gradient's contribution: sum |g|^p, or max |g| for the inf-norm.
double norm_accum(const Tensor& g, double p) {
  if (g.numel() == 0) return 0.0;
  if (cpu_fast(g)) {
    return KILN_DISPATCH_FLOATING(g.dtype(), "clip_grad_norm_", [&]<class T>() -> double {
      return norm_accum_cpu<T>(g.data<T>(), g.numel(), p);
    });
  }
  // other devices / dtypes: tensor ops in float32 (float64 stays float64)
  Tensor a = abs(g.dtype() == DType::float64 ? g : g.to(DType::float32));
  if (std::isinf(p)) {
    // max() skips NaN on some backends: report NaN explicitly (counted with ne(a, a): a * 0
    // would call an inf a NaN too)
    if (sum(ne(a, a)).item<int64_t>() != 0) return std::numeric_limits<double>::quiet_NaN();
    return max(a).item();
  }
  return sum(p == 2.0 ? mul(a, a) : pow(a, p)).item();
}

}  // namespace

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  KILN_CHECK(norm_type > 0, "clip_grad_norm_: norm_type must be > 0 or infinity, got ", norm_type);
  KILN_CHECK(max_norm >= 0, "clip_grad_norm_: max_norm must be >= 0, got ", max_norm);
  NoGradGuard ng;
  std::vector<Tensor> grads;
  for (const auto& p : params) {
    KILN_CHECK(p.defined(), "clip_grad_norm_: got an undefined parameter tensor");
    Tensor g = p.grad();
    if (g.defined()) grads.push_back(g);
  }
  if (grads.empty()) return 0.0;
  const bool is_inf = std::isinf(norm_type);
  double acc = 0.0;
  for (const auto& g : grads) {
    double a = norm_accum(g, norm_type);
    if (std::isnan(a)) { acc = a; break; }
    acc = is_inf ? std::max(acc, a) : acc + a;
  }
  double total = is_inf || std::isnan(acc) ? acc : (norm_type == 2.0 ? std::sqrt(acc)
                                                     : norm_type == 1.0 ? acc : std::pow(acc, 1.0 / norm_type));
  if (!std::isfinite(total)) {
    KILN_CHECK(!error_if_nonfinite, "clip_grad_norm_: the total norm of order ", norm_type, " of ", grads.size(),
               " gradient(s) is non-finite (", total, "), so it cannot be clipped; set error_if_nonfinite=false "
               "to skip clipping and get the non-finite norm back");
    return total;
  }
  const double coef = max_norm / (total + 1e-6);
  if (coef < 1.0)
    for (auto& g : grads) g.mul_(coef);
  return total;
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  KILN_CHECK(clip_value >= 0, "clip_grad_value_: clip_value must be >= 0, got ", clip_value);
  NoGradGuard ng;
  for (const auto& p : params) {
    KILN_CHECK(p.defined(), "clip_grad_value_: got an undefined parameter tensor");
    Tensor g = p.grad();
    if (!g.defined() || g.numel() == 0) continue;
    if (cpu_fast(g)) {
      KILN_DISPATCH_FLOATING(g.dtype(), "clip_grad_value_", [&]<class T>() {
        T* d = g.data<T>();
        const T hi = T(clip_value), lo = T(-clip_value);
        parallel_for(0, g.numel(), 32768, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) d[i] = d[i] < lo ? lo : (d[i] > hi ? hi : d[i]);
        });
      });
    } else {
      g.copy_(clamp(g, -clip_value, clip_value));
    }
  }
}


Tensor parameters_to_vector(const std::vector<Tensor>& params) {
  std::vector<Tensor> flat;
  for (size_t i = 0; i < params.size(); ++i) {
    KILN_CHECK(params[i].defined(), "parameters_to_vector: parameter ", i, " is undefined");
    KILN_CHECK(params[i].device() == params[0].device(), "parameters_to_vector: parameters on ",
               params[0].device().str(), " and ", params[i].device().str(), " (one device expected)");
    flat.push_back(params[i].reshape({params[i].numel()}));
  }
  KILN_CHECK(!flat.empty(), "parameters_to_vector: no parameters");
  return cat(flat, 0);
}

void vector_to_parameters(const Tensor& vec, const std::vector<Tensor>& params) {
  int64_t n = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    KILN_CHECK(params[i].defined(), "vector_to_parameters: parameter ", i, " is undefined");
    n += params[i].numel();
  }
  KILN_CHECK(vec.defined() && vec.dim() == 1 && vec.numel() == n, "vector_to_parameters: expected a vector of the ", n,
             " parameter entries, got ", vec.defined() ? describe(vec) : std::string("undefined"));
  NoGradGuard ng;
  int64_t off = 0;
  for (const Tensor& p : params) {
    Tensor dst = p;
    dst.copy_(vec.narrow(0, off, p.numel()).reshape(p.shape()));
    off += p.numel();
  }
}

}  // namespace kiln::optim
