// Reductions (sum, mean, var, std, logsumexp, max/min, argmax/argmin), softmax and
// log_softmax: argument checks, the (outer, reduce, inner) layout, the call through
// dispatch and the backward formulas. Also sum_to (the backward of broadcasting).
#include "kiln/ops/reduce.h"
#include "kiln/core/autocast.h"
#include <algorithm>
#include <cmath>
#include <limits>
#include "kiln/core/autograd.h"
#include "kiln/ops/kernels/reduce.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/helpers.h"

namespace kiln {

namespace {

void check_defined(const char* op, const Tensor& x) {
  KILN_CHECK(x.defined(), op, ": input is an undefined tensor");
}

/// One dim of x wrapped into [0, ndim); the message names the op and x's shape.
int64_t checked_dim(const char* op, const Tensor& x, int64_t dim) {
  const int64_t n = x.dim() == 0 ? 1 : x.dim();  // a 0-dim tensor accepts 0 / -1 like PyTorch
  KILN_CHECK(dim >= -n && dim < n, op, ": dim ", dim, " is out of range for input of shape ", shape_str(x.shape()),
             " (expected ", -n, " <= dim < ", n, ")");
  return dim < 0 ? dim + n : dim;
}

/// Sorted, unique, wrapped dims (empty = all dims) with messages naming x's shape.
std::vector<int64_t> checked_dims(const char* op, const Tensor& x, const Dims& dims) {
  std::vector<int64_t> w;
  if (dims.empty()) {
    for (int64_t d = 0; d < x.dim(); ++d) w.push_back(d);
    return w;
  }
  for (auto d : dims) w.push_back(checked_dim(op, x, d));
  std::sort(w.begin(), w.end());
  KILN_CHECK(std::adjacent_find(w.begin(), w.end()) == w.end(), op, ": dims ", shape_str(dims),
             " name a dim twice (input shape ", shape_str(x.shape()), ")");
  if (x.dim() == 0) w.clear();
  return w;
}

/// The input as a contiguous (outer, reduce, inner) block for a set of reduced dims: no copy
/// when x is contiguous and the reduced dims (size-1 dims aside) are adjacent; otherwise the
/// kept dims are permuted first and the reduced dims last (a copy unless that is contiguous).
struct Plan {
  Tensor x;  // contiguous, detached
  int64_t outer = 1, reduce = 1, inner = 1;
};

Plan plan_reduce(const Tensor& xd, const std::vector<int64_t>& dims) {
  const Shape& s = xd.shape();
  const int64_t nd = xd.dim();
  std::vector<bool> red(size_t(nd), false);
  for (auto d : dims) red[size_t(d)] = true;
  Plan p;
  int64_t first = -1, last = -1;
  for (int64_t d = 0; d < nd; ++d)
    if (red[d] && s[d] != 1) {
      if (first < 0) first = d;
      last = d;
    }
  if (first < 0) {  // only size-1 dims (or none) are reduced: a copy of x
    p.x = xd.contiguous();
    p.outer = xd.numel();
    return p;
  }
  bool block = true;
  for (int64_t d = first; d <= last; ++d)
    if (!red[d] && s[d] != 1) block = false;
  if (block && xd.is_contiguous()) {
    p.x = xd;
    for (int64_t d = 0; d < nd; ++d) {
      if (d < first) p.outer *= s[d];
      else if (d <= last) p.reduce *= s[d];
      else p.inner *= s[d];
    }
    return p;
  }
  Shape perm;
  for (int64_t d = 0; d < nd; ++d)
    if (!red[d]) {
      perm.push_back(d);
      p.outer *= s[d];
    }
  for (int64_t d = 0; d < nd; ++d)
    if (red[d]) {
      perm.push_back(d);
      p.reduce *= s[d];
    }
  p.x = xd.permute(perm).contiguous();
  return p;
}

Shape reduced_shape(const Shape& s, const std::vector<int64_t>& dims, bool keepdim) {
  std::vector<bool> red(s.size(), false);
  for (auto d : dims) red[size_t(d)] = true;
  Shape out;
  for (size_t d = 0; d < s.size(); ++d) {
    if (!red[d]) out.push_back(s[d]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

int64_t reduced_count(const Shape& s, const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (auto d : dims) n *= s[size_t(d)];
  return n;
}

/// Runs reduction `op` of x over wrapped dims into a new tensor of dtype out_dtype.
Tensor run_reduce(Op op, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim, DType out_dtype,
                  double correction = 1.0) {
  Plan p = plan_reduce(x.detach(), dims);
  Tensor out = Tensor::empty(reduced_shape(x.shape(), dims, keepdim), out_dtype, x.device());
  if (out.numel() == 0) return out;
  ReduceArgs a;
  a.outer = p.outer;
  a.reduce = p.reduce;
  a.inner = p.inner;
  a.x = p.x.raw_data();
  a.out = out.raw_data();
  a.correction = correction;
  kernel<ReduceKernelFn>(op, x.device())(op, p.x.dtype(), a);
  return out;
}

/// The gradient of a reduction's output broadcast back to the input shape (a view).
Tensor expand_back(const Tensor& g, const Shape& keep_shape, const Shape& in_shape) {
  return g.reshape(keep_shape).expand(in_shape);
}

}  // namespace

// ---------------------------------------------------------------- sum / mean

Tensor sum(const Tensor& x, const Dims& dims, bool keepdim) {
  if (auto r = autocast_op(AutocastTo::fp32, [&](const Tensor& xc) { return sum(xc, dims, keepdim); }, x))
    return *r;  // autocast: the op ran on cast inputs
  check_defined("sum", x);
  // 16-bit: the CPU kernel widens as it reads (a linear layer's bias gradient under autocast
  // is a sum over every token); elsewhere through a float32 copy
  if (is_half(x.dtype()) && !x.is_cpu()) return sum(x.to(DType::float32), dims, keepdim).to(x.dtype());
  auto d = checked_dims("sum", x, dims);
  const bool fl = x.is_floating_point();
  Tensor out = run_reduce(Op::sum, x, d, keepdim, fl ? x.dtype() : DType::int64);
  if (!fl) return out;
  Shape xs = x.shape(), ks = reduced_shape(xs, d, true);
  return twice_differentiable(record(out, "sum", {x}, [xs, ks](const Tensor& g, const std::vector<bool>&) {
    return std::vector<Tensor>{expand_back(g, ks, xs)};
  }));
}

Tensor mean(const Tensor& x, const Dims& dims, bool keepdim) {
  if (auto r = autocast_op(AutocastTo::fp32, [&](const Tensor& xc) { return mean(xc, dims, keepdim); }, x))
    return *r;  // autocast: the op ran on cast inputs
  check_defined("mean", x);
  if (is_half(x.dtype()) && !x.is_cpu()) return mean(x.to(DType::float32), dims, keepdim).to(x.dtype());
  auto d = checked_dims("mean", x, dims);
  const int64_t n = reduced_count(x.shape(), d);
  if (!x.is_floating_point()) {
    // integers and bool: the mean is float32 (e.g. accuracy = mean(pred == target))
    Tensor s = run_reduce(Op::sum, x, d, keepdim, DType::int64);
    NoGradGuard ng;
    return mul(s.to(DType::float64), n > 0 ? 1.0 / double(n) : std::numeric_limits<double>::quiet_NaN())
        .to(DType::float32);
  }
  Tensor out = run_reduce(Op::mean, x, d, keepdim, x.dtype());
  Shape xs = x.shape(), ks = reduced_shape(xs, d, true);
  return twice_differentiable(record(out, "mean", {x}, [xs, ks, n](const Tensor& g, const std::vector<bool>&) {
    return std::vector<Tensor>{expand_back(mul(g, 1.0 / double(n)), ks, xs)};
  }));
}

// ---------------------------------------------------------------- var / std

namespace {
Tensor var_std(Op op, const char* name, const Tensor& x, const Dims& dims, bool unbiased, bool keepdim) {
  check_floating(name, x);
  if (is_half(x.dtype())) return var_std(op, name, x.to(DType::float32), dims, unbiased, keepdim).to(x.dtype());
  auto d = checked_dims(name, x, dims);
  const double correction = unbiased ? 1.0 : 0.0;
  const double denom = double(reduced_count(x.shape(), d)) - correction;
  Tensor out = run_reduce(op, x, d, keepdim, x.dtype(), correction);
  Shape ks = reduced_shape(x.shape(), d, true);
  Tensor yd = out.detach();
  const bool is_std = op == Op::std;
  return twice_differentiable(
      record(out, name, {x}, {x, yd}, [x, yd, d, ks, denom, is_std](const Tensor& g, const std::vector<bool>&) {
        // d var / dx = 2 (x - mean) / denom;  d std / dx = (x - mean) / (std denom), taken as 0
        // where std is 0 (a constant row: PyTorch's choice too, not 0 / 0 = NaN)
        Tensor centered = sub(x, mean(x, d, true));
        Tensor scale = mul(g.reshape(ks), 2.0 / denom);
        if (is_std) {
          const Tensor s = saved_output(yd).reshape(ks);
          scale = masked_fill(div(g.reshape(ks), mul(s, denom)), eq(s, 0.0), 0.0);
        }
        return std::vector<Tensor>{mul(centered, scale)};
      }));
}
}  // namespace

Tensor var(const Tensor& x, const Dims& dims, bool unbiased, bool keepdim) {
  if (auto r = autocast_op(AutocastTo::fp32, [&](const Tensor& xc) { return var(xc, dims, unbiased, keepdim); }, x))
    return *r;  // autocast: the op ran on cast inputs
  return var_std(Op::var, "var", x, dims, unbiased, keepdim);
}

Tensor std(const Tensor& x, const Dims& dims, bool unbiased, bool keepdim) {
  if (auto r = autocast_op(AutocastTo::fp32, [&](const Tensor& xc) { return std(xc, dims, unbiased, keepdim); }, x))
    return *r;  // autocast: the op ran on cast inputs
  return var_std(Op::std, "std", x, dims, unbiased, keepdim);
}

// ---------------------------------------------------------------- logsumexp

Tensor logsumexp(const Tensor& x, const Dims& dims, bool keepdim) {
  if (auto r = autocast_op(AutocastTo::fp32, [&](const Tensor& xc) { return logsumexp(xc, dims, keepdim); }, x))
    return *r;  // autocast: the op ran on cast inputs
  check_floating("logsumexp", x);
  if (is_half(x.dtype())) return logsumexp(x.to(DType::float32), dims, keepdim).to(x.dtype());
  auto d = checked_dims("logsumexp", x, dims);
  Tensor out = run_reduce(Op::logsumexp, x, d, keepdim, x.dtype());
  Shape ks = reduced_shape(x.shape(), d, true);
  Tensor yd = out.detach();
  auto backward = [x, yd, ks](const Tensor& g, const std::vector<bool>&) {
    // d lse / dx = softmax(x) = exp(x - lse)
    return std::vector<Tensor>{mul(g.reshape(ks), exp(sub(x, saved_output(yd).reshape(ks))))};
  };
  return twice_differentiable(record(out, "logsumexp", {x}, {x, yd}, backward));
}

// ---------------------------------------------------------------- vector_norm

Tensor vector_norm(const Tensor& x, double ord, const Dims& dims, bool keepdim) {
  if (auto r = autocast_op(AutocastTo::fp32, [&](const Tensor& xc) { return vector_norm(xc, ord, dims, keepdim); }, x))
    return *r;  // autocast: the op ran on cast inputs
  const char* op = "vector_norm";
  check_floating(op, x);
  KILN_CHECK(!std::isnan(ord), op, ": ord must be a number, got NaN");
  if (is_half(x.dtype())) return vector_norm(x.to(DType::float32), ord, dims, keepdim).to(x.dtype());
  const auto d = checked_dims(op, x, dims);
  const Shape xs = x.shape(), ks = reduced_shape(xs, d, true);
  KILN_CHECK(reduced_count(xs, d) > 0 || (ord >= 0 && !std::isinf(ord)), op, ": cannot compute the ", ord,
             " norm of an empty reduction (input shape ", shape_str(xs), "): it has no identity");
  Tensor out;
  {
    NoGradGuard ng;
    const Tensor xd = x.detach();
    if (ord == 0) {
      out = sum(ne(xd, 0.0), d, keepdim).to(x.dtype());
    } else if (std::isinf(ord)) {
      out = ord > 0 ? amax(abs(xd), d, keepdim) : amin(abs(xd), d, keepdim);
    } else if (ord == 1) {
      out = sum(abs(xd), d, keepdim);
    } else if (ord == 2) {
      out = sqrt(sum(mul(xd, xd), d, keepdim));
    } else {
      out = pow(sum(pow(abs(xd), ord), d, keepdim), 1.0 / ord);
    }
  }
  const Tensor yd = out.detach();
  // PyTorch's norm_backward: the gradient scale g / norm^(ord - 1) is 0 where the norm is 0
  auto backward = [x, yd, ord, d, ks](const Tensor& g, const std::vector<bool>&) {
    const Tensor gk = g.reshape(ks), n = saved_output(yd).reshape(ks);
    auto scale = [&](const Tensor& v) { return masked_fill(v, eq(n, 0.0), 0.0); };
    Tensor dx;
    if (ord == 0) {
      dx = zeros_like(x);
    } else if (ord == 1) {
      dx = mul(sign(x), gk);
    } else if (ord == 2) {
      dx = mul(x, scale(div(gk, n)));
    } else if (std::isinf(ord)) {  // split among the entries at the extreme (and NaNs)
      const Tensor a = abs(x);
      const Tensor hit = add(eq(a, n), ne(a, a)).to(x.dtype());
      dx = mul(sign(x), mul(div(gk, sum(hit, d, true)), hit));
    } else if (ord < 1) {  // |x|^(ord - 1) taken as 0 at x = 0
      dx = mul(mul(mul(sign(x), masked_fill(pow(abs(x), ord - 1), eq(x, 0.0), 0.0)), gk), pow(n, 1 - ord));
    } else if (ord < 2) {
      dx = mul(mul(sign(x), pow(abs(x), ord - 1)), scale(div(gk, pow(n, ord - 1))));
    } else {
      dx = mul(mul(x, pow(abs(x), ord - 2)), scale(div(gk, pow(n, ord - 1))));
    }
    return std::vector<Tensor>{dx};
  };
  return twice_differentiable(record(out, op, {x}, {x, yd}, backward));
}

// ---------------------------------------------------------------- amax / amin

namespace {
Tensor amax_amin(const char* op, bool is_max, const Tensor& x, const Dims& dims, bool keepdim) {
  check_defined(op, x);
  const auto d = checked_dims(op, x, dims);
  const Shape xs = x.shape(), ks = reduced_shape(xs, d, true);
  for (int64_t e : d)
    KILN_CHECK(xs[size_t(e)] > 0, op, ": cannot reduce over dim ", e, " of size 0 (input shape ", shape_str(xs),
               "): max and min have no identity");
  Tensor out;
  {
    NoGradGuard ng;
    out = x.detach();
    for (auto it = d.rbegin(); it != d.rend(); ++it)
      out = is_max ? max(out, *it, true).values : min(out, *it, true).values;
    out = out.reshape(reduced_shape(xs, d, keepdim));
  }
  if (!x.is_floating_point()) return out;
  const Tensor yd = out.detach();
  auto backward = [x, yd, d, ks](const Tensor& g, const std::vector<bool>&) {  // PyTorch's scale_grad_by_count
    const Tensor hit = eq(x, saved_output(yd).reshape(ks)).to(g.dtype());
    return std::vector<Tensor>{mul(div(g.reshape(ks), sum(hit, d, true)), hit)};
  };
  return twice_differentiable(record(out, op, {x}, {x, yd}, backward));
}
}  // namespace

Tensor amax(const Tensor& x, const Dims& dims, bool keepdim) { return amax_amin("amax", true, x, dims, keepdim); }
Tensor amin(const Tensor& x, const Dims& dims, bool keepdim) { return amax_amin("amin", false, x, dims, keepdim); }

// ---------------------------------------------------------------- cumsum

namespace {
/// The running sum along dim d (reverse: from the end); each is the other's gradient.
Tensor cumsum_impl(const Tensor& x, int64_t d, bool reverse) {
  const Tensor xc = x.detach().contiguous();
  const Shape& s = x.shape();
  ReduceArgs a;
  if (x.dim() > 0) {
    for (int64_t i = 0; i < d; ++i) a.outer *= s[size_t(i)];
    a.reduce = s[size_t(d)];
    for (int64_t i = d + 1; i < x.dim(); ++i) a.inner *= s[size_t(i)];
  }
  const bool fl = x.is_floating_point();
  Tensor out = Tensor::empty(s, fl ? x.dtype() : DType::int64, x.device());
  a.x = xc.raw_data();
  a.out = out.raw_data();
  a.backward = reverse;
  if (out.numel() > 0) kernel<ReduceKernelFn>(Op::cumsum, x.device())(Op::cumsum, x.dtype(), a);
  if (!fl) return out;
  return twice_differentiable(record(out, "cumsum", {x}, [d, reverse](const Tensor& g, const std::vector<bool>&) {
    return std::vector<Tensor>{cumsum_impl(g, d, !reverse)};
  }));
}
}  // namespace

Tensor cumsum(const Tensor& x, int64_t dim) {
  if (auto r = autocast_op(AutocastTo::fp32, [&](const Tensor& xc) { return cumsum(xc, dim); }, x))
    return *r;  // autocast: the op ran on cast inputs
  check_defined("cumsum", x);
  const int64_t d = checked_dim("cumsum", x, dim);
  if (is_half(x.dtype())) return cumsum(x.to(DType::float32), dim).to(x.dtype());
  return cumsum_impl(x, d, false);
}

// ---------------------------------------------------------------- max / min / argmax / argmin

namespace {

/// Scatters g (outer, inner) to the chosen indices: dx (outer, reduce, inner), shape in_shape.
/// Under create_graph, g times a one-hot mask of the indices, so dx is recorded (linear in g).
Tensor max_min_backward(Op op, const Tensor& g, const Tensor& indices, const Shape& in_shape, int64_t O, int64_t R,
                        int64_t I) {
  if (grad_mode_enabled()) {
    Tensor positions = arange(double(R), {.dtype = DType::int64, .device = g.device()}).reshape({1, R, 1});
    Tensor hot = eq(positions, indices.reshape({O, 1, I}));
    // where, not a product with the one-hot mask: an inf or NaN in g must not reach the other
    // elements as inf * 0 = NaN
    return where(hot, g.reshape({O, 1, I}), zeros({}, {.dtype = g.dtype(), .device = g.device()})).reshape(in_shape);
  }
  Tensor gc = g.contiguous();
  Tensor dx = Tensor::empty(in_shape, g.dtype(), g.device());
  if (dx.numel() == 0) return dx;
  ReduceArgs a;
  a.outer = O;
  a.reduce = R;
  a.inner = I;
  a.indices = static_cast<int64_t*>(indices.raw_data());
  a.backward = true;
  a.g = gc.raw_data();
  a.dx = dx.raw_data();
  kernel<ReduceKernelFn>(op, g.device())(op, g.dtype(), a);
  return dx;
}

/// max/min/argmax/argmin along one dim; values is undefined for argmax/argmin.
ValuesIndices max_min_dim(Op op, const char* name, const Tensor& x, int64_t dim, bool keepdim) {
  check_defined(name, x);
  const bool want_values = op == Op::max || op == Op::min;
  if (is_half(x.dtype())) {
    ValuesIndices r = max_min_dim(op, name, x.to(DType::float32), dim, keepdim);
    if (want_values) r.values = r.values.to(x.dtype());
    return r;
  }
  const int64_t d = checked_dim(name, x, dim);
  std::vector<int64_t> dims;
  if (x.dim() > 0) dims.push_back(d);
  const int64_t R = x.dim() > 0 ? x.size(d) : 1;
  KILN_CHECK(R > 0, name, ": cannot reduce over dim ", dim, " of size 0 (input shape ", shape_str(x.shape()),
             ")");
  Tensor xc = x.detach().contiguous();  // natural (outer, R, inner) layout, used by the backward too
  int64_t O = 1, I = 1;
  for (int64_t k = 0; k < x.dim(); ++k) {
    if (k < d) O *= x.size(k);
    else if (k > d) I *= x.size(k);
  }
  Shape os = reduced_shape(x.shape(), dims, keepdim);
  ValuesIndices r;
  r.indices = Tensor::empty(os, DType::int64, x.device());
  if (want_values) r.values = Tensor::empty(os, x.dtype(), x.device());
  if (r.indices.numel() > 0) {
    ReduceArgs a;
    a.outer = O;
    a.reduce = R;
    a.inner = I;
    a.x = xc.raw_data();
    a.out = want_values ? r.values.raw_data() : nullptr;
    a.indices = static_cast<int64_t*>(r.indices.raw_data());
    kernel<ReduceKernelFn>(op, x.device())(op, x.dtype(), a);
  }
  if (want_values && x.is_floating_point()) {
    Tensor idx = r.indices;
    Shape xs = x.shape();
    twice_differentiable(
        record(r.values, name, {x}, {idx}, [op, idx, xs, O, R, I](const Tensor& g, const std::vector<bool>&) {
          return std::vector<Tensor>{max_min_backward(op, g, idx, xs, O, R, I)};
        }));
  }
  return r;
}

/// max/min of all elements (0-dim), the gradient split evenly among the tied elements.
Tensor max_min_all(Op op, const char* name, const Tensor& x) {
  check_defined(name, x);
  if (is_half(x.dtype())) return max_min_all(op, name, x.to(DType::float32)).to(x.dtype());
  KILN_CHECK(x.numel() > 0, name, ": cannot reduce an empty tensor (shape ", shape_str(x.shape()), ")");
  Tensor xc = x.detach().contiguous();
  const int64_t R = x.numel();
  Tensor values = Tensor::empty({}, x.dtype(), x.device());
  Tensor idx = Tensor::empty({}, DType::int64, x.device());
  ReduceArgs a;
  a.reduce = R;
  a.x = xc.raw_data();
  a.out = values.raw_data();
  a.indices = static_cast<int64_t*>(idx.raw_data());
  kernel<ReduceKernelFn>(op, x.device())(op, x.dtype(), a);
  if (!x.is_floating_point()) return values;
  // PyTorch's rule: the gradient is split evenly among every element equal to the result (every
  // NaN when the result is NaN), computed with ops so that it stays on the device, without a sync
  const Tensor xd = xc, vd = values.detach();
  auto backward = [xd, vd](const Tensor& g, const std::vector<bool>&) {
    const DType t = g.dtype();
    const Tensor tie = add(eq(xd, vd).to(t), mul(ne(xd, xd).to(t), ne(vd, vd).to(t)));  // 1 or 0
    const Tensor zero = zeros({}, {.dtype = t, .device = g.device()});
    return std::vector<Tensor>{where(gt(tie, 0.0), div(g, sum(tie)), zero)};
  };
  return twice_differentiable(record(values, name, {x}, {xd, vd}, backward));
}

}  // namespace

ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim) { return max_min_dim(Op::max, "max", x, dim, keepdim); }
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim) { return max_min_dim(Op::min, "min", x, dim, keepdim); }
Tensor max(const Tensor& x) { return max_min_all(Op::max, "max", x); }
Tensor min(const Tensor& x) { return max_min_all(Op::min, "min", x); }
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  return max_min_dim(Op::argmax, "argmax", x, dim, keepdim).indices;
}
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim) {
  return max_min_dim(Op::argmin, "argmin", x, dim, keepdim).indices;
}

