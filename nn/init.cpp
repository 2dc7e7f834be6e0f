// Parameter initialisation: draws with kiln::rand/randn (Philox) in float32 (float64 for
// float64 tensors) on the tensor's device, then copies into the tensor in place.
#include "kiln/nn/init.h"
#include <algorithm>
#include <cmath>
#include <vector>
#include <limits>
#include "kiln/core/autograd.h"
#include "kiln/core/error.h"
#include "kiln/core/half.h"
#include "kiln/ops/elementwise.h"

namespace kiln::nn::init {

namespace {
void check(const Tensor& t, const char* op) {
  KILN_CHECK(t.defined(), "init::", op, ": tensor is undefined");
  KILN_CHECK(t.is_floating_point(), "init::", op, ": expected a floating tensor, got dtype ", dtype_name(t.dtype()),
             " with shape ", shape_str(t.shape()));
}
TensorOptions draw_options(const Tensor& t) {
  return {.dtype = t.dtype() == DType::float64 ? DType::float64 : DType::float32, .device = t.device()};
}
Tensor fill_from(const Tensor& t, const Tensor& src) {
  Tensor h = t;
  h.copy_(src);
  return h;
}
/// The largest float16 / bfloat16 value below b (for a uniform draw that rounded onto b).
double largest_below(DType dt, double b) {
  const bool bf = dt == DType::bfloat16;
  auto value = [bf](uint16_t h) { return double(bf ? bf16_bits_to_float(h) : half_bits_to_float(h)); };
  uint16_t h = bf ? float_to_bf16_bits(float(b)) : float_to_half_bits(float(b));
  while (value(h) >= b) {  // one step down: toward 0 when positive, away from it when negative
    if (h == 0) h = 0x8001;
    else if (h & 0x8000) ++h;
    else --h;
  }
  return value(h);
}
}  // namespace

double calculate_gain(Nonlinearity nl, double param) {
  switch (nl) {
    case Nonlinearity::linear:
    case Nonlinearity::sigmoid: return 1.0;
    case Nonlinearity::tanh: return 5.0 / 3.0;
    case Nonlinearity::relu: return std::sqrt(2.0);
    case Nonlinearity::leaky_relu: return std::sqrt(2.0 / (1.0 + param * param));
  }
  return 1.0;
}

std::pair<int64_t, int64_t> fan_in_and_fan_out(const Tensor& t) {
  KILN_CHECK(t.defined() && t.dim() >= 2, "init: fan in and fan out need a tensor with at least 2 dims, got shape ",
             t.defined() ? shape_str(t.shape()) : std::string("(undefined)"));
  int64_t receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= t.size(d);
  return {t.size(1) * receptive, t.size(0) * receptive};
}

Tensor uniform_(const Tensor& t, double a, double b) {
  check(t, "uniform_");
  KILN_CHECK(a <= b, "init::uniform_: expected a <= b, got a=", a, " b=", b);
  // the draws are scaled in float32 below float64: the bounds and b - a must be finite there
  // (and within a 16-bit dtype's range), as PyTorch's "from/to is out of bounds" check
  const double top = t.dtype() == DType::float64   ? std::numeric_limits<double>::max()
                     : t.dtype() == DType::float16 ? 65504.0
                                                   : double(std::numeric_limits<float>::max());
  KILN_CHECK(std::fabs(a) <= top && std::fabs(b) <= top && (t.dtype() == DType::float64 ? std::isfinite(b - a)
                                                                                        : std::isfinite(float(b - a))),
             "init::uniform_: bounds a=", a, " b=", b, " are out of range for ", dtype_name(t.dtype()),
             " (a, b and b - a must be finite in it)");
  NoGradGuard ng;
  Tensor src = rand(t.shape(), draw_options(t)) * (b - a) + a;
  if (is_half(t.dtype()) && a < b) {
    // a float32 draw rounded to 16 bits lands on b now and then (about 1 in 512 in bf16 on
    // [0, 1)): those take the dtype's largest value below b, so the range is [a, b) as PyTorch's
    // (no value of the dtype lies between `below` and b, and `below` is exact in it)
    const double below = largest_below(t.dtype(), b);
    src = src.to(t.dtype());
    src = where(gt(src, below), full({}, below, {.dtype = t.dtype(), .device = t.device()}), src);
  }
  return fill_from(t, src);
}

Tensor normal_(const Tensor& t, double mean, double std) {
  check(t, "normal_");
  KILN_CHECK(std >= 0, "init::normal_: expected std >= 0, got ", std);
  NoGradGuard ng;
  return fill_from(t, randn(t.shape(), draw_options(t)) * std + mean);
}

Tensor constant_(const Tensor& t, double value) {  // any dtype, as PyTorch (fill_ checks the value)
  KILN_CHECK(t.defined(), "init::constant_: tensor is undefined");
  NoGradGuard ng;
  Tensor h = t;
  h.fill_(value);
  return h;
}
Tensor zeros_(const Tensor& t) { return constant_(t, 0.0); }
Tensor ones_(const Tensor& t) { return constant_(t, 1.0); }

Tensor kaiming_uniform_(const Tensor& t, double a, FanMode mode, Nonlinearity nl) {
  check(t, "kaiming_uniform_");
  auto [fan_in, fan_out] = fan_in_and_fan_out(t);
  int64_t fan = mode == FanMode::fan_in ? fan_in : fan_out;
  KILN_CHECK(fan > 0, "init::kaiming_uniform_: zero fan for shape ", shape_str(t.shape()));
  double bound = calculate_gain(nl, a) * std::sqrt(3.0 / double(fan));
  return uniform_(t, -bound, bound);
}

Tensor kaiming_normal_(const Tensor& t, double a, FanMode mode, Nonlinearity nl) {
  check(t, "kaiming_normal_");
  auto [fan_in, fan_out] = fan_in_and_fan_out(t);
  int64_t fan = mode == FanMode::fan_in ? fan_in : fan_out;
  KILN_CHECK(fan > 0, "init::kaiming_normal_: zero fan for shape ", shape_str(t.shape()));
  return normal_(t, 0.0, calculate_gain(nl, a) / std::sqrt(double(fan)));
}

Tensor xavier_uniform_(const Tensor& t, double gain) {
  check(t, "xavier_uniform_");
  auto [fan_in, fan_out] = fan_in_and_fan_out(t);
  KILN_CHECK(fan_in + fan_out > 0, "init::xavier_uniform_: zero fans for shape ", shape_str(t.shape()));
  double b = gain * std::sqrt(6.0 / double(fan_in + fan_out));
  return uniform_(t, -b, b);
}

Tensor xavier_normal_(const Tensor& t, double gain) {
  check(t, "xavier_normal_");
  auto [fan_in, fan_out] = fan_in_and_fan_out(t);
  KILN_CHECK(fan_in + fan_out > 0, "init::xavier_normal_: zero fans for shape ", shape_str(t.shape()));
  return normal_(t, 0.0, gain * std::sqrt(2.0 / double(fan_in + fan_out)));
}


namespace {

/// The inverse error function in double: Giles' single-precision approximation (2010) refined
/// by two Newton steps on erf.
double erfinv_host(double x) {
  if (!(x > -1 && x < 1)) return x == 1 ? INFINITY : x == -1 ? -INFINITY : NAN;
  double w = -std::log((1.0 - x) * (1.0 + x)), p;
  if (w < 5.0) {
    w -= 2.5;
    p = 2.81022636e-08;
    for (double c : {3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503, -0.00417768164,
                     0.246640727, 1.50140941})
      p = c + p * w;
  } else {
    w = std::sqrt(w) - 3.0;
    p = -0.000200214257;
    for (double c : {0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613, 0.00943887047,
                     1.00167406, 2.83297682})
      p = c + p * w;
  }
  double y = p * x;
  for (int k = 0; k < 2; ++k) y -= (std::erf(y) - x) / (1.1283791670955126 * std::exp(-y * y));
  return y;
}

}  // namespace

Tensor trunc_normal_(const Tensor& t, double mean, double std, double a, double b) {
  check(t, "trunc_normal_");
  KILN_CHECK(std >= 0 && a <= b, "init::trunc_normal_: expected std >= 0 and a <= b, got std=", std, " a=", a, " b=", b);
  auto cdf = [](double x) { return (1.0 + std::erf(x / std::sqrt(2.0))) / 2.0; };
  const double l = cdf((a - mean) / std), u = cdf((b - mean) / std);
  NoGradGuard ng;
  std::vector<double> v = rand(t.shape(), {.dtype = DType::float64}).to_vector<double>();
  for (double& e : v) {
    const double z = erfinv_host((2 * l - 1) + (2 * u - 2 * l) * e);  // U(2l - 1, 2u - 1), then erfinv
    e = std::clamp(z * std * std::sqrt(2.0) + mean, a, b);
  }
  return fill_from(t, from_vector(v, t.shape()).to(t.dtype()).to(t.device()));
}

Tensor orthogonal_(const Tensor& t, double gain) {
  check(t, "orthogonal_");
  KILN_CHECK(t.dim() >= 2, "init::orthogonal_: expected at least 2 dims, got shape ", shape_str(t.shape()));
  const int64_t rows = t.size(0), cols = t.numel() / std::max<int64_t>(rows, 1);
  if (t.numel() == 0) return t;
  NoGradGuard ng;
  // a Gaussian (m, n) matrix with m >= n, QR by Householder reflections on the host
  const bool tr = rows < cols;
  const int64_t m = tr ? cols : rows, n = tr ? rows : cols;
  std::vector<double> g = randn({rows, cols}, {.dtype = DType::float64}).to_vector<double>();
  std::vector<double> A(size_t(m * n));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) A[size_t(tr ? j * n + i : i * n + j)] = g[size_t(i * cols + j)];
  std::vector<double> Q(size_t(m * m), 0.0);
  for (int64_t i = 0; i < m; ++i) Q[size_t(i * m + i)] = 1.0;
  for (int64_t k = 0; k < n; ++k) {
    double norm = 0;
    for (int64_t i = k; i < m; ++i) norm += A[size_t(i * n + k)] * A[size_t(i * n + k)];
    norm = std::sqrt(norm);
    if (norm == 0) continue;
    const double alpha = A[size_t(k * n + k)] > 0 ? -norm : norm;
    std::vector<double> v(size_t(m), 0.0);
    for (int64_t i = k; i < m; ++i) v[size_t(i)] = A[size_t(i * n + k)];
    v[size_t(k)] -= alpha;
    double vv = 0;
    for (int64_t i = k; i < m; ++i) vv += v[size_t(i)] * v[size_t(i)];
    if (vv == 0) continue;
    for (int64_t j = 0; j < n; ++j) {  // A = (I - 2 v v^T / v^T v) A
      double s = 0;
      for (int64_t i = k; i < m; ++i) s += v[size_t(i)] * A[size_t(i * n + j)];
      for (int64_t i = k; i < m; ++i) A[size_t(i * n + j)] -= 2 * s / vv * v[size_t(i)];
    }
    for (int64_t r = 0; r < m; ++r) {  // Q = Q (I - 2 v v^T / v^T v)
      double s = 0;
      for (int64_t i = k; i < m; ++i) s += Q[size_t(r * m + i)] * v[size_t(i)];
      for (int64_t i = k; i < m; ++i) Q[size_t(r * m + i)] -= 2 * s / vv * v[size_t(i)];
    }
  }
  // the first n columns of Q, each times the sign of R's diagonal entry (a unique, uniformly
  // distributed Q, as PyTorch's q *= sign(diag(r)))
  std::vector<double> out(size_t(rows * cols));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const double sgn = A[size_t(j * n + j)] < 0 ? -1.0 : 1.0;
      const double q = Q[size_t(i * m + j)] * sgn * gain;
      out[size_t(tr ? j * cols + i : i * cols + j)] = q;
    }
  return fill_from(t, from_vector(out, t.shape()).to(t.dtype()).to(t.device()));
}

