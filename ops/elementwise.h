// Elementwise ops with NumPy broadcasting, their scalar overloads and C++ operators.
// All differentiable float ops record their backward on the autograd tape.
#pragma once
#include <optional>
#include "kiln/core/tensor.h"

namespace kiln {

// ---- binary (broadcasting; result dtype by PyTorch's rule, result_type in ops/helpers.h:
//      promote_types, where a 0-dim operand only counts if its category is higher) ----
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
/// fmod: remainder of truncated division, the sign of a (C's fmod, torch.fmod); remainder:
/// Python's %, the sign of b (torch.remainder, `a % b`); floor_divide: division rounded toward
/// -inf (torch.floor_divide, Python's //). Integers stay integers, and an integer division by
/// zero is a kiln::Error (PyTorch: ZeroDivisionError; a check that reads back from a GPU);
/// floating-point ones give NaN or inf as PyTorch's do. Gradients, as PyTorch's: fmod and
/// remainder pass g to a and give b -g * trunc(a / b) and -g * floor_divide(a, b);
/// floor_divide is not differentiable (its result is a constant; PyTorch raises at backward).
Tensor fmod(const Tensor& a, const Tensor& b);
Tensor remainder(const Tensor& a, const Tensor& b);
Tensor floor_divide(const Tensor& a, const Tensor& b);
/// atan2(y, x): the angle of (x, y) in (-pi, pi] (integers become float32); the gradient is
/// g * x / (x^2 + y^2) for y and -g * y / (x^2 + y^2) for x, 0 at the origin (PyTorch's).
Tensor atan2(const Tensor& y, const Tensor& x);
/// sqrt(a^2 + b^2) without intermediate overflow (C's hypot; integers become float32); the
/// gradient g a / hypot and g b / hypot (NaN at the origin, as PyTorch's).
Tensor hypot(const Tensor& a, const Tensor& b);
/// log(exp(a) + exp(b)) without overflow (PyTorch's formula; inf where both are the same inf).
Tensor logaddexp(const Tensor& a, const Tensor& b);
/// x log(y), 0 where x == 0 (even at y = 0 or inf; NaN where y is NaN), as torch.xlogy; its
/// gradients are PyTorch's: log(y) for x (also at x == 0; 0 where x and y are both 0) and
/// x / y for y.
Tensor xlogy(const Tensor& x, const Tensor& y);
// scalar forms, PyTorch's wrapped numbers: beside a float tensor the scalar takes its dtype;
// beside an integer tensor a whole number is an integer (converted, wrapping, to the
// computation's dtype: uint8 + -3 wraps like PyTorch's, uint8 / -3 is -1), anything else
// (a fraction, inf, NaN, beyond int64) makes the result float32
Tensor add(const Tensor& a, double b);
Tensor sub(const Tensor& a, double b);
Tensor mul(const Tensor& a, double b);
Tensor div(const Tensor& a, double b);
/// pow of integer tensors stays integer and exact (PyTorch's rules: a negative scalar exponent
/// is an error; a tensor exponent's negative entries give 0 except for bases 1 and -1); a
/// fractional exponent makes it float32.
Tensor pow(const Tensor& a, double exponent);
Tensor pow(double base, const Tensor& exponent);
Tensor fmod(const Tensor& a, double b);
Tensor remainder(const Tensor& a, double b);
Tensor floor_divide(const Tensor& a, double b);

// ---- unary ----
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
enum class GeluApprox { none, tanh };
/// GELU: x * Phi(x) (erf form) or the tanh approximation (GPT-2's).
Tensor gelu(const Tensor& x, GeluApprox approx = GeluApprox::none);
Tensor silu(const Tensor& x);
/// log(1 + e^x) (PyTorch's softplus with beta 1, threshold 20: x itself above 20).
Tensor softplus(const Tensor& x);
/// log(sigmoid(x)) without overflow: min(x, 0) - log1p(e^-|x|) (PyTorch's logsigmoid).
Tensor log_sigmoid(const Tensor& x);
/// log(1 + x) and e^x - 1, accurate near 0 (libm's log1p / expm1).
Tensor log1p(const Tensor& x);
Tensor expm1(const Tensor& x);
/// x above 0, alpha (e^x - 1) at or below (PyTorch's elu); selu is scale elu(x, alpha) with
/// PyTorch's fixed alpha 1.6733 and scale 1.0507.
Tensor elu(const Tensor& x, double alpha = 1.0);
Tensor selu(const Tensor& x);
/// x clamped to [min_val, max_val] with PyTorch's hardtanh gradient (0 at the bounds, where
/// clamp passes it); relu6 is hardtanh(x, 0, 6).
Tensor hardtanh(const Tensor& x, double min_val = -1.0, double max_val = 1.0);
Tensor relu6(const Tensor& x);
/// relu6(x + 3) / 6 and x relu6(x + 3) / 6 (MobileNetV3's hard sigmoid and hard swish).
Tensor hardsigmoid(const Tensor& x);
Tensor hardswish(const Tensor& x);
/// floor, ceil, trunc, round (half to even) and sign (0 at 0 and NaN) as PyTorch's: integer
/// inputs come back as they are; the gradient is 0 everywhere.
Tensor floor(const Tensor& x);
Tensor ceil(const Tensor& x);
Tensor trunc(const Tensor& x);
Tensor round(const Tensor& x);
Tensor sign(const Tensor& x);
/// PyTorch's math with its gradients (twice differentiable): 1 / x, x * x (integers too), tan,
/// atan, asin, acos (their gradient is inf at +-1, NaN outside, as PyTorch's), sinh, cosh,
/// erf, erfc, 2^x, log2, log10.
Tensor reciprocal(const Tensor& x);
Tensor square(const Tensor& x);
Tensor tan(const Tensor& x);
Tensor atan(const Tensor& x);
Tensor asin(const Tensor& x);
Tensor acos(const Tensor& x);
Tensor sinh(const Tensor& x);
Tensor cosh(const Tensor& x);
Tensor erf(const Tensor& x);
Tensor erfc(const Tensor& x);
Tensor exp2(const Tensor& x);
Tensor log2(const Tensor& x);
Tensor log10(const Tensor& x);
/// Clamps to [min, max]; either bound may be absent; min > max throws. The gradient is 1
/// strictly inside the bounds and 0 at a bound, beyond it and at NaN (PyTorch 2.x's rule);
/// a NaN bound makes every element NaN (gradient 0), as in PyTorch.
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max);

