// Elementwise ops: broadcasting, dtype promotion, the call through dispatch, and each
// op's backward right next to its forward.
#include "kiln/ops/elementwise.h"
#include <cmath>
#include <limits>
#include "kiln/core/copy.h"
#include "kiln/core/half.h"
#include "kiln/ops/kernels/elementwise.h"
#include "kiln/ops/math.h"
#include "kiln/ops/helpers.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/special_math.h"

namespace kiln {
namespace {

EwArgs make_args(const Shape& shape, std::initializer_list<const Tensor*> ts, const char* op) {
  EwArgs a;
  KILN_CHECK(shape.size() <= size_t(kMaxDims), op, ": at most ", kMaxDims, " dims supported, got ", shape_str(shape));
  a.ndim = int(shape.size());
  for (int d = 0; d < a.ndim; ++d) a.shape[d] = shape[d];
  int k = 0;
  for (const Tensor* t : ts) {
    Shape st = broadcast_strides(*t, shape, op);
    for (int d = 0; d < a.ndim; ++d) a.strides[k][d] = st[d];
    a.ptr[k] = t->raw_data();
    a.dtype[k] = t->dtype();
    ++k;
  }
  return a;
}

// The binary rows of ops/elementwise_ops.def whose result is bool_.
constexpr bool is_comparison(Op op) {
  switch (op) {
#define KILN_IS_BOOL_same false
#define KILN_IS_BOOL_bool_ true
#define KILN_BINARY(name, Fn, result) \
  case Op::name: return KILN_IS_BOOL_##result;
#include "kiln/ops/elementwise_ops.def"
#undef KILN_BINARY
#undef KILN_IS_BOOL_same
#undef KILN_IS_BOOL_bool_
    default: return false;
  }
}

// Forward of a binary op without autograd: promotes, broadcasts, calls the kernel.
Tensor binary_raw(Op op, const Tensor& a0, const Tensor& b0) {
  const char* name = op_name(op);
  KILN_CHECK(a0.defined() && b0.defined(), name, ": undefined input tensor");
  check_same_device(name, {a0, b0});
  DType dt = result_type(a0, b0);
  if ((op == Op::div || op == Op::atan2 || op == Op::hypot) && !is_floating(dt)) dt = DType::float32;  // true division, angles
  const bool rounding_division = op == Op::fmod || op == Op::remainder || op == Op::floor_divide;
  KILN_CHECK(!(rounding_division && dt == DType::bool_), name, ": not defined for bool tensors (", describe(a0),
             ", ", describe(b0), "), as in PyTorch; convert them to an integer dtype first");
  DType out_dt = is_comparison(op) ? DType::bool_ : dt;
  DType compute = a0.is_cpu() ? cpu_compute_dtype(dt) : dt;
  // Every operand is first converted to the result dtype, as PyTorch does: a 16-bit result on
  // the CPU computes in float32, but a 0-dim float32/float64 or an integer operand beside it is
  // rounded to 16 bits first (bf16 + int32 -293 adds -292). mul and div keep a 0-dim operand's
  // own value (PyTorch's opmath scalar, product_with_scalar). A float32 computation on the CPU
  // reads a 16-bit operand as it is and writes a 16-bit result directly (the kernel widens
  // and rounds a chunk at a time: EwArgs::dtype), where converting would add passes over memory.
  const bool keep_scalar = op == Op::mul || op == Op::div;
  const bool widen_in_kernel = a0.is_cpu() && compute == DType::float32;
  auto operand = [&](const Tensor& x) {
    Tensor y = compute != dt && x.dtype() != dt && !(keep_scalar && x.dim() == 0) ? x.to(dt) : x;
    return widen_in_kernel && is_half(y.dtype()) ? y : y.to(compute);
  };
  Tensor a = operand(a0), b = operand(b0);
  Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  // an integer division by zero (PyTorch's ZeroDivisionError) is refused before any kernel runs
  if (rounding_division && !is_floating(dt) && b.numel() > 0)
    KILN_CHECK(any(eq(b, 0.0)).item() == 0, name, ": integer division by zero (the divisor ", describe(b0),
               " has a zero)");
  Tensor out = Tensor::empty(shape, is_comparison(op) ? DType::bool_ : widen_in_kernel && is_half(dt) ? dt : compute,
                             a.device());
  if (out.numel() > 0) kernel<BinaryKernelFn>(op, out.device())(op, compute, make_args(shape, {&out, &a, &b}, name));
  if (out.dtype() != out_dt) out = out.to(out_dt);
  return out;
}

}  // namespace

// Unary kernels take float16 / bfloat16 on every device (on the CPU: 16-bit storage,
// float32 math a chunk at a time, ops/cpu/elementwise.cpp), so they are never converted.

Tensor unary_raw(Op op, const Tensor& x0, double p0, double p1) {
  const char* name = op_name(op);
  KILN_CHECK(x0.defined(), name, ": undefined input tensor");
  DType compute = x0.is_cpu() && !is_half(x0.dtype()) ? cpu_compute_dtype(x0.dtype()) : x0.dtype();
  Tensor x = x0.detach().to(compute).contiguous();
  Tensor out = Tensor::empty(x.shape(), compute, x.device());
  UnaryArgs a;
  a.n = x.numel();
  a.x = x.raw_data();
  a.out = out.raw_data();
  a.p0 = p0;
  a.p1 = p1;
  if (a.n > 0) kernel<UnaryKernelFn>(op, out.device())(op, compute, a);
  return out.to(x0.dtype());
}

namespace {

// Which tensor a unary op's derivative reads: the `reads` column of ops/elementwise_ops.def.
enum class Reads { x, y, none };
constexpr Reads unary_reads(Op op) {
  switch (op) {
#define KILN_UNARY(name, Fn, reads, api) \
  case Op::name: return Reads::reads;
#include "kiln/ops/elementwise_ops.def"
#undef KILN_UNARY
    default: return Reads::none;
  }
}

}  // namespace

// g * op'(s) through the unary backward kernel; s is the saved input or output.
Tensor unary_grad(Op op, const Tensor& g0, const Tensor& s0, double p0, double p1) {
  const bool same16 = is_half(g0.dtype()) && s0.dtype() == g0.dtype();
  DType compute = g0.is_cpu() && !same16 ? cpu_compute_dtype(g0.dtype()) : g0.dtype();
  Tensor g = g0.to(compute).contiguous();
  Tensor s = s0.to(compute).contiguous();
  Tensor out = Tensor::empty(g.shape(), compute, g.device());
  UnaryArgs a;
  a.n = g.numel();
  a.s = s.raw_data();
  a.g = g.raw_data();
  a.out = out.raw_data();
  a.p0 = p0;
  a.p1 = p1;
  a.backward = true;
  if (a.n > 0) kernel<UnaryKernelFn>(op, out.device())(op, compute, a);
  return out.to(g0.dtype());
}

namespace {

// A C++ double beside a tensor, as a 0-dim tensor (which never outranks a dimensioned
// operand of its category, ops/helpers.h result_type), PyTorch's wrapped-number rule: beside
// a float tensor, the tensor's dtype; beside an integer or bool tensor, a whole number within
// int64's range is an int64 scalar (converted to the computation's dtype: -3 beside uint8
// adds as 253, but divides as -3.0, as in PyTorch) and anything else (a fraction, inf, NaN,
// 1e30) a float32 one, so the result is float32.
// A number a 16-bit dtype cannot hold becomes +-inf, as its conversion gives in PyTorch (a
// fill with it is an error, a scalar operand is not).
Tensor scalar_like(const Tensor& t, double v) {
  DType dt = t.dtype();
  if (!is_floating(dt))
    dt = v == std::floor(v) && v >= -9223372036854775808.0 && v < 9223372036854775808.0 ? DType::int64
                                                                                          : DType::float32;
  if (is_half(dt) && std::fabs(v) >= (dt == DType::float16 ? 65520.0 : 0x1.ffp127)) v = std::copysign(INFINITY, v);
  Tensor s = full({}, v, {.dtype = dt, .device = t.device()});
  s.impl().wrapped_number = true;
  return s;
}

// gelu's derivative Phi(x) + x phi(x) as an op of its own (the functor computes it; erf is
// not an op), whose derivative phi(x) (2 - x^2) is written in ops: gelu twice differentiable.
Tensor gelu_derivative(const Tensor& x) {
  Tensor d = unary_grad(Op::gelu, ones_like(x), x.detach(), 0, 0);
  return twice_differentiable(record(d, "gelu_derivative", {x}, {x}, [x](const Tensor& g, const std::vector<bool>&) {
    Tensor phi = mul(exp(mul(mul(x, x), -0.5)), 0.3989422804014327);  // 1/sqrt(2 pi)
    return std::vector<Tensor>{mul(g, mul(phi, sub(scalar_like(x, 2.0), mul(x, x))))};
  }));
}

// log_ndtr's derivative G = phi / Phi as an op of its own (the functor computes it without the
// cancellation of e^(-(log_ndtr + x^2 / 2))), with G' = -G (x + G) in recorded ops.
Tensor log_ndtr_derivative(const Tensor& x) {
  Tensor d = unary_grad(Op::log_ndtr, ones_like(x), x.detach(), 0, 0);
  return twice_differentiable(record(d, "log_ndtr_derivative", {x}, {x}, [x](const Tensor& g, const std::vector<bool>&) {
    const Tensor G = log_ndtr_derivative(x);
    return std::vector<Tensor>{mul(g, neg(mul(G, add(x, G))))};
  }));
}

}  // namespace

// f'(s) written in recorded ops, for a backward under create_graph: s is the live input x
// or the output y (saved_output), as the op's `reads` column says. Piecewise-constant
// derivatives (abs, relu, leaky_relu, clamp) are constants: the kernel computes them.
// Adding an op's case here (and to has_recorded_derivative) makes it twice differentiable.
Tensor unary_derivative(Op op, const Tensor& s, double p0, double p1) {
  switch (op) {
    case Op::exp: return s;
    case Op::log: return div(scalar_like(s, 1.0), s);
    case Op::sqrt: return div(scalar_like(s, 0.5), s);
    case Op::rsqrt: return mul(mul(s, mul(s, s)), -0.5);
    case Op::sin: return cos(s);
    case Op::cos: return neg(sin(s));
    case Op::tanh: return sub(scalar_like(s, 1.0), mul(s, s));
    case Op::sigmoid: return mul(s, sub(scalar_like(s, 1.0), s));
    case Op::gelu: return gelu_derivative(s);
    case Op::gelu_tanh: {  // t = tanh(k (x + c x^3)): 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3c x^2)
      const double k = 0.7978845608028654, c = 0.044715;
      Tensor x2 = mul(s, s);
      Tensor t = tanh(mul(add(s, mul(mul(x2, s), c)), k));
      Tensor inner = mul(add(mul(x2, 3.0 * c), 1.0), k);
      return add(mul(add(t, 1.0), 0.5), mul(mul(mul(s, 0.5), sub(scalar_like(s, 1.0), mul(t, t))), inner));
    }
    case Op::silu: {  // sigma (1 + x (1 - sigma))
      Tensor sg = sigmoid(s);
      return mul(sg, add(mul(s, sub(scalar_like(s, 1.0), sg)), 1.0));
    }
    case Op::softplus: return where(gt(s, 20.0), ones_like(s), sigmoid(s));
    case Op::log_sigmoid: return sigmoid(neg(s));
    case Op::log1p: return div(scalar_like(s, 1.0), add(s, 1.0));
    case Op::expm1: return add(s, 1.0);
    case Op::elu: return where(gt(s, 0.0), scalar_like(s, 1.0), mul(exp(s), p0));
    case Op::selu:
      return where(gt(s, 0.0), scalar_like(s, math::kSeluScale),
                   mul(exp(s), math::kSeluScale * math::kSeluAlpha));
    case Op::hardswish:
      return where(le(s, -3.0), scalar_like(s, 0.0), where(lt(s, 3.0), add(div(s, 3.0), 0.5), scalar_like(s, 1.0)));
    case Op::pow_scalar: return p0 == 0 ? zeros_like(s) : mul(pow(s, p0 - 1), p0);
    case Op::reciprocal: return neg(mul(s, s));
    case Op::square: return mul(s, 2.0);
    case Op::tan: return add(mul(s, s), 1.0);
    case Op::atan: return div(scalar_like(s, 1.0), add(mul(s, s), 1.0));
    case Op::asin: return rsqrt(sub(scalar_like(s, 1.0), mul(s, s)));
    case Op::acos: return neg(rsqrt(sub(scalar_like(s, 1.0), mul(s, s))));
    case Op::sinh: return cosh(s);
    case Op::cosh: return sinh(s);
    case Op::erf: return mul(exp(neg(mul(s, s))), math::kTwoOverSqrtPi);
    case Op::erfc: return mul(exp(neg(mul(s, s))), -math::kTwoOverSqrtPi);
    case Op::exp2: return mul(s, math::kLn2);
    case Op::log2: return div(scalar_like(s, 1.0 / math::kLn2), s);
    case Op::log10: return div(scalar_like(s, 1.0 / math::kLn10), s);
    case Op::asinh: return rsqrt(add(mul(s, s), 1.0));
    case Op::acosh: return rsqrt(sub(mul(s, s), 1.0));
    case Op::atanh: return div(scalar_like(s, 1.0), sub(scalar_like(s, 1.0), mul(s, s)));
    case Op::lgamma: return digamma(s);
    case Op::digamma: return polygamma(1, s);
    case Op::polygamma: return polygamma(int64_t(p0) + 1, s);
    case Op::erfinv: return mul(exp(mul(s, s)), 0.88622692545275801365);  // s is the output
    case Op::i0: return i1(s);
    case Op::i0e: return sub(i1e(s), mul(sign(s), i0e(s)));
    case Op::i1:
    case Op::i1e: {  // PyTorch's i1_backward / i1e_backward: 1/2 where |x| <= eps, a safe x elsewhere
      const double eps = s.dtype() == DType::float64 ? std::numeric_limits<double>::epsilon()
                                                     : double(std::numeric_limits<float>::epsilon());
      const Tensor not_tiny = gt(abs(s), eps);
      const Tensor safe = where(not_tiny, s, eps);
      const Tensor d = op == Op::i1 ? sub(i0(safe), mul(i1(safe), reciprocal(safe)))
                                    : sub(i0e(safe), mul(i1e(safe), add(sign(safe), reciprocal(safe))));
      return where(not_tiny, d, 0.5);
    }
    case Op::ndtri: return mul(exp(div(mul(s, s), 2.0)), 2.50662827463100050242);  // s is the output
    case Op::log_ndtr: return log_ndtr_derivative(s);
    case Op::sinc: {  // PyTorch's sinc_backward
      const Tensor p = mul(s, math::kPi), den = mul(mul(s, s), math::kPi);
      return where(eq(den, 0.0), 0.0, div(sub(mul(p, cos(p)), sin(p)), den));
    }
    case Op::mish: {  // PyTorch's infinitely_differentiable_mish_backward
      const Tensor sg = sigmoid(s), ts = tanh(softplus(s));
      return add(ts, mul(mul(s, sg), sub(scalar_like(s, 1.0), mul(ts, ts))));
    }
    case Op::entr: return neg(add(log(s), 1.0));
    case Op::abs:
    case Op::relu:
    case Op::leaky_relu:
    case Op::hardtanh:
    case Op::hardsigmoid:
    case Op::floor: case Op::ceil: case Op::trunc: case Op::round: case Op::sign:
    case Op::clamp: return unary_grad(op, ones_like(s), s.detach(), p0, p1);  // piecewise constant: f'' = 0
    default: KILN_FAIL("unary_derivative: no formula for '", op_name(op), "'");  // has_recorded_derivative says
  }
}

namespace {

// Whether unary_derivative has op's formula. A row without one (a new activation's four
// edits) is first-order only: a second backward through it is an error naming the op
// (the engine's refuse_double_backward), never a silently dropped f''.
bool has_recorded_derivative(Op op) {
  switch (op) {
    case Op::neg: case Op::exp: case Op::log: case Op::sqrt: case Op::rsqrt: case Op::sin: case Op::cos:
    case Op::tanh: case Op::sigmoid: case Op::gelu: case Op::gelu_tanh: case Op::silu: case Op::softplus:
    case Op::log_sigmoid: case Op::log1p: case Op::expm1: case Op::elu: case Op::selu:
    case Op::hardtanh: case Op::hardsigmoid: case Op::hardswish: case Op::floor: case Op::ceil: case Op::trunc:
    case Op::round: case Op::sign: case Op::pow_scalar: case Op::abs: case Op::relu: case Op::leaky_relu:
    case Op::clamp:
    case Op::reciprocal: case Op::square: case Op::tan: case Op::atan: case Op::asin: case Op::acos: case Op::sinh:
    case Op::cosh: case Op::erf: case Op::erfc: case Op::exp2: case Op::log2: case Op::log10:
    case Op::asinh: case Op::acosh: case Op::atanh: case Op::lgamma: case Op::digamma: case Op::polygamma:
    case Op::erfinv: case Op::i0: case Op::i0e: case Op::i1: case Op::i1e: case Op::ndtri: case Op::log_ndtr:
    case Op::sinc: case Op::mish: case Op::entr: return true;
    default: return false;
  }
}

// A unary op with its backward: saves the input, the output or nothing, as its row says.
// Under create_graph the backward is g * f'(s) in recorded ops (unary_derivative).
Tensor unary_op(Op op, const Tensor& x, double p0 = 0, double p1 = 0) {
  Tensor out = unary_raw(op, x, p0, p1);
  if (!x.is_floating_point()) return out;  // integer neg / abs: not differentiable
  const Reads reads = unary_reads(op);
  if (reads == Reads::none)  // a constant derivative (neg): g stands in for s
    return twice_differentiable(record(out, op_name(op), {x}, [op, p0, p1](const Tensor& g, const std::vector<bool>&) {
      return std::vector<Tensor>{grad_mode_enabled() ? neg(g) : unary_grad(op, g, g, p0, p1)};
    }));
  // the input is kept live (a twice-differentiable formula reads it); the output detached
  Tensor s = reads == Reads::x ? x : out.detach();
  const bool twice = has_recorded_derivative(op);
  record(out, op_name(op), {x}, {s}, [op, s, reads, p0, p1, twice](const Tensor& g, const std::vector<bool>&) {
    if (twice && grad_mode_enabled())  // create_graph
      return std::vector<Tensor>{mul(g, unary_derivative(op, reads == Reads::x ? s : saved_output(s), p0, p1))};
    return std::vector<Tensor>{unary_grad(op, g, s, p0, p1)};
  });
  return twice ? twice_differentiable(out) : out;
}

}  // namespace

// ---------------------------------------------------------------- binary

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = binary_raw(Op::add, a, b);
  Shape sa = a.shape(), sb = b.shape();
  return twice_differentiable(record(out, "add", {a, b}, [sa, sb](const Tensor& g, const std::vector<bool>& n) {
    return std::vector<Tensor>{n[0] ? sum_to(g, sa) : Tensor(), n[1] ? sum_to(g, sb) : Tensor()};
  }));
}

