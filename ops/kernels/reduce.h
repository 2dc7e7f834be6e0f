// Kernel signatures of the reduce family (shared by the CPU and CUDA backends).
// Every reduction sees its input as a contiguous (outer, reduce, inner) block: the op
// permutes/copies the input so that kept dims are outer/inner and reduced dims the middle.
#pragma once
#include <cstdint>
#include <limits>
#include "kiln/core/dtype.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/reduce_math.h"

namespace kiln {

/// Arguments of one reduction over x viewed as (outer, reduce, inner) -> out (outer, inner).
///  - sum: out = sum over reduce (float in -> same float; integer/bool in -> int64 out)
///  - mean: sum / reduce (floating only)
///  - var, std: two-pass, divided by (reduce - correction) (floating only)
///  - logsumexp: max + log(sum(exp(x - max))) (floating only)
///  - max, min: values (dtype of x, may be null) and `indices` (first occurrence; NaN wins)
///  - argmax, argmin: only `indices`
///  - cumsum: out (outer, reduce, inner) = the running sum along reduce (backward = true: from
///    the end, the gradient); floating in -> same dtype (float32 accumulates in double),
///    integer/bool in -> int64 out. Not max/min's backward fields.
/// reduce == 0 gives sum 0, mean/var/std NaN, logsumexp -inf (max/min need reduce > 0).
/// Backward of max/min (backward = true, op max or min): dx (outer, reduce, inner) is zero
/// except dx[o, indices[o, i], i] = g[o, i].
struct ReduceArgs {
  int64_t outer = 1, reduce = 1, inner = 1;
  const void* x = nullptr;      // (outer, reduce, inner)
  void* out = nullptr;          // (outer, inner)
  int64_t* indices = nullptr;   // (outer, inner) max/min/argmax/argmin
  double correction = 1.0;      // var/std
  bool backward = false;
  const void* g = nullptr;      // (outer, inner) backward: gradient of the values
  void* dx = nullptr;           // (outer, reduce, inner) backward: gradient of x
};
/// `dt` is the dtype of x (float32/float64; integers and bool for sum/max/min/arg*).
using ReduceKernelFn = void(Op op, DType dt, const ReduceArgs& args);

/// softmax / log_softmax along the middle dim of a contiguous (outer, dim, inner) block.
/// Forward: out = y. Backward (backward = true): out = dx from y and g:
///   softmax:     dx = y * (g - sum_dim(g * y))
///   log_softmax: dx = g - exp(y) * sum_dim(g)
struct SoftmaxArgs {
  int64_t outer = 1, dim = 1, inner = 1;
  const void* x = nullptr;  // (outer, dim, inner) forward input
  const void* y = nullptr;  // (outer, dim, inner) backward: forward output
  const void* g = nullptr;  // (outer, dim, inner) backward: output gradient
  void* out = nullptr;      // (outer, dim, inner)
  bool backward = false;
};
/// `op` is Op::softmax or Op::log_softmax; `dt` float32 or float64.
using SoftmaxKernelFn = void(Op op, DType dt, const SoftmaxArgs& args);

// ---- CPU row helpers shared by the reduce and loss kernels (loops that vectorize) ----
namespace cpu {

/// Sum of n contiguous values with 8 independent accumulators of type A (double for
/// floating inputs, int64 for integers).
template <class T, class A>
inline A row_sum(const T* x, int64_t n) {
  A acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += A(x[i + j]);
  A s = 0;
  for (int j = 0; j < 8; ++j) s += acc[j];
  for (; i < n; ++i) s += A(x[i]);
  return s;
}

/// Maximum of n contiguous values (-inf when n == 0). A NaN may or may not be returned when
/// present (callers here propagate NaN anyway: exp(NaN - m) is NaN).
template <class T>
inline T row_max(const T* x, int64_t n) {
  T m = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : m)
  for (int64_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

/// sum(exp(x - m)) over n contiguous values, accumulated in double.
template <class T>
inline double row_sum_exp(const T* x, int64_t n, T m) {
  constexpr int64_t kBlock = 256;
  T buf[kBlock];
  double s = 0;
  for (int64_t i = 0; i < n; i += kBlock) {
    const int64_t w = n - i < kBlock ? n - i : kBlock;
    for (int64_t j = 0; j < w; ++j) buf[j] = math::fast_exp(x[i + j] - m);
    s += row_sum<T, double>(buf, w);
  }
  return s;
}

}  // namespace cpu

}  // namespace kiln