// ---- special functions (torch.* and torch.special.*): PyTorch's algorithms (ops/special_math.h,
// the same code on both devices) and gradients, floating-point inputs ----
/// Inverse hyperbolic functions; gradients g / sqrt(x^2 + 1), g / sqrt(x^2 - 1), g / (1 - x^2).
Tensor asinh(const Tensor& x);
Tensor acosh(const Tensor& x);
Tensor atanh(const Tensor& x);
/// log |Gamma(x)| (torch.lgamma, special.gammaln); digamma = d lgamma / dx (special.psi: -inf at
/// +0, +inf at -0, NaN at the negative integers); polygamma(n, x), digamma's n-th derivative
/// (n >= 0). Each one's gradient is the next (polygamma(n + 1)), so all are twice differentiable.
Tensor lgamma(const Tensor& x);
Tensor digamma(const Tensor& x);
Tensor polygamma(int64_t n, const Tensor& x);
/// The multivariate log-gamma function of dimension p >= 1 (torch.mvlgamma, special.multigammaln):
/// sum over i < p of lgamma(x - i / 2), plus p (p - 1) / 4 log(pi); every x must exceed (p - 1) / 2.
Tensor mvlgamma(const Tensor& x, int64_t p);
/// The inverse error function on [-1, 1] (+-inf at +-1, NaN outside); gradient (sqrt(pi) / 2) e^(y^2).
Tensor erfinv(const Tensor& x);
/// Modified Bessel functions of the first kind, orders 0 and 1 (torch.i0, special.i0/i1), and
/// their exponentially scaled forms exp(-|x|) I(x) (special.i0e/i1e), which do not overflow.
Tensor i0(const Tensor& x);
Tensor i0e(const Tensor& x);
Tensor i1(const Tensor& x);
Tensor i1e(const Tensor& x);
/// The standard normal's CDF (special.ndtr: (1 + erf(x / sqrt 2)) / 2, PyTorch's formula, so it
/// is 0 below about -8.3), its inverse (special.ndtri, on [0, 1]) and its log (special.log_ndtr,
/// accurate far into the lower tail: -5000.9 at x = -100).
Tensor ndtr(const Tensor& x);
Tensor ndtri(const Tensor& x);
Tensor log_ndtr(const Tensor& x);
/// sin(pi x) / (pi x), 1 at 0 (torch.sinc, the normalised sinc).
Tensor sinc(const Tensor& x);
/// -x log x, 0 at 0, -inf below 0 (special.entr); gradient -(1 + log x) g.
Tensor entr(const Tensor& x);
/// x tanh(softplus(x)) (Misra's mish, torch.nn.functional.mish).
Tensor mish(const Tensor& x);
/// x log1p(y), 0 where x == 0 unless y is NaN (torch.xlog1py / special.xlog1py); gradients as
/// PyTorch's: log1p(y) for x (0 where x == 0 and y <= -1), x / (1 + y) for y.
Tensor xlog1py(const Tensor& x, const Tensor& y);
/// log2(2^a + 2^b) without overflow (torch.logaddexp2).
Tensor logaddexp2(const Tensor& a, const Tensor& b);
/// x pi / 180, x 180 / pi, and x - trunc(x) (gradient 1).
Tensor deg2rad(const Tensor& x);
Tensor rad2deg(const Tensor& x);
Tensor frac(const Tensor& x);

