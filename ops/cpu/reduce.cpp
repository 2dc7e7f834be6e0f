// CPU kernels of the reduce family: sum/mean/var/std/logsumexp/max/min/argmax/argmin over a
// contiguous (outer, reduce, inner) block, softmax/log_softmax forward and backward, and
// their registration in the dispatch table.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>
#include "kiln/core/copy.h"
#include "kiln/core/parallel.h"
#include "kiln/ops/kernels/reduce.h"
#include "kiln/ops/reduce_math.h"

namespace kiln {

namespace {

constexpr int64_t kColBlock = 256;     // inner columns one task accumulates at once
constexpr int64_t kGrain = 32768;      // elements below which work runs on one thread
constexpr int64_t kSplitGrain = 65536; // elements above which few outputs are split over R
constexpr int64_t kSplitTasks = 16;    // ... when there are fewer (outer, column block) tasks than this

// ---------------------------------------------------------------- the reduction engine
//
// A policy P describes one reduction over x (outer O, reduce R, inner I):
//   using Acc;                                                 running state
//   Acc row(o, r0, r1)                                          I == 1: x[o, r0:r1] (contiguous)
//   void cols(Acc* acc, o, r0, r1, i0, w)                       I > 1: acc[j] over x[o, r0:r1, i0 + j]
//   static void merge(Acc& a, const Acc& b)                     b covers later r than a
//   void finish(o, i, const Acc& a)                             writes out[o, i]
// r1 > r0 always. The engine splits (o, column block) tasks across threads; when there are
// few tasks and much data (a full reduction), it also splits R into chunks whose partial
// states are merged in order (so "first occurrence" is kept).
template <class P>
void reduce_engine(const P& p, int64_t O, int64_t R, int64_t I) {
  using Acc = typename P::Acc;
  if (O == 0 || I == 0 || R == 0) return;
  const int64_t W = std::min<int64_t>(I, kColBlock);
  const int64_t nb = (I + W - 1) / W;
  const int64_t tasks = O * nb;
  // Few tasks over much data: split R too. The split depends only on the sizes (not on the
  // thread count), so results are bitwise the same for any number of threads.
  int64_t rc = 1;
  if (tasks < kSplitTasks && O * R * I >= kSplitGrain)
    rc = std::min<int64_t>(R, std::clamp<int64_t>(O * R * I / kGrain, 2, 64));
  std::vector<Acc> part;
  if (rc > 1) part.resize(size_t(rc * O * I));
  const int64_t items = tasks * rc;
  const int64_t per_item = std::max<int64_t>(1, (R / rc) * W);
  parallel_for(0, items, std::max<int64_t>(1, kGrain / per_item), [&](int64_t b, int64_t e) {
    Acc acc[kColBlock];
    for (int64_t it = b; it < e; ++it) {
      const int64_t t = it / rc, c = it % rc;
      const int64_t o = t / nb, i0 = (t % nb) * W, w = std::min(W, I - i0);
      const int64_t r0 = R * c / rc, r1 = R * (c + 1) / rc;
      if (I == 1) acc[0] = p.row(o, r0, r1);
      else p.cols(acc, o, r0, r1, i0, w);
      if (rc == 1) {
        for (int64_t j = 0; j < w; ++j) p.finish(o, i0 + j, acc[j]);
      } else {
        Acc* dst = part.data() + (c * O + o) * I + i0;
        for (int64_t j = 0; j < w; ++j) dst[j] = acc[j];
      }
    }
  });
  if (rc > 1) {
    const int64_t n = O * I;
    parallel_for(0, n, 4096, [&](int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k) {
        Acc a = part[size_t(k)];
        for (int64_t c = 1; c < rc; ++c) P::merge(a, part[size_t(c * n + k)]);
        p.finish(k / I, k % I, a);
      }
    });
  }
}

using cpu::row_sum;

/// row_sum over 16-bit values, widened 512 at a time (vectorised, core/copy.h): the same
/// sums in the same order as row_sum over the float32 copy, without making the copy.
template <class T>
double row_sum_widened(const T* x, int64_t n) {
  alignas(64) float buf[512];
  double acc[8] = {};
  const int64_t full = n / 8 * 8;
  for (int64_t i = 0; i < full; i += 512) {
    const int64_t m = std::min<int64_t>(512, full - i);  // a multiple of 8
    convert_floats(x + i, buf, m);
    for (int64_t k = 0; k < m; k += 8)
      for (int j = 0; j < 8; ++j) acc[j] += double(buf[k + j]);
  }
  double s = 0;
  for (int j = 0; j < 8; ++j) s += acc[j];
  for (int64_t i = full; i < n; ++i) s += double(float(x[i]));
  return s;
}

// sum / mean: out = sum * scale (scale unused for integers). 16-bit T (CPU only) accumulates
// its values widened, exactly as the float32 copy would, and rounds the result via float32.
template <class T, class A, class OutT>
struct SumPolicy {
  using Acc = A;
  const T* x;
  OutT* out;
  int64_t R, I;
  double scale;
  A row(int64_t o, int64_t r0, int64_t r1) const {
    if constexpr (kIs16<T>) return row_sum_widened(x + o * R + r0, r1 - r0);
    else return row_sum<T, A>(x + o * R + r0, r1 - r0);
  }
  void cols(A* acc, int64_t o, int64_t r0, int64_t r1, int64_t i0, int64_t w) const {
    for (int64_t j = 0; j < w; ++j) acc[j] = 0;
    for (int64_t r = r0; r < r1; ++r) {
      const T* xr = x + (o * R + r) * I + i0;  // (w)
      if constexpr (kIs16<T>) {
        alignas(64) float buf[kColBlock];
        convert_floats(xr, buf, w);
        for (int64_t j = 0; j < w; ++j) acc[j] += A(buf[j]);
      } else {
        for (int64_t j = 0; j < w; ++j) acc[j] += A(xr[j]);
      }
    }
  }
  static void merge(A& a, const A& b) { a += b; }
  void finish(int64_t o, int64_t i, const A& a) const {
    if constexpr (std::is_integral_v<A>) out[o * I + i] = OutT(a);
    else if constexpr (kIs16<OutT>) out[o * I + i] = OutT(float(a * scale));  // as .to(float32).to(OutT)
    else out[o * I + i] = OutT(a * scale);
  }
};

// sum of squared deviations from a per-output mean mu (O, I); out = ss / denom (sqrt for std)
template <class T>
struct SqDevPolicy {
  using Acc = double;
  const T* x;
  const double* mu;  // (O, I)
  T* out;
  int64_t R, I;
  double denom;
  bool take_sqrt;
  double row(int64_t o, int64_t r0, int64_t r1) const {
    const T* xr = x + o * R;
    const double m = mu[o];
    double acc[8] = {};
    int64_t r = r0;
    for (; r + 8 <= r1; r += 8)
      for (int j = 0; j < 8; ++j) {
        double d = double(xr[r + j]) - m;
        acc[j] += d * d;
      }
    double s = 0;
    for (int j = 0; j < 8; ++j) s += acc[j];
    for (; r < r1; ++r) {
      double d = double(xr[r]) - m;
      s += d * d;
    }
    return s;
  }
  void cols(double* acc, int64_t o, int64_t r0, int64_t r1, int64_t i0, int64_t w) const {
    const double* m = mu + o * I + i0;
    for (int64_t j = 0; j < w; ++j) acc[j] = 0;
    for (int64_t r = r0; r < r1; ++r) {
      const T* xr = x + (o * R + r) * I + i0;
      for (int64_t j = 0; j < w; ++j) {
        double d = double(xr[j]) - m[j];
        acc[j] += d * d;
      }
    }
  }
  static void merge(double& a, const double& b) { a += b; }
  void finish(int64_t o, int64_t i, const double& a) const {
    double v = a / denom;
    out[o * I + i] = T(take_sqrt ? std::sqrt(v) : v);
  }
};

// max / min with the index of the first best element; values and indices outputs optional
template <class T, bool IsMax, class VOut>
struct MaxPolicy {
  struct Acc {
    T v;
    int64_t i;
  };
  const T* x;
  VOut* vals;        // (O, I) or null
  int64_t* indices;  // (O, I) or null
  int64_t R, I;
  // contiguous row: a vectorized pass for the value (and any NaN), then the first index of it
  Acc row(int64_t o, int64_t r0, int64_t r1) const {
    const T* p = x + o * R + r0;
    const int64_t n = r1 - r0;
    T m = p[0];
    if constexpr (IsMax) {
#pragma omp simd reduction(max : m)
      for (int64_t i = 1; i < n; ++i) m = p[i] > m ? p[i] : m;
    } else {
#pragma omp simd reduction(min : m)
      for (int64_t i = 1; i < n; ++i) m = p[i] < m ? p[i] : m;
    }
    int has_nan = 0;
    if constexpr (std::is_floating_point_v<T>) {
#pragma omp simd reduction(| : has_nan)
      for (int64_t i = 0; i < n; ++i) has_nan |= int(p[i] != p[i]);
    }
    int64_t i = 0;
    if (has_nan) {
      while (p[i] == p[i]) ++i;  // NaN wins: the first NaN
    } else {
      // clang starts simd max (min) reductions from the lowest (highest) finite value, which a
      // row of -inf (+inf) does not hold: then no entry matches, and every entry is the answer
      while (i < n && p[i] != m) ++i;
      if (i == n) i = 0;
    }
    return {p[i], r0 + i};
  }
  void cols(Acc* acc, int64_t o, int64_t r0, int64_t r1, int64_t i0, int64_t w) const {
    T bv[kColBlock];        // best values (separate arrays so the select loop vectorizes)
    int64_t bi[kColBlock];  // their indices
    const T* x0 = x + (o * R + r0) * I + i0;
    for (int64_t j = 0; j < w; ++j) {
      bv[j] = x0[j];
      bi[j] = r0;
    }
    for (int64_t r = r0 + 1; r < r1; ++r) {
      const T* xr = x + (o * R + r) * I + i0;  // (w)
      for (int64_t j = 0; j < w; ++j) {
        const bool b = math::reduce_better<IsMax>(xr[j], bv[j]);
        bv[j] = b ? xr[j] : bv[j];
        bi[j] = b ? r : bi[j];
      }
    }
    for (int64_t j = 0; j < w; ++j) acc[j] = {bv[j], bi[j]};
  }
  static void merge(Acc& a, const Acc& b) {
    if (math::reduce_better<IsMax>(b.v, a.v)) a = b;
  }
  void finish(int64_t o, int64_t i, const Acc& a) const {
    if (vals) vals[o * I + i] = VOut(a.v);
    if (indices) indices[o * I + i] = a.i;
  }
};

// sum(exp(x - m)) with a per-output maximum m (O, I); out = logsumexp
template <class T>
struct ExpSumPolicy {
  using Acc = double;
  const T* x;
  const double* mx;  // (O, I)
  T* out;
  int64_t R, I;
  // a non-finite maximum makes these sums NaN, but then the finish returns the maximum itself
  double row(int64_t o, int64_t r0, int64_t r1) const {
    return cpu::row_sum_exp(x + o * R + r0, r1 - r0, T(mx[o]));
  }
  void cols(double* acc, int64_t o, int64_t r0, int64_t r1, int64_t i0, int64_t w) const {
    T m[kColBlock];
    for (int64_t j = 0; j < w; ++j) {
      m[j] = T(mx[o * I + i0 + j]);
      acc[j] = 0;
    }
    for (int64_t r = r0; r < r1; ++r) {
      const T* xr = x + (o * R + r) * I + i0;
      for (int64_t j = 0; j < w; ++j) acc[j] += double(math::fast_exp(xr[j] - m[j]));
    }
  }
  static void merge(double& a, const double& b) { a += b; }
  void finish(int64_t o, int64_t i, const double& a) const {
    out[o * I + i] = T(math::logsumexp_finish(mx[o * I + i], a));
  }
};

/// Integer/bool dtypes (bool is read as uint8) for sum and max/min.
template <class F>
void dispatch_reduce_numeric(DType dt, const char* op, F&& f) {
  if (dt == DType::bool_) {
    f.template operator()<uint8_t>();
    return;
  }
  KILN_DISPATCH_NUMERIC(dt, op, f);
}

template <class T>
void fill_n(T* p, int64_t n, T v) {
  parallel_for(0, n, 65536, [&](int64_t b, int64_t e) { std::fill(p + b, p + e, v); });
}

template <class T, bool IsMax>
void max_forward(const ReduceArgs& a, bool values) {
  MaxPolicy<T, IsMax, T> p{static_cast<const T*>(a.x), values ? static_cast<T*>(a.out) : nullptr, a.indices,
                           a.reduce, a.inner};
  reduce_engine(p, a.outer, a.reduce, a.inner);
}

// dx (O, R, I) = 0 except dx[o, idx[o, i], i] = g[o, i]
template <class T>
void max_backward(const ReduceArgs& a) {
  const int64_t O = a.outer, R = a.reduce, I = a.inner;
  T* dx = static_cast<T*>(a.dx);
  const T* g = static_cast<const T*>(a.g);
  fill_n(dx, O * R * I, T(0));
  parallel_for(0, O * I, 32768, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      const int64_t o = k / I, i = k % I;
      dx[(o * R + a.indices[k]) * I + i] = g[k];
    }
  });
}

