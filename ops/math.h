// Scalar math shared by CPU loops and CUDA kernels: one __host__ __device__ functor per
// elementwise op, forward and derivative. The CPU tests therefore check the exact
// formulas the GPU runs. T is float or double.
#pragma once
#include <cmath>
#include "core/macros.h"

namespace kiln::math {

template <class T> KILN_HD_INLINE T relu(T x) { return x > T(0) ? x : T(0); }
template <class T> KILN_HD_INLINE T relu_grad(T x) { return x > T(0) ? T(1) : T(0); }
template <class T> KILN_HD_INLINE T leaky_relu(T x, T s) { return x > T(0) ? x : x * s; }
template <class T> KILN_HD_INLINE T leaky_relu_grad(T x, T s) { return x > T(0) ? T(1) : s; }
template <class T> KILN_HD_INLINE T sigmoid(T x) {
  // stable for large |x|
  if (x >= T(0)) { T z = exp(-x); return T(1) / (T(1) + z); }
  T z = exp(x);
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
template <class T> KILN_HD_INLINE T gelu(T x) { return T(0.5) * x * (T(1) + erf(x * T(0.70710678118654752440))); }
template <class T> KILN_HD_INLINE T gelu_grad(T x) {
  T cdf = T(0.5) * (T(1) + erf(x * T(0.70710678118654752440)));
  T pdf = exp(T(-0.5) * x * x) * T(0.39894228040143267794);
  return cdf + x * pdf;
}
// GELU, tanh approximation (GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
template <class T> KILN_HD_INLINE T gelu_tanh(T x) {
  T u = T(0.79788456080286535588) * (x + T(0.044715) * x * x * x);
  return T(0.5) * x * (T(1) + tanh(u));
}
template <class T> KILN_HD_INLINE T gelu_tanh_grad(T x) {
  T u = T(0.79788456080286535588) * (x + T(0.044715) * x * x * x);
  T th = tanh(u);
  T du = T(0.79788456080286535588) * (T(1) + T(3) * T(0.044715) * x * x);
  return T(0.5) * (T(1) + th) + T(0.5) * x * (T(1) - th * th) * du;
}
template <class T> KILN_HD_INLINE T rsqrt(T x) { return T(1) / sqrt(x); }
template <class T> KILN_HD_INLINE T sign(T x) { return x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0)); }
template <class T> KILN_HD_INLINE T clamp(T x, T lo, T hi) { return x < lo ? lo : (x > hi ? hi : x); }

}  // namespace kiln::math