// ---------------------------------------------------------------- softmax / log_softmax

namespace {
Tensor softmax_impl(Op op, const char* name, const Tensor& x, int64_t dim) {
  if (auto r = autocast_op(AutocastTo::fp32, [&](const Tensor& xc) { return softmax_impl(op, name, xc, dim); }, x))
    return *r;  // autocast: the op ran on cast inputs
  check_floating(name, x);
  if (is_half(x.dtype()))  // in float32, rounded once (autocast, above, keeps float32)
    return softmax_impl(op, name, x.to(DType::float32), dim).to(x.dtype());
  const int64_t d = checked_dim(name, x, dim);
  SoftmaxArgs a;
  for (int64_t k = 0; k < x.dim(); ++k) {
    if (k < d) a.outer *= x.size(k);
    else if (k == d) a.dim = x.size(k);
    else a.inner *= x.size(k);
  }
  Tensor xc = x.detach().contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (y.numel() > 0) {
    a.x = xc.raw_data();
    a.out = y.raw_data();
    kernel<SoftmaxKernelFn>(op, x.device())(op, x.dtype(), a);
  }
  Tensor yd = y.detach();
  return twice_differentiable(record(y, name, {x}, {yd}, [op, yd, a, d](const Tensor& g, const std::vector<bool>&) {
    if (grad_mode_enabled()) {  // create_graph: the same formulas in recorded ops
      Tensor yl = saved_output(yd);
      if (op == Op::softmax) return std::vector<Tensor>{mul(yl, sub(g, sum(mul(g, yl), {d}, true)))};
      return std::vector<Tensor>{sub(g, mul(exp(yl), sum(g, {d}, true)))};
    }
    Tensor gc = g.contiguous();
    Tensor dx = Tensor::empty(yd.shape(), yd.dtype(), yd.device());
    if (dx.numel() == 0) return std::vector<Tensor>{dx};
    SoftmaxArgs b = a;
    b.x = nullptr;
    b.y = yd.raw_data();
    b.g = gc.raw_data();
    b.out = dx.raw_data();
    b.backward = true;
    kernel<SoftmaxKernelFn>(op, yd.device())(op, yd.dtype(), b);
    return std::vector<Tensor>{dx};
  }));
}
}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_impl(Op::softmax, "softmax", x, dim); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_impl(Op::log_softmax, "log_softmax", x, dim); }