void reduce_cpu(Op op, DType dt, const ReduceArgs& a) {
  const int64_t O = a.outer, R = a.reduce, I = a.inner;
  const int64_t n_out = O * I;
  if (a.backward) {
    KILN_DISPATCH_FLOATING(dt, op_name(op), [&]<class T>() { max_backward<T>(a); });
    return;
  }
  switch (op) {
    case Op::sum:
    case Op::mean:
      if (dt == DType::float16 || dt == DType::bfloat16) {  // a bias gradient under autocast
        auto run = [&]<class T>() {
          T* out = static_cast<T*>(a.out);
          if (R == 0) return fill_n(out, n_out, T(op == Op::sum ? 0.f : std::numeric_limits<float>::quiet_NaN()));
          SumPolicy<T, double, T> p{static_cast<const T*>(a.x), out, R, I, op == Op::mean ? 1.0 / double(R) : 1.0};
          reduce_engine(p, O, R, I);
        };
        if (dt == DType::float16) run.template operator()<Half>();
        else run.template operator()<BFloat16>();
      } else if (is_floating(dt)) {
        KILN_DISPATCH_FLOATING(dt, op_name(op), [&]<class T>() {
          T* out = static_cast<T*>(a.out);
          if (R == 0) return fill_n(out, n_out, op == Op::sum ? T(0) : std::numeric_limits<T>::quiet_NaN());
          SumPolicy<T, double, T> p{static_cast<const T*>(a.x), out, R, I, op == Op::mean ? 1.0 / double(R) : 1.0};
          reduce_engine(p, O, R, I);
        });
      } else {
        KILN_CHECK(op == Op::sum, op_name(op), ": no CPU kernel for dtype ", dtype_name(dt));
        dispatch_reduce_numeric(dt, "sum", [&]<class T>() {
          int64_t* out = static_cast<int64_t*>(a.out);
          if (R == 0) return fill_n(out, n_out, int64_t(0));
          SumPolicy<T, int64_t, int64_t> p{static_cast<const T*>(a.x), out, R, I, 1.0};
          reduce_engine(p, O, R, I);
        });
      }
      return;
    case Op::var:
    case Op::std:
      KILN_DISPATCH_FLOATING(dt, op_name(op), [&]<class T>() {
        T* out = static_cast<T*>(a.out);
        if (R == 0) return fill_n(out, n_out, std::numeric_limits<T>::quiet_NaN());
        std::vector<double> mu(static_cast<size_t>(n_out));  // (O, I)
        const T* x = static_cast<const T*>(a.x);
        reduce_engine(SumPolicy<T, double, double>{x, mu.data(), R, I, 1.0 / double(R)}, O, R, I);
        reduce_engine(SqDevPolicy<T>{x, mu.data(), out, R, I, double(R) - a.correction, op == Op::std}, O, R, I);
      });
      return;
    case Op::logsumexp:
      KILN_DISPATCH_FLOATING(dt, op_name(op), [&]<class T>() {
        T* out = static_cast<T*>(a.out);
        if (R == 0) return fill_n(out, n_out, -std::numeric_limits<T>::infinity());
        std::vector<double> mx(static_cast<size_t>(n_out));  // (O, I)
        const T* x = static_cast<const T*>(a.x);
        reduce_engine(MaxPolicy<T, true, double>{x, mx.data(), nullptr, R, I}, O, R, I);
        reduce_engine(ExpSumPolicy<T>{x, mx.data(), out, R, I}, O, R, I);
      });
      return;
    case Op::max:
    case Op::min:
    case Op::argmax:
    case Op::argmin: {
      KILN_CHECK(R > 0, op_name(op), ": cannot reduce over a dim of size 0");
      const bool is_max = op == Op::max || op == Op::argmax;
      const bool values = (op == Op::max || op == Op::min) && a.out != nullptr;
      dispatch_reduce_numeric(dt, op_name(op), [&]<class T>() {
        if (is_max) max_forward<T, true>(a, values);
        else max_forward<T, false>(a, values);
      });
      return;
    }
    default:
      KILN_FAIL("reduce kernel: unsupported op ", op_name(op));
  }
}

