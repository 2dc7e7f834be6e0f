// Scalar math of the reduce and loss families shared by CPU loops and CUDA kernels:
// max/min selection with NaN propagation and the logsumexp finish (fast_exp is in
// ops/math.h).
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

}  // namespace kiln::math
