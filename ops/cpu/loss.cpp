// CPU kernels of the loss family: fused cross entropy (logsumexp + pick + label smoothing,
// and its softmax-minus-one-hot backward), nll_loss and mse_loss, and their registration.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>
#include "kiln/core/copy.h"
#include "kiln/core/half.h"
#include "kiln/core/parallel.h"
#include "kiln/ops/kernels/loss.h"
#include "kiln/ops/kernels/reduce.h"

namespace kiln {

namespace {

constexpr int64_t kGrain = 32768;   // elements below which work runs on one thread
constexpr int64_t kColBlock = 64;   // spatial positions one task handles at once

// ---------------------------------------------------------------- cross entropy

// X: how the logits (and dlogits) are stored, T or a 16-bit float (T = float) read widened:
// a row at a time when the classes are contiguous (S == 1), else value by value.
template <class T, class X = T>
void cross_entropy_forward(const CrossEntropyKernelArgs& a) {
  const int64_t N = a.n, C = a.c, S = a.s;
  const X* x = static_cast<const X*>(a.logits);  // (N, C, S)
  const int64_t* tg = a.target;                   // (N, S)
  T* loss = static_cast<T*>(a.loss);              // (N, S)
  T* row_max = static_cast<T*>(a.row_max);        // (N, S)
  T* log_sum = static_cast<T*>(a.log_sum);        // (N, S)
  const double eps = a.label_smoothing;
  const int64_t W = std::min<int64_t>(S, kColBlock), nb = (S + W - 1) / W;
  const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(1, C * W));
  parallel_for(0, N * nb, grain, [&](int64_t b, int64_t e) {
    double m[kColBlock], sum[kColBlock], xsum[kColBlock];
    T mt[kColBlock];
    thread_local std::vector<T> rb;
    for (int64_t task = b; task < e; ++task) {
      const int64_t n = task / nb, s0 = (task % nb) * W, w = std::min(W, S - s0);
      for (int64_t j = 0; j < w; ++j) {
        mt[j] = -std::numeric_limits<T>::infinity();
        sum[j] = 0;
        xsum[j] = 0;
      }
      if (S == 1) {
        const T* xr = widened<T>(x + n * C, C, rb);  // (C)
        const T mx = cpu::row_max(xr, C);
        m[0] = double(mx);
        sum[0] = cpu::row_sum_exp(xr, C, mx);
        if (eps > 0) xsum[0] = cpu::row_sum<T, double>(xr, C);
      } else {
        for (int64_t c = 0; c < C; ++c) {
          const X* xr = x + (n * C + c) * S + s0;  // (w)
          for (int64_t j = 0; j < w; ++j) {
            const T v = T(xr[j]);
            mt[j] = v > mt[j] ? v : mt[j];
            xsum[j] += double(v);
          }
        }
        for (int64_t c = 0; c < C; ++c) {
          const X* xr = x + (n * C + c) * S + s0;
          for (int64_t j = 0; j < w; ++j) sum[j] += double(math::fast_exp(T(xr[j]) - mt[j]));
        }
        for (int64_t j = 0; j < w; ++j) m[j] = double(mt[j]);
      }
      for (int64_t j = 0; j < w; ++j) {
        const int64_t k = n * S + s0 + j;
        const double ls = std::log(sum[j]);
        row_max[k] = T(m[j]);
        log_sum[k] = T(ls);
        const int64_t t = tg[k];
        if (t == a.ignore_index) {
          loss[k] = T(0);
          continue;
        }
        double v = (1.0 - eps) * (m[j] - double(T(x[(n * C + t) * S + s0 + j]))) + ls;
        if (eps > 0) v += eps * (m[j] - xsum[j] / double(C));
        loss[k] = T(v);
      }
    }
  });
}

/// dx as X: the float32 values rounded once (the target's correction applied before).
template <class T, class X = T>
void cross_entropy_backward(const CrossEntropyKernelArgs& a) {
  const int64_t N = a.n, C = a.c, S = a.s;
  const X* x = static_cast<const X*>(a.logits);  // (N, C, S)
  const int64_t* tg = a.target;                   // (N, S)
  const T* row_max = static_cast<const T*>(a.row_max);  // (N, S)
  const T* log_sum = static_cast<const T*>(a.log_sum);  // (N, S)
  const T* g = static_cast<const T*>(a.g);        // (N, S) or one value
  X* dx = static_cast<X*>(a.dlogits);             // (N, C, S)
  const T eps = T(a.label_smoothing), smooth = C > 0 ? eps / T(C) : T(0);
  const int64_t W = std::min<int64_t>(S, kColBlock), nb = (S + W - 1) / W;
  const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(1, C * W));
  parallel_for(0, N * nb, grain, [&](int64_t b, int64_t e) {
    T gk[kColBlock], mx[kColBlock], ls[kColBlock];
    bool ign[kColBlock];
    int64_t tk[kColBlock];
    thread_local std::vector<T> rb, db;
    for (int64_t task = b; task < e; ++task) {
      const int64_t n = task / nb, s0 = (task % nb) * W, w = std::min(W, S - s0);
      for (int64_t j = 0; j < w; ++j) {
        const int64_t k = n * S + s0 + j;
        tk[j] = tg[k];
        ign[j] = tk[j] == a.ignore_index;
        gk[j] = ign[j] ? T(0) : T(double(g[k * a.g_stride]) * a.scale);
        mx[j] = row_max[k];
        ls[j] = log_sum[k];
      }
      if (S == 1) {
        X* dn = dx + n * C;
        if (ign[0]) {
          std::fill(dn, dn + C, X(T(0)));
          continue;
        }
        const T* xr = widened<T>(x + n * C, C, rb);
        T* dr;  // the row's float values: dx itself, or a buffer rounded into it after
        if constexpr (std::is_same_v<X, T>) {
          dr = dn;
        } else {
          if (db.size() < size_t(C)) db.resize(size_t(C));
          dr = db.data();
        }
        const T gg = gk[0], mm = mx[0], ll = ls[0];
        for (int64_t c = 0; c < C; ++c) dr[c] = gg * (math::fast_exp((xr[c] - mm) - ll) - smooth);
        dr[tk[0]] -= gg * (T(1) - eps);
        if constexpr (!std::is_same_v<X, T>) convert_floats(dr, dn, C);
      } else {
        for (int64_t c = 0; c < C; ++c) {
          const X* xr = x + (n * C + c) * S + s0;
          X* dr = dx + (n * C + c) * S + s0;
          for (int64_t j = 0; j < w; ++j) {
            if (ign[j]) {
              dr[j] = X(T(0));
              continue;
            }
            T v = gk[j] * (math::fast_exp((T(xr[j]) - mx[j]) - ls[j]) - smooth);
            if (c == tk[j]) v -= gk[j] * (T(1) - eps);
            dr[j] = X(v);
          }
        }
      }
    }
  });
}