// ---------------------------------------------------------------- cumsum

// The running sum along R of a contiguous (O, R, I) block. Work items are (o, block of up
// to 256 columns): each keeps one accumulator per column and walks r in order (or from the
// end for the gradient), reading rows of the block contiguously. The same sequence of
// additions per line as math::cumsum_line (the CUDA kernel's), so the results are equal.
template <class T, class A, class U>
void cumsum_block(const ReduceArgs& a) {
  const int64_t O = a.outer, R = a.reduce, I = a.inner;
  constexpr int64_t kCols = 256;
  const int64_t col_blocks = (I + kCols - 1) / kCols;
  const T* x = static_cast<const T*>(a.x);
  U* out = static_cast<U*>(a.out);
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, R * std::min(I, kCols)));
  parallel_for(0, O * col_blocks, grain, [&](int64_t b, int64_t e) {
    A acc[kCols];
    for (int64_t k = b; k < e; ++k) {
      const int64_t o = k / col_blocks, i0 = (k % col_blocks) * kCols, w = std::min(kCols, I - i0);
      if (I == 1) {  // one line, contiguous
        math::cumsum_line<A>(x + o * R, out + o * R, R, 1, a.backward);
        continue;
      }
      std::fill(acc, acc + w, A(0));
      for (int64_t s = 0; s < R; ++s) {
        const int64_t r = a.backward ? R - 1 - s : s;
        const T* xr = x + (o * R + r) * I + i0;
        U* yr = out + (o * R + r) * I + i0;
        for (int64_t i = 0; i < w; ++i) {
          acc[i] += A(xr[i]);
          yr[i] = U(acc[i]);
        }
      }
    }
  });
}

