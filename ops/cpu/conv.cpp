// CPU conv2d: the choice of algorithm for each call, and the registration of the conv op
// family's CPU kernels. The algorithms live one per file: conv_direct.cpp (first layers of
// 1-4 input channels, in vector registers), conv_wide.cpp (stride 1: GEMMs reading the
// im2col rows in place), conv_im2col.cpp (everything else: im2col + GEMM); their shared
// helpers are in conv_algos.h, and pooling is in pool.cpp. Threads over the batch with
// per-thread scratch and per-thread weight-gradient accumulators reduced in a fixed order.
#include <algorithm>
#include <memory>
#include <type_traits>
#include <vector>
#include <omp.h>
#include "kiln/core/copy.h"
#include "kiln/core/half.h"
#include "kiln/core/parallel.h"
#include "kiln/ops/cpu/conv_algos.h"
#include "kiln/ops/kernels/conv.h"
#include "kiln/ops/kernels/linalg.h"
#include "kiln/ops/dispatch.h"

namespace kiln {

namespace {

using namespace conv_cpu;

/// Threads to use over n independent samples: all when there are enough samples,
/// else 1 (then Eigen threads each GEMM).
inline int batch_threads(int64_t n) {
  if (omp_in_parallel()) return 1;
  int nt = get_num_threads();
  return n >= nt ? nt : 1;
}

/// Calls f(tid, lo, hi) on nt contiguous chunks of [0, n) in parallel (one per thread).
template <class F>
void run_chunks(int nt, int64_t n, const F& f) {
  if (nt <= 1) {
    sync_eigen_threads();
    f(0, int64_t(0), n);
    return;
  }
#pragma omp parallel num_threads(nt)
  {
    const int t = omp_get_thread_num(), T = omp_get_num_threads();
    const int64_t per = (n + T - 1) / T;
    const int64_t lo = std::min<int64_t>(n, t * per), hi = std::min<int64_t>(n, lo + per);
    if (lo < hi) f(t, lo, hi);
  }
}

// The input gradient of a stride-1 convolution is itself a stride-1 convolution: dx =
// conv(dy padded by d (k - 1) - p, w with input and output channels swapped and the kernel
// turned by 180 degrees). Run as the wide layout's forward, it reads dy's taps in place,
// one GEMM per sample of depth O kH kW, and writes dx directly, where the GEMM
// w^T (C kH kW x O) @ dy has depth O (16-64: every tile of C reloaded after a few steps),
// writes C kH kW x L2 columns and adds them back with col2im.

/// The convolution whose forward is the input gradient of g, when its padding is >= 0.
inline bool transposed_geom(const Conv2dGeom& g, Conv2dGeom& t) {
  const int64_t pH = g.dH * (g.kH - 1) - g.pH, pW = g.dW * (g.kW - 1) - g.pW;
  if (g.sH != 1 || g.sW != 1 || pH < 0 || pW < 0) return false;
  // the flipped conv must give exactly H x W: conv_transpose2d's output_padding (allowed
  // below the dilation at stride 1) adds a row or column no window of it reaches
  if (g.OH + 2 * pH - g.dH * (g.kH - 1) != g.H || g.OW + 2 * pW - g.dW * (g.kW - 1) != g.W) return false;
  t = g;
  t.C = g.O;
  t.H = g.OH;
  t.W = g.OW;
  t.O = g.C;
  t.pH = pH;
  t.pW = pW;
  t.OH = g.H;
  t.OW = g.W;
  return true;
}

/// Weight of the transposed convolution: wt (C, O/groups, kH, kW), wt[c][o][i][j] = w[o][c][kH-1-i][kW-1-j]
/// within each group.
template <class T>
std::vector<T> transposed_weight(const Conv2dGeom& g, const T* w) {
  const int64_t G = g.groups, Cg = g.C / G, Og = g.O / G, taps = g.kH * g.kW;
  std::vector<T> wt(size_t(g.C * Og * taps));
  for (int64_t gi = 0; gi < G; ++gi)
    for (int64_t cl = 0; cl < Cg; ++cl)
      for (int64_t ol = 0; ol < Og; ++ol)
        for (int64_t t = 0; t < taps; ++t)
          wt[size_t((((gi * Cg + cl) * Og + ol) * taps) + t)] = w[((gi * Og + ol) * Cg + cl) * taps + (taps - 1 - t)];
  return wt;
}

// ------------------------------------------------------------------ conv2d

/// The forward of samples [lo, hi) with the algorithm chosen for g. x and y are stored as
/// X: T, or a 16-bit float for the direct and wide algorithms (which widen and round as they
/// copy into and out of their buffers).
template <class T, class X>
void forward_range(int nt, const Conv2dGeom& g, const X* x, const T* w, const T* bias, X* y, int64_t lo,
                   int64_t hi) {
  if (use_direct(g)) return conv2d_forward_direct(g, x, w, bias, y, lo, hi);
  if (use_wide(g)) return conv2d_forward_wide(nt, g, x, w, bias, y, lo, hi);
  if constexpr (std::is_same_v<X, T>) conv2d_forward_im2col(nt, g, x, w, bias, y, lo, hi);
  else KILN_FAIL("conv2d: im2col takes float32 buffers (internal)");
}

/// Samples per block when 16-bit activations are widened for the im2col algorithm: about
/// 256 KB of float32 buffers (values per sample: per_sample), so they stay in a core's L2.
inline int64_t block_samples(int64_t per_sample) { return std::max<int64_t>(1, (int64_t(1) << 16) / per_sample); }

/// X: how x and y are stored, T or a 16-bit float (a 16-bit convolution; T = float). The
/// direct and wide algorithms take X as it is; for im2col blocks of samples are widened
/// into float32 buffers and the results rounded back. Either way the bits of converting
/// whole tensors first, without their memory traffic. w and bias are T.
template <class T, class X = T>
void conv2d_forward_t(const Conv2dGeom& g, const X* x, const T* w, const T* bias, X* y) {
  const int nt = batch_threads(g.N);
  run_chunks(nt, g.N, [&](int, int64_t lo, int64_t hi) {
    if constexpr (!std::is_same_v<X, T>) {
      if (!use_direct(g) && !use_wide(g)) {  // im2col: blocks of samples widened, results rounded back
        const int64_t xs = g.C * g.H * g.W, ys = g.O * g.OH * g.OW, B = block_samples(xs + ys);
        const std::unique_ptr<T[]> xb(new T[size_t(B * xs)]), yb(new T[size_t(B * ys)]);  // not zeroed
        for (int64_t n0 = lo; n0 < hi; n0 += B) {
          const int64_t m = std::min(B, hi - n0);
          convert_floats(x + n0 * xs, xb.get(), m * xs);
          forward_range(nt, g, static_cast<const T*>(xb.get()), w, bias, yb.get(), 0, m);
          convert_floats(yb.get(), y + n0 * ys, m * ys);
        }
        return;
      }
    }
    forward_range(nt, g, x, w, bias, y, lo, hi);
  });
}

/// X: how x, dy and dx are stored (see conv2d_forward_t); w, dw and db are T.
template <class T, class X = T>
void conv2d_backward_t(const Conv2dGeom& g, const X* x, const T* w, const X* dy, X* dx, T* dw, T* db) {
  const int64_t G = g.groups, Cg = g.C / G;
  const int64_t Kg = Cg * g.kH * g.kW;
  const int64_t wsize = g.O * Kg;
  // A bf16 weight gradient of few input channels (a first layer) runs on the bf16 GEMM,
  // transposed in the wide layout (sgemm_bf16_a_rows, conv_wide.cpp) where that GEMM is
  // chosen: twice the multiply rate of the direct kernel's float32 FMAs, at full tiles.
  const bool wgrad_gemm = use_direct_wgrad(g) && wide_wgrad_a_rows<T, X>(g);
  const bool direct = use_direct_wgrad(g) && !wgrad_gemm, wide = !direct && (use_wide(g) || wgrad_gemm);
  const int nt = batch_threads(g.N);
  // The input gradient as the forward of the transposed convolution when its GEMMs have at
  // least a register tile of rows (input channels per group): LeNet's 6 would run 6 of 8.
  Conv2dGeom gt{};
  const bool dx_transposed = dx && (direct || wide) && Cg >= 12 && transposed_geom(g, gt);
  const std::vector<T> wt = dx_transposed ? transposed_weight(g, w) : std::vector<T>();
  // Per-thread accumulators for dw and db, summed in thread order afterwards (deterministic).
  std::vector<std::vector<T>> dw_acc(nt > 1 && dw ? nt : 0), db_acc(nt > 1 && db ? nt : 0);
  if (nt == 1) {
    if (dw) std::fill(dw, dw + wsize, T(0));
    if (db) std::fill(db, db + g.O, T(0));
  }
  // Samples [lo, hi) of x, dy, dx (stored as S: X for direct and wide, T for im2col); dw and
  // db accumulate.
  auto range = [&]<class S>(const S* xr, const S* dyr, S* dxr, T* dwt, T* dbt, int64_t lo, int64_t hi) {
    if (direct || wide) {
      if (direct) conv2d_wgrad_direct(g, xr, dyr, dwt, dbt, lo, hi);  // dw, db in registers
      // What is left for the wide layout's GEMMs (dx: GEMM + col2im unless transposed)
      T* dw_gemm = direct ? nullptr : dwt;
      T* db_gemm = direct ? nullptr : dbt;
      S* dx_gemm = dx_transposed ? nullptr : dxr;
      if (dw_gemm || db_gemm || dx_gemm) conv2d_backward_wide<T, S>(nt, g, xr, w, dyr, dx_gemm, dw_gemm, db_gemm, lo, hi);
      if (dx_transposed) conv2d_forward_wide<T, S>(nt, gt, dyr, wt.data(), nullptr, dxr, lo, hi);
      return;
    }
    if constexpr (std::is_same_v<S, T>) conv2d_backward_im2col(nt, g, xr, w, dyr, dxr, dwt, dbt, lo, hi);
    else KILN_FAIL("conv2d: im2col takes float32 buffers (internal)");
  };
  run_chunks(nt, g.N, [&](int t, int64_t lo, int64_t hi) {
    T* dwt = dw;
    T* dbt = db;
    if (nt > 1) {
      if (dw) { dw_acc[t].assign(size_t(wsize), T(0)); dwt = dw_acc[t].data(); }
      if (db) { db_acc[t].assign(size_t(g.O), T(0)); dbt = db_acc[t].data(); }
    }
    if constexpr (!std::is_same_v<X, T>) {
      if (!direct && !wide) {  // im2col: blocks of samples as in the forward (x is null when dw is not wanted)
        const int64_t xs = g.C * g.H * g.W, ys = g.O * g.OH * g.OW, B = block_samples(2 * xs + ys);
        const std::unique_ptr<T[]> xb(x ? new T[size_t(B * xs)] : nullptr), dyb(new T[size_t(B * ys)]),
            dxb(dx ? new T[size_t(B * xs)] : nullptr);
        for (int64_t n0 = lo; n0 < hi; n0 += B) {
          const int64_t m = std::min(B, hi - n0);
          if (x) convert_floats(x + n0 * xs, xb.get(), m * xs);
          convert_floats(dy + n0 * ys, dyb.get(), m * ys);
          range(static_cast<const T*>(xb.get()), static_cast<const T*>(dyb.get()), dxb.get(), dwt, dbt, 0, m);
          if (dx) convert_floats(dxb.get(), dx + n0 * xs, m * xs);
        }
        return;
      }
    }
    range(x, dy, dx, dwt, dbt, lo, hi);
  });
  if (nt > 1) {
    if (dw) {
      std::fill(dw, dw + wsize, T(0));
      for (auto& a : dw_acc)
        if (!a.empty())
          for (int64_t i = 0; i < wsize; ++i) dw[i] += a[i];
    }
    if (db) {
      std::fill(db, db + g.O, T(0));
      for (auto& a : db_acc)
        if (!a.empty())
          for (int64_t i = 0; i < g.O; ++i) db[i] += a[i];
    }
  }
}

void conv2d_forward_cpu(DType dtype, const Conv2dGeom& g, const void* x, const void* w, const void* bias,
                        void* y) {
  auto run16 = [&]<class X>() {
    conv2d_forward_t<float, X>(g, static_cast<const X*>(x), static_cast<const float*>(w),
                               static_cast<const float*>(bias), static_cast<X*>(y));
  };
  if (dtype == DType::bfloat16) return run16.template operator()<BFloat16>();
  if (dtype == DType::float16) return run16.template operator()<Half>();
  KILN_DISPATCH_FLOATING(dtype, "conv2d", [&]<class T>() {
    conv2d_forward_t<T>(g, static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(bias),
                        static_cast<T*>(y));
  });
}

void conv2d_backward_cpu(DType dtype, const Conv2dGeom& g, const void* x, const void* w, const void* dy, void* dx,
                         void* dw, void* dbias) {
  auto run16 = [&]<class X>() {
    conv2d_backward_t<float, X>(g, static_cast<const X*>(x), static_cast<const float*>(w),
                                static_cast<const X*>(dy), static_cast<X*>(dx), static_cast<float*>(dw),
                                static_cast<float*>(dbias));
  };
  if (dtype == DType::bfloat16) return run16.template operator()<BFloat16>();
  if (dtype == DType::float16) return run16.template operator()<Half>();
  KILN_DISPATCH_FLOATING(dtype, "conv2d", [&]<class T>() {
    conv2d_backward_t<T>(g, static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(dy),
                         static_cast<T*>(dx), static_cast<T*>(dw), static_cast<T*>(dbias));
  });
}

const Conv2dKernels kConv2dCpu{&conv2d_forward_cpu, &conv2d_backward_cpu};

}  // namespace

void register_cpu_conv() {
  // Each entry is a table of function pointers (forward, backward), see ops/kernels/conv.h.
  register_kernel(Op::conv2d, DeviceType::CPU, &kConv2dCpu);
  register_cpu_pool();  // max, average and adaptive average pooling (pool.cpp)
}

}  // namespace kiln