// ---- selection ----
/// cond ? a : b, broadcasting all three; cond must be bool (as in PyTorch).
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
/// The same with a C++ number on one side, as the arithmetic ops' scalars: the tensor's dtype,
/// or float32 for a fraction (or inf, NaN) beside an integer tensor (where(mask, x, 0.0)).
Tensor where(const Tensor& cond, const Tensor& a, double b);
Tensor where(const Tensor& cond, double a, const Tensor& b);
/// x with value where mask is true (a bool mask broadcast to x's shape, as in PyTorch).
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);

// ---- comparisons (not differentiable; bool result) ----
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, double b);
Tensor ne(const Tensor& a, double b);
Tensor lt(const Tensor& a, double b);
Tensor le(const Tensor& a, double b);
Tensor gt(const Tensor& a, double b);
Tensor ge(const Tensor& a, double b);

// ---- tests and logic (compositions of the comparisons; bool results) ----
/// NaN, +-inf, finite entries (integers: never NaN or inf).
Tensor isnan(const Tensor& x);
Tensor isinf(const Tensor& x);
Tensor isfinite(const Tensor& x);
/// Entries read as truth values (nonzero, NaN included, is true), broadcasting as PyTorch's.
Tensor logical_not(const Tensor& x);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_xor(const Tensor& a, const Tensor& b);
/// Whether any / all entries over dims (all when empty) are true (nonzero).
Tensor any(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor all(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);

/// start + weight (end - start), as PyTorch: from the end, end - (end - start)(1 - weight), where
/// |weight| >= 0.5. Differentiable in all three.
Tensor lerp(const Tensor& start, const Tensor& end, const Tensor& weight);
Tensor lerp(const Tensor& start, const Tensor& end, double weight);
/// NaN, +inf and -inf replaced by nan, posinf and neginf (by default 0 and the dtype's largest
/// and lowest finite values); the gradient is 0 at the replaced entries. Integers as they are.
Tensor nan_to_num(const Tensor& x, double nan = 0.0, std::optional<double> posinf = std::nullopt,
                  std::optional<double> neginf = std::nullopt);

// ---- operators ----
inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator-(const Tensor& a) { return neg(a); }
inline Tensor operator+(const Tensor& a, double b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, double b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, double b) { return div(a, b); }
inline Tensor operator%(const Tensor& a, const Tensor& b) { return remainder(a, b); }  // Python's %
inline Tensor operator%(const Tensor& a, double b) { return remainder(a, b); }
inline Tensor operator+(double a, const Tensor& b) { return add(b, a); }
Tensor operator-(double a, const Tensor& b);
inline Tensor operator*(double a, const Tensor& b) { return mul(b, a); }
Tensor operator/(double a, const Tensor& b);
inline Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
inline Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
inline Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
inline Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
inline Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
inline Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
inline Tensor operator==(const Tensor& a, double b) { return eq(a, b); }
inline Tensor operator!=(const Tensor& a, double b) { return ne(a, b); }
inline Tensor operator<(const Tensor& a, double b) { return lt(a, b); }
inline Tensor operator<=(const Tensor& a, double b) { return le(a, b); }
inline Tensor operator>(const Tensor& a, double b) { return gt(a, b); }
inline Tensor operator>=(const Tensor& a, double b) { return ge(a, b); }

}  // namespace kiln