void cumsum_cpu(Op op, DType dt, const ReduceArgs& a) {
  KILN_CHECK(op == Op::cumsum, "cumsum kernel: unsupported op ", op_name(op));
  if (a.outer * a.reduce * a.inner == 0) return;
  if (is_floating(dt) && !is_half(dt)) {
    KILN_DISPATCH_FLOATING(dt, "cumsum", [&]<class T>() { cumsum_block<T, double, T>(a); });
    return;
  }
  KILN_CHECK(!is_floating(dt) && !a.backward, "cumsum: no CPU kernel for ", dtype_name(dt),
             a.backward ? " gradients" : " (16-bit inputs run in float32)");
  dispatch_reduce_numeric(dt, "cumsum", [&]<class T>() { cumsum_block<T, int64_t, int64_t>(a); });
}

// ---------------------------------------------------------------- softmax

// Forward over one (o, column block [i0, i0 + w)) of a contiguous (O, R, I) block; the
// output doubles as scratch for the exponentials. m, s: (w) per-column scratch.
// log_softmax is (x - max) - log(sum): rounding max + log(sum) to T first would lose the
// small log(sum) next to a large max ([100, 90] -> -4.5776e-5 instead of -4.5399e-5).
template <class T, bool Log>
void softmax_block(const T* x, T* y, int64_t o, int64_t R, int64_t I, int64_t i0, int64_t w, T* m, double* s) {
  if (I == 1) {
    const T* xr = x + o * R;  // (R)
    T* yr = y + o * R;        // (R)
    const T mx = cpu::row_max(xr, R);
    for (int64_t r = 0; r < R; ++r) yr[r] = math::fast_exp(xr[r] - mx);
    const double sum = cpu::row_sum<T, double>(yr, R);
    if constexpr (Log) {
      const T log_sum = T(std::log(sum));
      for (int64_t r = 0; r < R; ++r) yr[r] = (xr[r] - mx) - log_sum;
    } else {
      const T inv = T(1.0 / sum);
      for (int64_t r = 0; r < R; ++r) yr[r] *= inv;
    }
    return;
  }
  for (int64_t j = 0; j < w; ++j) {
    m[j] = -std::numeric_limits<T>::infinity();
    s[j] = 0;
  }
  for (int64_t r = 0; r < R; ++r) {
    const T* xr = x + (o * R + r) * I + i0;  // (w)
    for (int64_t j = 0; j < w; ++j) m[j] = xr[j] > m[j] ? xr[j] : m[j];
  }
  for (int64_t r = 0; r < R; ++r) {
    const T* xr = x + (o * R + r) * I + i0;
    T* yr = y + (o * R + r) * I + i0;
    for (int64_t j = 0; j < w; ++j) {
      yr[j] = math::fast_exp(xr[j] - m[j]);
      s[j] += double(yr[j]);
    }
  }
  T fin[kColBlock];  // log_softmax: log(sum); softmax: 1 / sum
  for (int64_t j = 0; j < w; ++j) fin[j] = Log ? T(std::log(s[j])) : T(1.0 / s[j]);
  for (int64_t r = 0; r < R; ++r) {
    const T* xr = x + (o * R + r) * I + i0;
    T* yr = y + (o * R + r) * I + i0;
    for (int64_t j = 0; j < w; ++j) {
      if constexpr (Log) yr[j] = (xr[j] - m[j]) - fin[j];
      else yr[j] *= fin[j];
    }
  }
}

