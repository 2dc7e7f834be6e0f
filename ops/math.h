// Scalar math shared by CPU loops and CUDA kernels: one __host__ __device__ functor per
// elementwise op, forward and derivative. The CPU tests therefore check the exact
// formulas the GPU runs. T is float or double.
// Transcendentals go through the overloads below, never through an unqualified exp/tanh:
// those resolve to the C library's double versions and turn every float op into a slow
// double libm call. float uses branch-free versions that CPU loops vectorise.
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>
#include "kiln/core/macros.h"

namespace kiln::math {

/// exp for float, branch-free so that CPU loops over it vectorize (Cephes polynomial after
/// a round-to-nearest range reduction; within 1.01 ulp of exp over every float, checked
/// against libm's double exp). Finite up to the last float below ln(FLT_MAX) = 88.7228,
/// +inf above; subnormal results down to -103.97, exactly 0 below (so exp(-inf) = 0 for
/// masked scores); NaN propagates. 2^n is applied as two factors 2^(n/2) 2^(n - n/2), each
/// a normal float for n in [-150, 128], so the one rounding into the subnormal range
/// happens in the last multiply. Relies on IEEE float semantics: do not build with
/// -ffast-math (it would fold the rounding trick away).
KILN_HD_INLINE float fast_exp(float x) {
#ifdef __CUDA_ARCH__
  return __expf(x);
#else
  const float hi = 88.72283172607421875f, lo = -103.972084045410156f;
  float r = x > hi ? hi : x;
  r = r >= lo ? r : lo;  // NaN becomes lo here (its int conversion below would be UB); returned as NaN at the end
  const float n = (r * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round(r / ln 2)
  r = r - n * 0.693359375f + n * 2.12194440e-4f;                              // r - n ln 2, in two parts
  const float y = (((((1.9875691500e-4f * r + 1.3981999507e-3f) * r + 8.3334519073e-3f) * r + 4.1665795894e-2f) * r +
                    1.6666665459e-1f) * r + 5.0000001201e-1f) * (r * r) + r + 1.0f;
  const int32_t n1 = int32_t(n) >> 1, n2 = int32_t(n) - n1;  // 2^n = 2^n1 2^n2
  float out = (y * std::bit_cast<float>((n1 + 127) << 23)) * std::bit_cast<float>((n2 + 127) << 23);
  out = x > hi ? HUGE_VALF : out;
  out = x < lo ? 0.0f : out;
  return x != x ? x : out;
#endif
}
/// double: the libm exp (double paths are for gradient checks; accuracy first).
KILN_HD_INLINE double fast_exp(double x) {
#ifndef __CUDACC__
  using std::exp;
#endif
  return exp(x);
}

/// tanh for float, branch-free: an odd Taylor polynomial for |x| < 0.3 (no cancellation
/// near 0), 1 - 2 / (1 + exp(2|x|)) above, sign restored. Within a few ulp of tanhf.
KILN_HD_INLINE float fast_tanh(float x) {
#ifdef __CUDA_ARCH__
  return tanhf(x);
#else
  const float a = x < 0.0f ? -x : x;
  const float a2 = a * a;
  const float poly =
      a + a * a2 * (-0.333333333f + a2 * (0.133333333f + a2 * (-0.0539682540f + a2 * (0.0218694885f +
                                                                                        a2 * -0.00886323552f))));
  const float big = 1.0f - 2.0f / (1.0f + fast_exp(2.0f * a));
  const float t = a < 0.3f ? poly : big;
  return x != x ? x : (x < 0.0f ? -t : t);
#endif
}
KILN_HD_INLINE double fast_tanh(double x) { return ::tanh(x); }
KILN_HD_INLINE float m_exp(float x) { return fast_exp(x); }
KILN_HD_INLINE double m_exp(double x) { return ::exp(x); }
KILN_HD_INLINE float m_erf(float x) { return ::erff(x); }
KILN_HD_INLINE double m_erf(double x) { return ::erf(x); }
KILN_HD_INLINE float m_sqrt(float x) { return ::sqrtf(x); }
KILN_HD_INLINE double m_sqrt(double x) { return ::sqrt(x); }
KILN_HD_INLINE float m_log(float x) { return ::logf(x); }
KILN_HD_INLINE double m_log(double x) { return ::log(x); }
KILN_HD_INLINE float m_log1p(float x) { return ::log1pf(x); }
KILN_HD_INLINE double m_log1p(double x) { return ::log1p(x); }
KILN_HD_INLINE float m_expm1(float x) { return ::expm1f(x); }
KILN_HD_INLINE float m_floor(float x) { return ::floorf(x); }
KILN_HD_INLINE double m_floor(double x) { return ::floor(x); }
KILN_HD_INLINE float m_ceil(float x) { return ::ceilf(x); }
KILN_HD_INLINE double m_ceil(double x) { return ::ceil(x); }
KILN_HD_INLINE float m_trunc(float x) { return ::truncf(x); }
KILN_HD_INLINE double m_trunc(double x) { return ::trunc(x); }
/// Round half to even (the default rounding mode's rint, PyTorch's round).
KILN_HD_INLINE float m_rint(float x) { return ::rintf(x); }
KILN_HD_INLINE double m_rint(double x) { return ::rint(x); }
KILN_HD_INLINE double m_expm1(double x) { return ::expm1(x); }
KILN_HD_INLINE float m_sin(float x) { return ::sinf(x); }
KILN_HD_INLINE double m_sin(double x) { return ::sin(x); }
KILN_HD_INLINE float m_cos(float x) { return ::cosf(x); }
KILN_HD_INLINE double m_cos(double x) { return ::cos(x); }
KILN_HD_INLINE float m_tan(float x) { return ::tanf(x); }
KILN_HD_INLINE double m_tan(double x) { return ::tan(x); }
KILN_HD_INLINE float m_atan(float x) { return ::atanf(x); }
KILN_HD_INLINE double m_atan(double x) { return ::atan(x); }
KILN_HD_INLINE float m_asin(float x) { return ::asinf(x); }
KILN_HD_INLINE double m_asin(double x) { return ::asin(x); }
KILN_HD_INLINE float m_acos(float x) { return ::acosf(x); }
KILN_HD_INLINE double m_acos(double x) { return ::acos(x); }
KILN_HD_INLINE float m_sinh(float x) { return ::sinhf(x); }
KILN_HD_INLINE double m_sinh(double x) { return ::sinh(x); }
KILN_HD_INLINE float m_cosh(float x) { return ::coshf(x); }
KILN_HD_INLINE double m_cosh(double x) { return ::cosh(x); }
KILN_HD_INLINE float m_erfc(float x) { return ::erfcf(x); }
KILN_HD_INLINE double m_erfc(double x) { return ::erfc(x); }
KILN_HD_INLINE float m_exp2(float x) { return ::exp2f(x); }
KILN_HD_INLINE double m_exp2(double x) { return ::exp2(x); }
KILN_HD_INLINE float m_log2(float x) { return ::log2f(x); }
KILN_HD_INLINE double m_log2(double x) { return ::log2(x); }
KILN_HD_INLINE float m_log10(float x) { return ::log10f(x); }
KILN_HD_INLINE double m_log10(double x) { return ::log10(x); }
KILN_HD_INLINE float m_pow(float x, float y) { return ::powf(x, y); }
KILN_HD_INLINE double m_pow(double x, double y) { return ::pow(x, y); }
KILN_HD_INLINE float m_fmod(float x, float y) { return ::fmodf(x, y); }
KILN_HD_INLINE double m_fmod(double x, double y) { return ::fmod(x, y); }
KILN_HD_INLINE float m_atan2(float y, float x) { return ::atan2f(y, x); }
KILN_HD_INLINE double m_atan2(double y, double x) { return ::atan2(y, x); }
KILN_HD_INLINE float m_hypot(float x, float y) { return ::hypotf(x, y); }
KILN_HD_INLINE double m_hypot(double x, double y) { return ::hypot(x, y); }
KILN_HD_INLINE float m_copysign(float x, float y) { return ::copysignf(x, y); }
KILN_HD_INLINE double m_copysign(double x, double y) { return ::copysign(x, y); }
KILN_HD_INLINE float m_fabs(float x) { return ::fabsf(x); }
KILN_HD_INLINE double m_fabs(double x) { return ::fabs(x); }

/// selu's fixed alpha and scale (PyTorch's).
inline constexpr double kSeluAlpha = 1.6732632423543772848170429916717;
inline constexpr double kSeluScale = 1.0507009873554804934193349852946;
/// ln 2, ln 10 and 2 / sqrt(pi) (erf's derivative at 0), for the elementwise rows' gradients.
inline constexpr double kLn2 = 0.69314718055994530941723212145818;
inline constexpr double kLn10 = 2.3025850929940456840179914546844;
inline constexpr double kTwoOverSqrtPi = 1.1283791670955125738961589031215;

/// relu propagates NaN (as PyTorch): only x <= 0 becomes 0. Its derivative passes the
/// gradient everywhere but x <= 0 (PyTorch's threshold_backward), so it reads the same
/// from x or from relu(x).
template <class T> KILN_HD_INLINE T relu(T x) { return x <= T(0) ? T(0) : x; }
template <class T> KILN_HD_INLINE T relu_grad(T x) { return x <= T(0) ? T(0) : T(1); }
template <class T> KILN_HD_INLINE T leaky_relu(T x, T s) { return x > T(0) ? x : x * s; }
template <class T> KILN_HD_INLINE T leaky_relu_grad(T x, T s) { return x > T(0) ? T(1) : s; }
template <class T> KILN_HD_INLINE T sigmoid(T x) {
  // stable for large |x|
  if (x >= T(0)) { T z = m_exp(-x); return T(1) / (T(1) + z); }
  T z = m_exp(x);
  return z / (T(1) + z);
}
/// d sigmoid from the output y: y (1 - y)
template <class T> KILN_HD_INLINE T sigmoid_grad_from_y(T y) { return y * (T(1) - y); }
/// d tanh from the output y: 1 - y^2
template <class T> KILN_HD_INLINE T tanh_grad_from_y(T y) { return T(1) - y * y; }
template <class T> KILN_HD_INLINE T silu(T x) { return x * sigmoid(x); }
template <class T> KILN_HD_INLINE T silu_grad(T x) {
  T s = sigmoid(x);
  return s * (T(1) + x * (T(1) - s));
}
// GELU, erf form: x * 0.5 * (1 + erf(x / sqrt 2))
template <class T> KILN_HD_INLINE T gelu(T x) { return T(0.5) * x * (T(1) + m_erf(x * T(0.70710678118654752440))); }
template <class T> KILN_HD_INLINE T gelu_grad(T x) {
  T cdf = T(0.5) * (T(1) + m_erf(x * T(0.70710678118654752440)));
  T pdf = m_exp(T(-0.5) * x * x) * T(0.39894228040143267794);
  return cdf + x * pdf;
}
// GELU, tanh approximation (GPT-2): 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3).
// On the CPU as x sigmoid(2u), the same function (0.5 (1 + tanh u) = 1 / (1 + e^-2u)): one
// exp and one division instead of tanh's polynomial branch, exp and division (GELU was 7%
// of the GPT workload's step).
template <class T> KILN_HD_INLINE T gelu_tanh(T x) {
  T u = T(0.79788456080286535588) * (x + T(0.044715) * x * x * x);
#ifdef __CUDA_ARCH__
  return T(0.5) * x * (T(1) + fast_tanh(u));
#else
  return x / (T(1) + m_exp(T(-2) * u));
#endif
}
template <class T> KILN_HD_INLINE T gelu_tanh_grad(T x) {
  T u = T(0.79788456080286535588) * (x + T(0.044715) * x * x * x);
  T du = T(0.79788456080286535588) * (T(1) + T(3) * T(0.044715) * x * x);
#ifdef __CUDA_ARCH__
  T th = fast_tanh(u);
  return T(0.5) * (T(1) + th) + T(0.5) * x * (T(1) - th * th) * du;
#else
  T s = T(1) / (T(1) + m_exp(T(-2) * u));  // 0.5 (1 + tanh u); 1 - tanh^2 u = 4 s (1 - s)
  return s + T(2) * x * s * (T(1) - s) * du;
#endif
}
template <class T> KILN_HD_INLINE T rsqrt(T x) { return T(1) / m_sqrt(x); }
template <class T> KILN_HD_INLINE T sign(T x) { return x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0)); }
template <class T> KILN_HD_INLINE T clamp(T x, T lo, T hi) { return x < lo ? lo : (x > hi ? hi : x); }

}  // namespace kiln::math