Tensor eye_(const Tensor& t) {
  KILN_CHECK(t.defined() && t.dim() == 2, "init::eye_: expected a 2-D tensor, got ",
             t.defined() ? shape_str(t.shape()) : std::string("(undefined)"));
  NoGradGuard ng;
  return fill_from(t, eye(t.size(0), t.size(1), {.dtype = t.dtype(), .device = t.device()}));
}

Tensor dirac_(const Tensor& t, int64_t groups) {
  KILN_CHECK(t.defined() && t.dim() >= 3 && t.dim() <= 5, "init::dirac_: expected a 3- to 5-D weight, got ",
             t.defined() ? shape_str(t.shape()) : std::string("(undefined)"));
  KILN_CHECK(groups > 0 && t.size(0) % groups == 0, "init::dirac_: groups ", groups, " must divide dim 0 of ",
             shape_str(t.shape()));
  const int64_t out_per = t.size(0) / groups, in = t.size(1), k = std::min(out_per, in);
  int64_t inner = 1;
  for (int64_t d = 2; d < t.dim(); ++d) inner *= t.size(d);
  int64_t centre = 0;  // the flat offset of the kernel's centre
  for (int64_t d = 2; d < t.dim(); ++d) centre = centre * t.size(d) + t.size(d) / 2;
  std::vector<double> v(size_t(t.numel()), 0.0);
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t i = 0; i < k; ++i) v[size_t(((g * out_per + i) * in + i) * inner + centre)] = 1.0;
  NoGradGuard ng;
  return fill_from(t, from_vector(v, t.shape()).to(t.dtype()).to(t.device()));
}