// Backward over one (o, column block): softmax dx = y (g - sum(g y)); log_softmax
// dx = g - exp(y) sum(g). s: (w) per-column scratch.
template <class T, bool Log>
void softmax_backward_block(const T* y, const T* g, T* dx, int64_t o, int64_t R, int64_t I, int64_t i0,
                            int64_t w, double* s) {
  if (I == 1) {
    const T* yr = y + o * R;  // (R)
    const T* gr = g + o * R;
    T* dr = dx + o * R;
    if constexpr (Log) {
      const T gs = T(cpu::row_sum<T, double>(gr, R));
      for (int64_t r = 0; r < R; ++r) dr[r] = gr[r] - math::fast_exp(yr[r]) * gs;
    } else {
      double acc[8] = {};
      int64_t r = 0;
      for (; r + 8 <= R; r += 8)
        for (int j = 0; j < 8; ++j) acc[j] += double(gr[r + j]) * double(yr[r + j]);
      double dot = 0;
      for (int j = 0; j < 8; ++j) dot += acc[j];
      for (; r < R; ++r) dot += double(gr[r]) * double(yr[r]);
      const T d = T(dot);
      for (r = 0; r < R; ++r) dr[r] = yr[r] * (gr[r] - d);
    }
    return;
  }
  for (int64_t j = 0; j < w; ++j) s[j] = 0;
  for (int64_t r = 0; r < R; ++r) {
    const int64_t base = (o * R + r) * I + i0;
    for (int64_t j = 0; j < w; ++j) s[j] += Log ? double(g[base + j]) : double(g[base + j]) * double(y[base + j]);
  }
  T sj[kColBlock];
  for (int64_t j = 0; j < w; ++j) sj[j] = T(s[j]);
  for (int64_t r = 0; r < R; ++r) {
    const int64_t base = (o * R + r) * I + i0;
    for (int64_t j = 0; j < w; ++j) {
      if constexpr (Log) dx[base + j] = g[base + j] - math::fast_exp(y[base + j]) * sj[j];
      else dx[base + j] = y[base + j] * (g[base + j] - sj[j]);
    }
  }
}