Tensor sub(const Tensor& a, const Tensor& b) {
  KILN_CHECK(!(a.defined() && a.dtype() == DType::bool_) && !(b.defined() && b.dtype() == DType::bool_),
             "sub: subtraction with a bool tensor is not supported (", describe(a), " - ", describe(b),
             "), as in PyTorch; to invert a mask use eq(mask, 0), for two masks' xor ne(a, b), or convert to a "
             "number dtype first");
  Tensor out = binary_raw(Op::sub, a, b);
  Shape sa = a.shape(), sb = b.shape();
  return twice_differentiable(record(out, "sub", {a, b}, [sa, sb](const Tensor& g, const std::vector<bool>& n) {
    return std::vector<Tensor>{n[0] ? sum_to(g, sa) : Tensor(), n[1] ? sum_to(neg(g), sb) : Tensor()};
  }));
}

// mul and div keep only what their gradients read, as PyTorch: a only when b needs a
// gradient (so changing a in place after `y = a * w` with a constant w is no error).
Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = binary_raw(Op::mul, a, b);
  if (!any_requires_grad({a, b})) return out;
  const Tensor sa = b.requires_grad() ? a : Tensor(), sb = a.requires_grad() ? b : Tensor();
  const Shape as = a.shape(), bs = b.shape();
  return twice_differentiable(record(out, "mul", {a, b}, {sa, sb}, [sa, sb, as, bs](const Tensor& g,
                                                                                   const std::vector<bool>& n) {
    return std::vector<Tensor>{n[0] ? sum_to(g * sb, as) : Tensor(), n[1] ? sum_to(g * sa, bs) : Tensor()};
  }));
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = binary_raw(Op::div, a, b);
  if (!any_requires_grad({a, b})) return out;
  const Tensor sa = b.requires_grad() ? a : Tensor();
  const Shape as = a.shape();
  return twice_differentiable(record(out, "div", {a, b}, {sa, b}, [sa, b, as](const Tensor& g,
                                                                             const std::vector<bool>& n) {
    Tensor ga, gb;
    if (n[0]) ga = sum_to(g / b, as);
    if (n[1]) gb = sum_to(neg(g) * ((sa / b) / b), b.shape());  // PyTorch's order: b * b over- or underflows
    return std::vector<Tensor>{ga, gb};
  }));
}

