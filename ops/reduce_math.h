// Scalar math of the reduce and loss families shared by CPU loops and CUDA kernels:
// max/min selection with NaN propagation, the logsumexp finish and the cumulative sum of
// one line (fast_exp is in ops/math.h).
// T is float, double or an integer type.
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include "kiln/core/macros.h"
#include "kiln/ops/math.h"  // fast_exp

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

/// The cumulative sum of one line of R values `stride` apart, in order (reverse: from the
/// last, the gradient of a cumsum), accumulated in A and written as U after every step.
template <class A, class T, class U>
KILN_HD_INLINE void cumsum_line(const T* x, U* out, int64_t R, int64_t stride, bool reverse) {
  A acc = 0;
  for (int64_t k = 0; k < R; ++k) {
    const int64_t r = reverse ? R - 1 - k : k;
    acc += A(x[r * stride]);
    out[r * stride] = U(acc);
  }
}

}  // namespace kiln::math