Tensor sparse_(const Tensor& t, double sparsity, double std) {
  check(t, "sparse_");
  KILN_CHECK(t.dim() == 2, "init::sparse_: expected a 2-D tensor, got shape ", shape_str(t.shape()));
  KILN_CHECK(sparsity >= 0 && sparsity <= 1, "init::sparse_: sparsity must be in [0, 1], got ", sparsity);
  const int64_t rows = t.size(0), cols = t.size(1), zeros_per_col = int64_t(std::ceil(sparsity * double(rows)));
  NoGradGuard ng;
  std::vector<double> v = randn({rows, cols}, {.dtype = DType::float64}).to_vector<double>();
  for (double& e : v) e *= std;
  for (int64_t c = 0; c < cols; ++c) {  // a random choice of rows per column: the first of a random permutation
    const std::vector<double> keys = rand({rows}, {.dtype = DType::float64}).to_vector<double>();
    std::vector<int64_t> order(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) order[size_t(r)] = r;
    std::sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return keys[size_t(x)] < keys[size_t(y)]; });
    for (int64_t z = 0; z < zeros_per_col; ++z) v[size_t(order[size_t(z)] * cols + c)] = 0.0;
  }
  return fill_from(t, from_vector(v, t.shape()).to(t.dtype()).to(t.device()));
}

}  // namespace kiln::nn::init
