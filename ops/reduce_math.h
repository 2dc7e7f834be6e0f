// Scalar math of the reduce and loss families shared by CPU loops and CUDA kernels:
// max/min selection with NaN propagation, the logsumexp finish and a vectorizable exp.
// T is float, double or an integer type.
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include "core/macros.h"

namespace kiln::math {

/// True when x should replace the running best of a max (IsMax) or min reduction.
/// NaN wins over numbers (and the first NaN is kept); ties keep the earlier element.
template <bool IsMax, class T> KILN_HD_INLINE bool reduce_better(T x, T best) {
  if constexpr (std::is_floating_point_v<T>) {
    if (x != x) return best == best;
  }
  if constexpr (IsMax) return x > best;
  else return x < best;
}

/// logsumexp from the maximum m and s = sum(exp(x - m)); m itself when m is not finite
/// (all -inf gives -inf, any +inf gives +inf, NaN stays NaN).
template <class T> KILN_HD_INLINE T logsumexp_finish(T m, T s) {
#ifndef __CUDACC__
  using std::isfinite;
  using std::log;
#endif
  return isfinite(m) ? m + log(s) : m;
}

/// exp for float, branch-free so that CPU loops over it vectorize (Cephes polynomial after
/// a round-to-nearest range reduction; within 2 ulp of exp). Exactly 0 below -87.33 (so
/// exp(-inf) = 0 for masked scores), +inf above 88 (exp overflows at 88.72; softmax-family
/// arguments are <= 0), NaN propagates. Relies on IEEE float semantics: do not build with
/// -ffast-math (it would fold the rounding trick away).
KILN_HD_INLINE float fast_exp(float x) {
#ifdef __CUDA_ARCH__
  return __expf(x);
#else
  const float hi = 88.0f, lo = -87.33654475f;
  float r = x > hi ? hi : x;
  r = r < lo ? lo : r;
  const float n = (r * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round(r / ln 2)
  r = r - n * 0.693359375f + n * 2.12194440e-4f;                              // r - n ln 2, in two parts
  const float y = (((((1.9875691500e-4f * r + 1.3981999507e-3f) * r + 8.3334519073e-3f) * r + 4.1665795894e-2f) * r +
                    1.6666665459e-1f) * r + 5.0000001201e-1f) * (r * r) + r + 1.0f;
  const float scale = std::bit_cast<float>((int32_t(n) + 127) << 23);  // 2^n
  float out = y * scale;
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

}  // namespace kiln::math