void cross_entropy_cpu(DType dt, const CrossEntropyKernelArgs& a) {
  if (a.n * a.s == 0) return;
  auto run16 = [&]<class X>() {
    if (a.backward) cross_entropy_backward<float, X>(a);
    else cross_entropy_forward<float, X>(a);
  };
  if (dt == DType::bfloat16) return run16.template operator()<BFloat16>();
  if (dt == DType::float16) return run16.template operator()<Half>();
  KILN_DISPATCH_FLOATING(dt, "cross_entropy", [&]<class T>() {
    if (a.backward) cross_entropy_backward<T>(a);
    else cross_entropy_forward<T>(a);
  });
}

// ---------------------------------------------------------------- nll

void nll_loss_cpu(DType dt, const NllLossKernelArgs& a) {
  const int64_t N = a.n, C = a.c, S = a.s, K = N * S;
  if (K == 0) return;
  KILN_DISPATCH_FLOATING(dt, "nll_loss", [&]<class T>() {
    const int64_t* tg = a.target;  // (N, S)
    if (!a.backward) {
      const T* lp = static_cast<const T*>(a.log_probs);  // (N, C, S)
      T* loss = static_cast<T*>(a.loss);                  // (N, S)
      parallel_for(0, K, kGrain, [&](int64_t b, int64_t e) {
        for (int64_t k = b; k < e; ++k) {
          const int64_t t = tg[k];
          loss[k] = t == a.ignore_index ? T(0) : -lp[((k / S) * C + t) * S + k % S];
        }
      });
      return;
    }
    const T* g = static_cast<const T*>(a.g);
    T* d = static_cast<T*>(a.dlog_probs);  // (N, C, S)
    parallel_for(0, N, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, C * S)), [&](int64_t b, int64_t e) {
      std::fill(d + b * C * S, d + e * C * S, T(0));
      for (int64_t n = b; n < e; ++n)
        for (int64_t s = 0; s < S; ++s) {
          const int64_t k = n * S + s, t = tg[k];
          if (t != a.ignore_index) d[(n * C + t) * S + s] = T(-double(g[k * a.g_stride]) * a.scale);
        }
    });
  });
}

// ---------------------------------------------------------------- mse

void mse_loss_cpu(DType dt, const MseLossKernelArgs& a) {
  const int64_t n = a.n;
  KILN_DISPATCH_FLOATING(dt, "mse_loss", [&]<class T>() {
    const T* x = static_cast<const T*>(a.input);
    const T* y = static_cast<const T*>(a.target);
    if (a.backward) {
      const T* g = static_cast<const T*>(a.g);
      T* dx = static_cast<T*>(a.dinput);
      T* dy = static_cast<T*>(a.dtarget);
      const T two_scale = T(2.0 * a.scale);
      parallel_for(0, n, kGrain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          const T d = two_scale * (x[i] - y[i]) * g[i * a.g_stride];
          if (dx) dx[i] = d;
          if (dy) dy[i] = -d;
        }
      });
      return;
    }
    T* out = static_cast<T*>(a.out);
    if (!a.reduce) {
      parallel_for(0, n, kGrain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) out[i] = (x[i] - y[i]) * (x[i] - y[i]);
      });
      return;
    }
    // fixed chunks summed in order: the same result for any thread count
    const int64_t chunks = std::clamp<int64_t>(n / kGrain, 1, 64);
    std::vector<double> part(static_cast<size_t>(chunks), 0.0);
    parallel_for(0, chunks, 1, [&](int64_t b, int64_t e) {
      for (int64_t c = b; c < e; ++c) {
        const int64_t i0 = n * c / chunks, i1 = n * (c + 1) / chunks;
        double acc[8] = {};
        int64_t i = i0;
        for (; i + 8 <= i1; i += 8)
          for (int j = 0; j < 8; ++j) {
            double d = double(x[i + j]) - double(y[i + j]);
            acc[j] += d * d;
          }
        double s = 0;
        for (int j = 0; j < 8; ++j) s += acc[j];
        for (; i < i1; ++i) {
          double d = double(x[i]) - double(y[i]);
          s += d * d;
        }
        part[size_t(c)] = s;
      }
    });
    double total = 0;
    for (double p : part) total += p;
    out[0] = T(total * a.scale);
  });
}

}  // namespace

void register_cpu_loss() {
  register_kernel(Op::cross_entropy, DeviceType::CPU, &cross_entropy_cpu);
  register_kernel(Op::nll_loss, DeviceType::CPU, &nll_loss_cpu);
  register_kernel(Op::mse_loss, DeviceType::CPU, &mse_loss_cpu);
}

}  // namespace kiln
