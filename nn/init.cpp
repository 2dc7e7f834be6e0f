// Parameter initialisation: draws with kiln::rand/randn (Philox) in float32 (float64 for
// float64 tensors) on the tensor's device, then copies into the tensor in place.
#include "kiln/nn/init.h"
#include <cmath>
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

}  // namespace kiln::nn::init