// ---------------------------------------------------------------- sum_to

Tensor sum_to(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  const Shape& gs = g.shape();
  KILN_CHECK(shape.size() <= gs.size(), "sum_to: cannot reduce a gradient of shape ", shape_str(gs), " to shape ",
             shape_str(shape));
  const size_t lead = gs.size() - shape.size();
  Dims dims;
  for (size_t i = 0; i < lead; ++i) dims.push_back(int64_t(i));
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == gs[lead + i]) continue;
    KILN_CHECK(shape[i] == 1, "sum_to: cannot reduce a gradient of shape ", shape_str(gs), " to shape ",
               shape_str(shape), " (dim ", lead + i, ": ", gs[lead + i], " vs ", shape[i], ")");
    dims.push_back(int64_t(lead + i));
  }
  if (dims.empty()) return g.reshape(shape);
  return sum(g, dims, true).reshape(shape);
}


std::pair<Tensor, Tensor> var_mean(const Tensor& x, const Dims& dims, bool unbiased, bool keepdim) {
  return {var(x, dims, unbiased, keepdim), mean(x, dims, keepdim)};
}
std::pair<Tensor, Tensor> std_mean(const Tensor& x, const Dims& dims, bool unbiased, bool keepdim) {
  return {std(x, dims, unbiased, keepdim), mean(x, dims, keepdim)};
}
}  // namespace kiln