void softmax_cpu(Op op, DType dt, const SoftmaxArgs& a) {
  const int64_t O = a.outer, R = a.dim, I = a.inner;
  if (O == 0 || R == 0 || I == 0) return;
  const bool log = op == Op::log_softmax;
  KILN_CHECK(op == Op::softmax || log, "softmax kernel: unsupported op ", op_name(op));
  const int64_t W = std::min<int64_t>(I, kColBlock);
  const int64_t nb = (I + W - 1) / W;
  const int64_t grain = std::max<int64_t>(1, kGrain / (R * W));
  KILN_DISPATCH_FLOATING(dt, op_name(op), [&]<class T>() {
    parallel_for(0, O * nb, grain, [&](int64_t b, int64_t e) {
      T m[kColBlock];
      double s[kColBlock];
      for (int64_t t = b; t < e; ++t) {
        const int64_t o = t / nb, i0 = (t % nb) * W, w = std::min(W, I - i0);
        T* out = static_cast<T*>(a.out);
        if (a.backward) {
          const T* y = static_cast<const T*>(a.y);
          const T* g = static_cast<const T*>(a.g);
          if (log) softmax_backward_block<T, true>(y, g, out, o, R, I, i0, w, s);
          else softmax_backward_block<T, false>(y, g, out, o, R, I, i0, w, s);
        } else {
          const T* x = static_cast<const T*>(a.x);
          if (log) softmax_block<T, true>(x, out, o, R, I, i0, w, m, s);
          else softmax_block<T, false>(x, out, o, R, I, i0, w, m, s);
        }
      }
    });
  });
}

}  // namespace

void register_cpu_reduce() {
  for (Op op : {Op::sum, Op::mean, Op::var, Op::std, Op::logsumexp, Op::max, Op::min, Op::argmax, Op::argmin})
    register_kernel(op, DeviceType::CPU, &reduce_cpu);
  register_kernel(Op::cumsum, DeviceType::CPU, &cumsum_cpu);
  register_kernel(Op::softmax, DeviceType::CPU, &softmax_cpu);
  register_kernel(Op::log_softmax, DeviceType::CPU, &softmax_cpu);
}

}  // namespace kiln