Tensor pow(const Tensor& a, const Tensor& b) {
  Tensor out = binary_raw(Op::pow, a, b);
  Tensor yd = out.detach();
  auto backward = [a, b, yd](const Tensor& g, const std::vector<bool>& n) {
    Tensor ga, gb;
    // PyTorch's conventions: d a^b / da = b a^(b-1) is 0 where b == 0 (also at a == 0, where
    // 0 * 0^-1 would be NaN); d a^b / db = a^b log a is 0 where a == 0 and b >= 0 (and
    // 0^b log 0 = inf * -inf = -inf where b < 0)
    const Tensor z = zeros({}, {.dtype = g.dtype(), .device = g.device()});
    if (n[0]) ga = sum_to(where(eq(b, 0.0), z, g * b * pow(a, b - 1.0)), a.shape());
    if (n[1]) {
      const Tensor full = g * saved_output(yd) * log(a.to(yd.dtype()));  // log in the result's precision
      gb = sum_to(where(eq(a, 0.0), where(ge(b, 0.0), z, full), full), b.shape());
    }
    return std::vector<Tensor>{ga, gb};
  };
  return twice_differentiable(record(out, "pow", {a, b}, {a, b, yd}, backward));
}

static Tensor max_min(Op op, const Tensor& a, const Tensor& b) {
  Tensor out = binary_raw(op, a, b);
  Tensor ad = a.detach(), bd = b.detach();  // only compared: constants of the backward
  auto backward = [op, ad, bd](const Tensor& g, const std::vector<bool>& n) {
    // PyTorch's rule: ties split the gradient evenly; otherwise the losing operand gets 0 and
    // the other all of it, so a NaN (neither wins nor ties) gives g to both
    const Tensor win_a = op == Op::maximum ? gt(ad, bd) : lt(ad, bd);
    const Tensor win_b = op == Op::maximum ? lt(ad, bd) : gt(ad, bd);
    const Tensor z = zeros({}, {.dtype = g.dtype(), .device = g.device()});
    const Tensor half = where(eq(ad, bd), g * 0.5, g);
    Tensor ga, gb;
    if (n[0]) ga = sum_to(where(win_b, z, half), ad.shape());
    if (n[1]) gb = sum_to(where(win_a, z, half), bd.shape());
    return std::vector<Tensor>{ga, gb};
  };
  return twice_differentiable(record(out, op_name(op), {a, b}, {ad, bd}, backward));
}
Tensor maximum(const Tensor& a, const Tensor& b) { return max_min(Op::maximum, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return max_min(Op::minimum, a, b); }

// fmod and remainder: a - b * q with q = trunc(a / b) or floor_divide(a, b), so d/da = 1 and
// d/db = -q (PyTorch's derivatives; q is piecewise constant, so twice differentiable with 0).
static Tensor rounded_remainder(Op op, const Tensor& a, const Tensor& b) {
  Tensor out = binary_raw(op, a, b);
  if (!any_requires_grad({a, b})) return out;
  const Tensor ad = a.detach(), bd = b.detach();  // q's inputs: constants of the backward
  auto backward = [op, ad, bd](const Tensor& g, const std::vector<bool>& n) {
    Tensor ga, gb;
    if (n[0]) ga = sum_to(g, ad.shape());
    if (n[1]) {
      const Tensor q = op == Op::fmod ? trunc(div(ad, bd)) : floor_divide(ad, bd);
      gb = sum_to(neg(g) * q.to(g.dtype()), bd.shape());
    }
    return std::vector<Tensor>{ga, gb};
  };
  return twice_differentiable(record(out, op_name(op), {a, b}, {ad, bd}, backward));
}
Tensor fmod(const Tensor& a, const Tensor& b) { return rounded_remainder(Op::fmod, a, b); }
Tensor remainder(const Tensor& a, const Tensor& b) { return rounded_remainder(Op::remainder, a, b); }
Tensor floor_divide(const Tensor& a, const Tensor& b) { return binary_raw(Op::floor_divide, a, b); }
Tensor fmod(const Tensor& a, double b) { return fmod(a, scalar_like(a, b)); }
Tensor remainder(const Tensor& a, double b) { return remainder(a, scalar_like(a, b)); }
Tensor floor_divide(const Tensor& a, double b) { return floor_divide(a, scalar_like(a, b)); }

Tensor hypot(const Tensor& a, const Tensor& b) {
  Tensor out = binary_raw(Op::hypot, a, b);
  if (!any_requires_grad({a, b})) return out;
  const Tensor yd = out.detach();
  auto backward = [a, b, yd](const Tensor& g, const std::vector<bool>& n) {  // PyTorch's g * a / hypot(a, b)
    const Tensor y = saved_output(yd);
    Tensor ga, gb;
    if (n[0]) ga = sum_to(div(mul(g, a), y), a.shape());
    if (n[1]) gb = sum_to(div(mul(g, b), y), b.shape());
    return std::vector<Tensor>{ga, gb};
  };
  return twice_differentiable(record(out, "hypot", {a, b}, {a, b, yd}, backward));
}

Tensor logaddexp(const Tensor& a, const Tensor& b) {
  KILN_CHECK(a.defined() && b.defined(), "logaddexp: an input is undefined");
  check_floating("logaddexp", a, "a");
  check_floating("logaddexp", b, "b");
  // PyTorch's: max(a, b) + log1p(exp(-|a - b|)), and a itself where a == b is infinite
  const Tensor m = maximum(a, b);
  const Tensor r = add(m, log1p(exp(neg(abs(sub(a, b))))));
  return where(logical_and(isinf(a), eq(a, b)), a, r);
}

Tensor logaddexp2(const Tensor& a, const Tensor& b) {
  KILN_CHECK(a.defined() && b.defined(), "logaddexp2: an input is undefined");
  check_floating("logaddexp2", a, "a");
  check_floating("logaddexp2", b, "b");
  // PyTorch's: max(a, b) + log1p(2^-|a - b|) / ln 2, and a itself where a == b is infinite
  const Tensor r = add(maximum(a, b), mul(log1p(exp2(neg(abs(sub(a, b))))), 1.0 / math::kLn2));
  return where(logical_and(isinf(a), eq(a, b)), a, r);
}

// xlogy's and xlog1py's value (PyTorch's): 0 where x == 0 (unless y is NaN), else x log(y) or
// x log1p(y); y is replaced by 1 (or 0) in the masked places, which keeps 0 * -inf out.
static Tensor xlog_value(const char* name, const Tensor& x, const Tensor& y, bool one_plus) {
  KILN_CHECK(x.defined() && y.defined(), name, ": an input is undefined");
  NoGradGuard ng;
  const Tensor zero_x = logical_and(eq(x, 0.0), logical_not(isnan(y)));
  Tensor yf = y;
  if (!yf.is_floating_point()) yf = yf.to(x.is_floating_point() ? x.dtype() : DType::float32);
  const Tensor neutral = full({}, one_plus ? 0.0 : 1.0, {.dtype = yf.dtype(), .device = yf.device()});
  const Tensor safe = where(zero_x, neutral, yf);
  const Tensor r = mul(x, one_plus ? log1p(safe) : log(safe));
  return where(zero_x, zeros({}, {.dtype = r.dtype(), .device = r.device()}), r);
}

Tensor xlog1py(const Tensor& x, const Tensor& y) {
  Tensor out = xlog_value("xlog1py", x, y, true);
  if (!any_requires_grad({x, y})) return out;
  // PyTorch's derivatives: d/dx = xlog1py(g, y), 0 where x == 0 and y <= -1; d/dy = g x / (1 + y)
  auto backward = [x, y](const Tensor& g, const std::vector<bool>& n) {
    Tensor gx, gy;
    if (n[0]) gx = sum_to(where(logical_and(eq(x, 0.0), le(y, -1.0)), 0.0, xlog1py(g, y)), x.shape());
    if (n[1]) gy = sum_to(div(mul(g, x), add(y, 1.0)), y.shape());
    return std::vector<Tensor>{gx, gy};
  };
  return twice_differentiable(record(out, "xlog1py", {x, y}, {x, y}, backward));
}

Tensor xlogy(const Tensor& x, const Tensor& y) {
  Tensor out = xlog_value("xlogy", x, y, false);
  if (!any_requires_grad({x, y})) return out;
  // PyTorch's derivatives: d/dx = log(y), also where x == 0, except 0 where x and y are both
  // 0; d/dy = x / y (NaN at 0 / 0)
  auto backward = [x, y](const Tensor& g, const std::vector<bool>& n) {
    Tensor gx, gy;
    if (n[0]) gx = sum_to(mul(g, xlogy(logical_or(ne(x, 0.0), ne(y, 0.0)).to(g.dtype()), y)), x.shape());
    if (n[1]) gy = sum_to(div(mul(g, x), y), y.shape());
    return std::vector<Tensor>{gx, gy};
  };
  return twice_differentiable(record(out, "xlogy", {x, y}, {x, y}, backward));
}

Tensor atan2(const Tensor& y, const Tensor& x) {
  Tensor out = binary_raw(Op::atan2, y, x);
  if (!any_requires_grad({y, x})) return out;
  auto backward = [y, x](const Tensor& g, const std::vector<bool>& n) {
    // PyTorch's: 1 / (y^2 + x^2), taken as 0 at the origin (where it would be inf)
    const Tensor denom = add(mul(y, y), mul(x, x));
    const Tensor z = zeros({}, {.dtype = denom.dtype(), .device = denom.device()});
    const Tensor recip = where(eq(denom, 0.0), z, reciprocal(denom));
    Tensor gy, gx;
    if (n[0]) gy = sum_to(mul(mul(g, x), recip), y.shape());
    if (n[1]) gx = sum_to(mul(mul(g, neg(y)), recip), x.shape());
    return std::vector<Tensor>{gy, gx};
  };
  return twice_differentiable(record(out, "atan2", {y, x}, {y, x}, backward));
}

Tensor add(const Tensor& a, double b) { return add(a, scalar_like(a, b)); }
Tensor sub(const Tensor& a, double b) { return sub(a, scalar_like(a, b)); }
// mul and div keep a C++ scalar beside a 16-bit tensor in float32, as PyTorch's opmath does:
// bf16 x * 0.1 is x * 0.1f rounded once, not x * bf16(0.1) = x * 0.10009766 (a bias). On the
// CPU every 16-bit binary op computes in float32 anyway; a CUDA kernel computes in the
// tensor's dtype, so a scalar that dtype cannot hold takes the float32 path there. add and sub
// round the scalar to the tensor's dtype, as PyTorch's do.
/// v rounded to float32 or a 16-bit dtype (dt float32, float16 or bfloat16), as its conversion does.
static double round_to_dtype(DType dt, double v) {
  const float f = float(v);
  return dt == DType::float16 ? round_to_half(f) : dt == DType::bfloat16 ? round_to_bf16(f) : f;
}
static bool exact_in_half(DType dt, double v) { return std::isnan(v) || round_to_dtype(dt, v) == v; }
static Tensor product_with_scalar(Op op, const Tensor& a, double b) {
  if (!is_half(a.dtype())) return op == Op::mul ? mul(a, scalar_like(a, b)) : div(a, scalar_like(a, b));
  if (!a.is_cpu() && !exact_in_half(a.dtype(), b)) return product_with_scalar(op, a.to(DType::float32), b).to(a.dtype());
  Tensor s = full({}, b, {.dtype = DType::float32, .device = a.device()});
  s.impl().wrapped_number = true;  // float32[0-dim] beside a 16-bit 0-dim tensor keeps the 16 bits
  return op == Op::mul ? mul(a, s) : div(a, s);
}
Tensor mul(const Tensor& a, double b) { return product_with_scalar(Op::mul, a, b); }
Tensor div(const Tensor& a, double b) { return product_with_scalar(Op::div, a, b); }
Tensor operator/(double a, const Tensor& b) { return div(scalar_like(b, a), b); }
Tensor operator-(double a, const Tensor& b) { return sub(scalar_like(b, a), b); }  // not -b + a: -b wraps uint8

Tensor pow(const Tensor& a, double e) {
  KILN_CHECK(a.is_floating_point() || !(e < 0 && e == std::floor(e)), "pow: integers to negative integer powers "
             "are not allowed (", describe(a), " to the power ", e, "); convert the tensor to a float dtype first");
  if (!a.is_floating_point()) return pow(a, scalar_like(a, e));  // integers: exact, or float32
  if (a.dtype() != DType::float64) {  // PyTorch converts the exponent to the tensor's dtype first
    const double r = round_to_dtype(a.dtype(), e);
    KILN_CHECK(!std::isfinite(e) || std::isfinite(r), "pow: the exponent ", e, " cannot be converted to ",
               dtype_name(a.dtype()), " (the dtype of the base, ", describe(a), ") without overflow");
    e = r;
  }
  return unary_op(Op::pow_scalar, a, e);
}
Tensor pow(double base, const Tensor& e) { return pow(scalar_like(e, base), e); }

// ---------------------------------------------------------------- unary

// The rows of ops/elementwise_ops.def whose api is `float` or `any`: Tensor name(x).
#define KILN_UNARY_API_float(name) \
  Tensor name(const Tensor& x) { check_floating(#name, x); return unary_op(Op::name, x); }
#define KILN_UNARY_API_any(name) \
  Tensor name(const Tensor& x) { return unary_op(Op::name, x); }
#define KILN_UNARY_API_own(name)
#define KILN_UNARY(name, Fn, reads, api) KILN_UNARY_API_##api(name)
#include "kiln/ops/elementwise_ops.def"
#undef KILN_UNARY
#undef KILN_UNARY_API_float
#undef KILN_UNARY_API_any
#undef KILN_UNARY_API_own

// ... and those with parameters (api `own`).
Tensor leaky_relu(const Tensor& x, double s) { check_floating("leaky_relu", x); return unary_op(Op::leaky_relu, x, s); }
Tensor elu(const Tensor& x, double alpha) { check_floating("elu", x); return unary_op(Op::elu, x, alpha); }
Tensor hardtanh(const Tensor& x, double min_val, double max_val) {
  check_floating("hardtanh", x);
  KILN_CHECK(min_val <= max_val, "hardtanh: min_val ", min_val, " is greater than max_val ", max_val);
  return unary_op(Op::hardtanh, x, min_val, max_val);
}
Tensor relu6(const Tensor& x) { return hardtanh(x, 0.0, 6.0); }
Tensor polygamma(int64_t n, const Tensor& x) {
  check_floating("polygamma", x);
  KILN_CHECK(n >= 0, "polygamma: the order n must be non-negative, got ", n);
  KILN_CHECK(n < (int64_t(1) << 24), "polygamma: the order n = ", n, " is too large");
  return unary_op(Op::polygamma, x, double(n));
}
Tensor mvlgamma(const Tensor& x, int64_t p) {
  check_floating("mvlgamma", x);
  KILN_CHECK(p >= 1, "mvlgamma: p must be at least 1, got ", p);
  KILN_CHECK(all(gt(x, 0.5 * double(p - 1))).item<bool>(), "mvlgamma: every element of ", describe(x),
             " must be greater than (p - 1) / 2 = ", 0.5 * double(p - 1));
  // PyTorch's: lgamma(x + [-(p - 1) / 2, ..., -1/2, 0]) summed over the new last dim
  const Tensor offsets = arange(-0.5 * double(p - 1), 0.25, 0.5, {.dtype = x.dtype(), .device = x.device()});
  const Tensor s = sum(lgamma(add(x.unsqueeze(-1), offsets)), {-1});
  return add(s, double(p) * double(p - 1) * std::log(math::kPi) * 0.25);
}
Tensor ndtr(const Tensor& x) {
  check_floating("ndtr", x);
  return mul(add(erf(mul(x, 0.70710678118654752440)), 1.0), 0.5);  // PyTorch's composition
}
Tensor deg2rad(const Tensor& x) {
  check_floating("deg2rad", x);
  return mul(x, 0.017453292519943295769236907684886127134428718885417);
}
Tensor rad2deg(const Tensor& x) {
  check_floating("rad2deg", x);
  return mul(x, 57.295779513082320876798154814105170332405472466564);
}
Tensor frac(const Tensor& x) {
  check_floating("frac", x);
  return sub(x, trunc(x));
}
Tensor gelu(const Tensor& x, GeluApprox approx) {
  check_floating("gelu", x);
  return unary_op(approx == GeluApprox::tanh ? Op::gelu_tanh : Op::gelu, x);
}
Tensor clamp(const Tensor& x, std::optional<double> lo, std::optional<double> hi) {
  check_floating("clamp", x);
  double l = lo ? *lo : -INFINITY, h = hi ? *hi : INFINITY;
  if (std::isnan(l) || std::isnan(h)) return add(mul(x, 0.0), NAN);  // PyTorch: all NaN, gradient 0
  KILN_CHECK(l <= h, "clamp: min ", l, " is greater than max ", h);
  return unary_op(Op::clamp, x, l, h);
}

// ---------------------------------------------------------------- selection

Tensor where(const Tensor& cond, const Tensor& a0, const Tensor& b0) {
  KILN_CHECK(cond.defined() && a0.defined() && b0.defined(), "where: undefined input tensor");
  check_same_device("where", {cond, a0, b0});
  KILN_CHECK(cond.dtype() == DType::bool_, "where: expected a bool condition, got ", dtype_name(cond.dtype()),
             shape_str(cond.shape()), " (compare it, e.g. ne(cond, 0), to make one)");
  DType dt = result_type(a0, b0);
  DType compute = a0.is_cpu() ? cpu_compute_dtype(dt) : dt;
  Tensor c = cond, a = a0.to(compute), b = b0.to(compute);
  Shape shape = broadcast_shapes(broadcast_shapes(c.shape(), a.shape(), "where"), b.shape(), "where");
  Tensor out = Tensor::empty(shape, compute, a.device());
  if (out.numel() > 0) kernel<WhereKernelFn>(Op::where, out.device())(compute, make_args(shape, {&out, &c, &a, &b}, "where"));
  out = out.to(dt);
  Tensor cd = c.detach();
  Shape sa = a0.shape(), sb = b0.shape();
  auto backward = [cd, sa, sb](const Tensor& g, const std::vector<bool>& n) {
    Tensor z = zeros({}, {.dtype = g.dtype(), .device = g.device()});
    return std::vector<Tensor>{n[0] ? sum_to(where(cd, g, z), sa) : Tensor(),
                               n[1] ? sum_to(where(cd, z, g), sb) : Tensor()};
  };
  return twice_differentiable(record(out, "where", {a0, b0}, {cd}, backward));
}

Tensor where(const Tensor& cond, const Tensor& a, double b) {
  KILN_CHECK(a.defined(), "where: undefined input tensor");
  return where(cond, a, scalar_like(a, b));
}
Tensor where(const Tensor& cond, double a, const Tensor& b) {
  KILN_CHECK(b.defined(), "where: undefined input tensor");
  return where(cond, scalar_like(b, a), b);
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  KILN_CHECK(x.defined() && mask.defined(), "masked_fill: undefined input tensor");
  KILN_CHECK(mask.dtype() == DType::bool_, "masked_fill: expected a bool mask, got ", dtype_name(mask.dtype()),
             shape_str(mask.shape()), " (compare it, e.g. ne(mask, 0), to make one)");
  Shape bs = broadcast_shapes(x.shape(), mask.shape(), "masked_fill");
  KILN_CHECK(bs == x.shape(), "masked_fill: mask of shape ", shape_str(mask.shape()),
             " does not broadcast to the input's shape ", shape_str(x.shape()));
  // full() refuses a value x's dtype cannot hold (NaN or out of range for an integer dtype)
  return where(mask, full({}, value, {.dtype = x.dtype(), .device = x.device()}), x);
}

// ---------------------------------------------------------------- comparisons

// The binary rows of ops/elementwise_ops.def whose result is bool_ (not differentiable).
#define KILN_BINARY_API_same(name)
#define KILN_BINARY_API_bool_(name)                                                     \
  Tensor name(const Tensor& a, const Tensor& b) { return binary_raw(Op::name, a, b); } \
  Tensor name(const Tensor& a, double b) { return binary_raw(Op::name, a, scalar_like(a, b)); }
#define KILN_BINARY(name, Fn, result) KILN_BINARY_API_##result(name)
#include "kiln/ops/elementwise_ops.def"
#undef KILN_BINARY
#undef KILN_BINARY_API_same
#undef KILN_BINARY_API_bool_

// ---------------------------------------------------------------- in-place (no autograd)

Tensor& Tensor::add_(const Tensor& other, double alpha) {
  KILN_CHECK(!(grad_mode_enabled() && requires_grad()), "add_: in-place change of a tensor that requires grad "
             "(shape ", shape_str(shape()), "); wrap it in kiln::NoGradGuard");
  check_no_internal_overlap(*this, "add_");
  NoGradGuard ng;
  bump_version();
  // alpha * other in the computation dtype (float32 for 16-bit operands, PyTorch's opmath),
  // not rounded to a 16-bit other's dtype first: no lost small increments, no overflow there
  Tensor o = other;
  if (alpha != 1.0) {
    if (is_floating_point() && other.is_floating_point())
      o = o.to(cpu_compute_dtype(promote_types(dtype(), other.dtype())));
    o = mul(o, alpha);
  }
  check_same_device("add_", {*this, o});
  broadcast_strides(o, shape(), "add_");
  KILN_CHECK(is_floating_point() || !o.is_floating_point(), "add_: cannot add a ", dtype_name(o.dtype()),
             " value (alpha ", alpha, ") into a ", dtype_name(dtype()), " tensor in place");
  if (partially_overlaps(o)) o = o.clone();  // o would be read after parts of it were written
  if (dtype() == o.dtype() && dtype() == cpu_compute_dtype(dtype()) && is_cpu()) {
    Tensor self = *this;
    kernel<BinaryKernelFn>(Op::add, device())(Op::add, dtype(), make_args(shape(), {&self, &self, &o}, "add_"));
  } else {
    copy_tensor(*this, add(*this, o).expand(shape()));
  }
  return *this;
}

Tensor& Tensor::mul_(double s) {
  KILN_CHECK(!(grad_mode_enabled() && requires_grad()), "mul_: in-place change of a tensor that requires grad "
             "(shape ", shape_str(shape()), "); wrap it in kiln::NoGradGuard");
  check_no_internal_overlap(*this, "mul_");
  NoGradGuard ng;
  Tensor sc = scalar_like(*this, s);
  KILN_CHECK(is_floating_point() || !sc.is_floating_point(), "mul_: cannot multiply a ", dtype_name(dtype()),
             " tensor in place by ", s, " (not a ", dtype_name(dtype()), " value)");
  sc = sc.to(dtype());
  bump_version();
  if (dtype() == cpu_compute_dtype(dtype()) && is_cpu()) {
    Tensor self = *this;
    kernel<BinaryKernelFn>(Op::mul, device())(Op::mul, dtype(), make_args(shape(), {&self, &self, &sc}, "mul_"));
  } else {
    copy_tensor(*this, mul(*this, s));
  }
  return *this;
}

// ---------------------------------------------------------------- tests, logic, lerp, nan_to_num

namespace {
/// x != 0 as bool (bool itself as it is: comparisons take no bool operand).
Tensor truth(const Tensor& x) { return x.dtype() == DType::bool_ ? x : ne(x, 0.0); }
/// The sum of two truth values, 0, 1 or 2, in uint8 (broadcast).
Tensor truth_count(const Tensor& a, const Tensor& b) {
  return add(truth(a).to(DType::uint8), truth(b).to(DType::uint8));
}
}  // namespace

Tensor isnan(const Tensor& x) {
  KILN_CHECK(x.defined(), "isnan: input is an undefined tensor");
  return x.is_floating_point() ? ne(x, x) : zeros(x.shape(), {.dtype = DType::bool_, .device = x.device()});
}
Tensor isinf(const Tensor& x) {
  KILN_CHECK(x.defined(), "isinf: input is an undefined tensor");
  return x.is_floating_point() ? eq(abs(x), std::numeric_limits<double>::infinity())
                               : zeros(x.shape(), {.dtype = DType::bool_, .device = x.device()});
}
Tensor isfinite(const Tensor& x) {
  KILN_CHECK(x.defined(), "isfinite: input is an undefined tensor");
  NoGradGuard ng;  // x - x is 0 exactly when x is finite
  return x.is_floating_point() ? eq(sub(x, x), 0.0) : ones(x.shape(), {.dtype = DType::bool_, .device = x.device()});
}
Tensor logical_not(const Tensor& x) {
  KILN_CHECK(x.defined(), "logical_not: input is an undefined tensor");
  return eq(x.dtype() == DType::bool_ ? x.to(DType::uint8) : x, 0.0);  // NaN != 0: true, so not false
}
Tensor logical_and(const Tensor& a, const Tensor& b) {
  KILN_CHECK(a.defined() && b.defined(), "logical_and: an input is an undefined tensor");
  return eq(truth_count(a, b), 2.0);
}
Tensor logical_or(const Tensor& a, const Tensor& b) {
  KILN_CHECK(a.defined() && b.defined(), "logical_or: an input is an undefined tensor");
  return gt(truth_count(a, b), 0.0);
}
Tensor logical_xor(const Tensor& a, const Tensor& b) {
  KILN_CHECK(a.defined() && b.defined(), "logical_xor: an input is an undefined tensor");
  return eq(truth_count(a, b), 1.0);
}
Tensor any(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  KILN_CHECK(x.defined(), "any: input is an undefined tensor");
  return gt(sum(truth(x), dims, keepdim), 0.0);
}
Tensor all(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  KILN_CHECK(x.defined(), "all: input is an undefined tensor");
  return eq(sum(logical_not(x), dims, keepdim), 0.0);
}

Tensor lerp(const Tensor& start, const Tensor& end, const Tensor& weight) {
  KILN_CHECK(start.defined() && end.defined() && weight.defined(), "lerp: an input is an undefined tensor");
  check_floating("lerp", start, "start");
  const Tensor diff = sub(end, start);
  return where(lt(abs(weight), 0.5), add(start, mul(weight, diff)), sub(end, mul(diff, 1.0 - weight)));
}
Tensor lerp(const Tensor& start, const Tensor& end, double weight) {
  KILN_CHECK(start.defined() && end.defined(), "lerp: an input is an undefined tensor");
  check_floating("lerp", start, "start");
  const Tensor diff = sub(end, start);
  return std::fabs(weight) < 0.5 ? add(start, mul(diff, weight)) : sub(end, mul(diff, 1.0 - weight));
}

Tensor nan_to_num(const Tensor& x, double nan, std::optional<double> posinf, std::optional<double> neginf) {
  KILN_CHECK(x.defined(), "nan_to_num: input is an undefined tensor");
  if (!x.is_floating_point()) return x.clone();
  const double big = x.dtype() == DType::float64   ? std::numeric_limits<double>::max()
                     : x.dtype() == DType::float32 ? double(std::numeric_limits<float>::max())
                     : x.dtype() == DType::float16 ? 65504.0
                                                   : 3.3895313892515355e38;  // bfloat16's largest
  const Tensor pos = full({}, posinf.value_or(big), {.dtype = x.dtype(), .device = x.device()});
  const Tensor neg_ = full({}, neginf.value_or(-big), {.dtype = x.dtype(), .device = x.device()});
  const Tensor nan_ = full({}, nan, {.dtype = x.dtype(), .device = x.device()});
  const double inf = std::numeric_limits<double>::infinity();
  return where(ne(x, x), nan_, where(eq(x, inf), pos, where(eq(x, -inf), neg_, x)));
}

}  // namespace kiln
