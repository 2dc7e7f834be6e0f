// CPU kernels of 2-D pooling (max, average, adaptive average and max), part of the conv op family
// (ops/kernels/conv.h) and registered through register_cpu_conv (conv.cpp). Loops over N*C
// planes in parallel; 2x2/2 max pooling vectorised. 16-bit tensors are pooled in float32 a
// plane at a time (over_planes), except where max pooling can select 16-bit patterns
// directly (2x2/2 forward on order keys, the gradient of non-overlapping windows).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>
#include "kiln/core/copy.h"
#include "kiln/core/half.h"
#include "kiln/core/parallel.h"
#include "kiln/ops/kernels/conv.h"
#include "kiln/ops/dispatch.h"

namespace kiln {

namespace {

// ------------------------------------------------------------------ pooling

/// Planes per parallel chunk so that a chunk touches ~32k elements.
inline int64_t plane_grain(const Pool2dGeom& g) {
  return std::max<int64_t>(1, 32768 / std::max<int64_t>(1, g.H * g.W + g.OH * g.OW));
}

/// Visits every window of one plane row by row: interior(oh, lo, hi, h0) for the run of
/// windows [lo, hi) of row oh that lie fully inside the input (top row h0, left column of
/// window ow is ow*sW - pW), edge(oh, ow) for windows touching padding. Keeping bounds
/// checks out of the interior run lets the compiler vectorise it.
template <class Interior, class Edge>
inline void for_each_window(const Pool2dGeom& g, const Interior& interior, const Edge& edge) {
  const int64_t ow_lo = std::min(g.OW, (g.pW + g.sW - 1) / g.sW);
  const int64_t ow_hi = g.W - g.kW + g.pW >= 0 ? std::clamp((g.W - g.kW + g.pW) / g.sW + 1, ow_lo, g.OW) : ow_lo;
  for (int64_t oh = 0; oh < g.OH; ++oh) {
    const int64_t h0 = oh * g.sH - g.pH;
    if (h0 < 0 || h0 + g.kH > g.H) {
      for (int64_t ow = 0; ow < g.OW; ++ow) edge(oh, ow);
      continue;
    }
    for (int64_t ow = 0; ow < ow_lo; ++ow) edge(oh, ow);
    interior(oh, ow_lo, ow_hi, h0);
    for (int64_t ow = ow_hi; ow < g.OW; ++ow) edge(oh, ow);
  }
}

/// Select step of a max scan: first maximum wins, NaN propagates (PyTorch's rule).
/// Branch-free so random data does not mispredict and rows vectorise.
template <class T, class I>
inline void max_step(T v, I i, T& best, I& bi) {
  const bool take = (v > best) | (v != v);
  best = take ? v : best;
  bi = take ? i : bi;
}

/// One plane of max pooling; KH/KW/SW > 0 fix kernel size and column stride at compile
/// time (unrolled, vectorised interior).
template <class T, int KH, int KW, int SW>
void max_pool_plane(const Pool2dGeom& g, const T* __restrict xp, T* __restrict yp, int64_t* __restrict ip) {
  const int64_t kH = KH > 0 ? KH : g.kH, kW = KW > 0 ? KW : g.kW, W = g.W, sW = SW > 0 ? SW : g.sW, pW = g.pW;
  for_each_window(
      g,
      [&](int64_t oh, int64_t lo, int64_t hi, int64_t h0) {
        const T* r = xp + h0 * W;
        T* yr = yp + oh * g.OW;
        int64_t* ir = ip + oh * g.OW;
        for (int64_t ow = lo; ow < hi; ++ow) {
          const int64_t w0 = ow * sW - pW;
          T best = r[w0];
          int32_t bi = 0;  // offset kh*W + kw inside the window (int32: vectorises with T lanes)
          for (int64_t kh = 0; kh < kH; ++kh)
            for (int64_t kw = 0; kw < kW; ++kw) max_step(r[kh * W + w0 + kw], int32_t(kh * W + kw), best, bi);
          yr[ow] = best;
          ir[ow] = h0 * W + w0 + bi;
        }
      },
      [&](int64_t oh, int64_t ow) {
        const int64_t h0 = std::max<int64_t>(oh * g.sH - g.pH, 0), h1 = std::min(oh * g.sH - g.pH + kH, g.H);
        const int64_t w0 = std::max<int64_t>(ow * sW - pW, 0), w1 = std::min(ow * sW - pW + kW, W);
        T best = xp[h0 * W + w0];
        int64_t bi = h0 * W + w0;
        for (int64_t h = h0; h < h1; ++h)
          for (int64_t w = w0; w < w1; ++w) max_step(xp[h * W + w], h * W + w, best, bi);
        yp[oh * g.OW + ow] = best;
        ip[oh * g.OW + ow] = bi;
      });
}

/// Max and flat argmax of rows h0, h0 + dh, ... < h1 and columns w0, w0 + dw, ... < w1 of a
/// plane (row length W), max_step's rule: the dilated and the adaptive planes' scan.
template <class T>
inline void scan_window(const T* xp, int64_t W, int64_t h0, int64_t h1, int64_t dh, int64_t w0, int64_t w1,
                        int64_t dw, T& y, int64_t& idx) {
  T best = xp[h0 * W + w0];
  int64_t bi = h0 * W + w0;
  for (int64_t h = h0; h < h1; h += dh)
    for (int64_t w = w0; w < w1; w += dw) max_step(xp[h * W + w], h * W + w, best, bi);
  y = best;
  idx = bi;
}

/// One plane of max pooling with dilation (taps dH, dW apart): PyTorch's loop, no fast
/// path (kept apart from ops/cuda/pool_index.h, which the GPU emulation test checks against
/// it). Each window starts at its first tap inside the input (pool_geom guarantees one).
template <class T>
void max_pool_plane_dilated(const Pool2dGeom& g, const T* __restrict xp, T* __restrict yp, int64_t* __restrict ip) {
  auto first = [](int64_t a, int64_t d) {
    while (a < 0) a += d;
    return a;
  };
  for (int64_t oh = 0; oh < g.OH; ++oh) {
    const int64_t hs = oh * g.sH - g.pH, h0 = first(hs, g.dH), h1 = std::min(hs + (g.kH - 1) * g.dH + 1, g.H);
    for (int64_t ow = 0; ow < g.OW; ++ow) {
      const int64_t ws = ow * g.sW - g.pW, w0 = first(ws, g.dW), w1 = std::min(ws + (g.kW - 1) * g.dW + 1, g.W);
      scan_window(xp, g.W, h0, h1, g.dH, w0, w1, g.dW, yp[oh * g.OW + ow], ip[oh * g.OW + ow]);
    }
  }
}

/// kB windows of 2x2 max pooling, stride 2: window j covers r0[2j, 2j+2) and r1[2j, 2j+2),
/// scanned in the generic kernel's order (same winner on ties and NaN); y[j] gets the max
/// and idx[j] = base + offset of the winner (r1 is r0 + W). Fixed trip count and restrict
/// pointers: the four-way select vectorises (not inlined: inlined into the row loop, GCC
/// unrolls the block before its vectoriser sees it and emits scalar branches). The offsets
/// are as wide as T (int16 for the 16-bit order keys of max_pool_forward_t: W < 32767), so
/// the selects stay in one vector width.
template <class T, int64_t kB>
[[gnu::noinline]] void max_2x2_block(const T* __restrict r0, const T* __restrict r1, int32_t W32, int64_t base,
                                     T* __restrict y, int64_t* __restrict idx) {
  using I = std::conditional_t<sizeof(T) == 2, int16_t, int32_t>;
  const I W = I(W32);
  T best[kB];
  I bi[kB];
  for (int64_t j = 0; j < kB; ++j) {
    T m = r0[2 * j];
    I k = 0;
    max_step(r0[2 * j + 1], I(1), m, k);
    max_step(r1[2 * j], W, m, k);
    max_step(r1[2 * j + 1], I(W + 1), m, k);
    best[j] = m;
    bi[j] = k;
  }
  for (int64_t j = 0; j < kB; ++j) {
    y[j] = best[j];
    idx[j] = base + 2 * j + bi[j];
  }
}

/// One plane of 2x2 max pooling with stride 2 and no padding (LeNet's and most CNNs'), in
/// blocks of kB windows (the generic loop runs scalar, with branches, on planes narrower
/// than a vector). Rows narrower than a block are copied into a padded buffer first.
template <class T>
void max_pool_2x2_plane(const Pool2dGeom& g, const T* __restrict xp, T* __restrict yp, int64_t* __restrict ip) {
  constexpr int64_t kB = 8;
  const int64_t W = g.W, OW = g.OW;
  for (int64_t oh = 0; oh < g.OH; ++oh) {
    const T* r0 = xp + 2 * oh * W;  // the windows' two input rows
    T* yr = yp + oh * OW;
    int64_t* ir = ip + oh * OW;
    const int64_t base = 2 * oh * W;
    if (OW < kB) {  // rows (r0 | r1) in one buffer, padded; only OW results are kept
      T buf[4 * kB] = {};
      T yb[kB];
      int64_t ib[kB];
      std::copy(r0, r0 + 2 * OW, buf);
      std::copy(r0 + W, r0 + W + 2 * OW, buf + 2 * kB);
      max_2x2_block<T, kB>(buf, buf + 2 * kB, int32_t(W), base, yb, ib);
      std::copy(yb, yb + OW, yr);
      std::copy(ib, ib + OW, ir);
      continue;
    }
    int64_t ow0 = 0;
    for (; ow0 + kB <= OW; ow0 += kB)
      max_2x2_block<T, kB>(r0 + 2 * ow0, r0 + W + 2 * ow0, int32_t(W), base + 2 * ow0, yr + ow0, ir + ow0);
    if (ow0 < OW) {  // overlapping tail block (recomputes a few windows, same values)
      ow0 = OW - kB;
      max_2x2_block<T, kB>(r0 + 2 * ow0, r0 + W + 2 * ow0, int32_t(W), base + 2 * ow0, yr + ow0, ir + ow0);
    }
  }
}

/// The type a pooling kernel computes in: X itself, float32 for a 16-bit X.
template <class X>
using PoolT = std::conditional_t<std::is_same_v<X, Half> || std::is_same_v<X, BFloat16>, float, X>;

/// Runs body(in_plane, out_plane, p) over the P planes in parallel, in (P, n_in) and out
/// (P, n_out). A 16-bit X is widened a plane at a time into per-thread float32 buffers and
/// the result rounded back: the bits of converting the whole tensor first (a max is one of
/// its inputs; a mean or a gradient sum is rounded once), without the float32 copies.
/// bits(in_plane, out_plane, p), when given, is tried first on a 16-bit plane: it computes
/// the plane on the 16-bit patterns and returns true, or returns false to leave it to body.
template <class X, class Body, class Bits = std::nullptr_t>
void over_planes(const Pool2dGeom& g, int64_t n_in, int64_t n_out, const X* in, X* out, const Body& body,
                 const Bits& bits = nullptr) {
  parallel_for(0, g.P, plane_grain(g), [&](int64_t p0, int64_t p1) {
    if constexpr (std::is_same_v<PoolT<X>, X>) {
      for (int64_t p = p0; p < p1; ++p) body(in + p * n_in, out + p * n_out, p);
    } else {
      thread_local std::vector<float> ib, ob;
      ib.resize(size_t(n_in));
      ob.resize(size_t(n_out));
      for (int64_t p = p0; p < p1; ++p) {
        if constexpr (!std::is_same_v<Bits, std::nullptr_t>)
          if (bits(in + p * n_in, out + p * n_out, p)) continue;
        convert_floats(in + p * n_in, ib.data(), n_in);
        body(static_cast<const float*>(ib.data()), ob.data(), p);
        convert_floats(ob.data(), out + p * n_out, n_out);
      }
    }
  });
}

/// 2x2 windows, stride 2, no padding, no dilation, no partial window at the end (ceil_mode
/// on an odd size): max_pool_2x2_plane's case.
inline bool is_2x2_stride2(const Pool2dGeom& g) {
  return g.kH == 2 && g.kW == 2 && g.sH == 2 && g.sW == 2 && g.pH == 0 && g.pW == 0 && g.dH == 1 && g.dW == 1 &&
         2 * g.OH <= g.H && 2 * g.OW <= g.W;
}

/// A 16-bit float's pattern as an int16 that orders as the values do: sign and magnitude to
/// two's complement, -0 and +0 both 0 (equal, as in float32). For values that are not NaN.
template <class X>
inline int16_t order_key16(X v) {
  const int16_t s = int16_t(v.bits) >> 15;  // 0 or -1
  return int16_t((int16_t(v.bits & 0x7fff) ^ s) - s);
}

template <class X>
void max_pool_forward_t(const Pool2dGeom& g, const X* x, X* y, int64_t* idx) {
  using T = PoolT<X>;
  const int64_t n_in = g.H * g.W, n_out = g.OH * g.OW;
  auto plane = &max_pool_plane<T, 0, 0, 0>;
  if (g.dH != 1 || g.dW != 1) plane = &max_pool_plane_dilated<T>;
  else if (is_2x2_stride2(g)) plane = &max_pool_2x2_plane<T>;
  else if (g.kH == 2 && g.kW == 2 && g.sW == 2) plane = &max_pool_plane<T, 2, 2, 2>;
  else if (g.kH == 3 && g.kW == 3 && g.sW == 2) plane = &max_pool_plane<T, 3, 3, 2>;
  else if (g.kH == 3 && g.kW == 3) plane = &max_pool_plane<T, 3, 3, 0>;
  auto body = [&](const T* xp, T* yp, int64_t p) { plane(g, xp, yp, idx + p * n_out); };
  if constexpr (kIs16<X>) {
    // 2x2/2 pooling of a plane without inf or NaN runs on order keys (the same kernel on
    // int16, so the same winners: ties keep the first, as in float32) and each output is
    // the winner's bit pattern: nothing converted. Other planes take the float32 path.
    const bool keys = is_2x2_stride2(g) && g.W < 32767;  // offsets W + 1 in int16
    auto bits = [&](const X* xp, X* yp, int64_t p) {
      if (!keys || !all_finite16(xp, n_in)) return false;
      thread_local std::vector<int16_t> kx, ky;
      kx.resize(size_t(n_in));
      ky.resize(size_t(n_out));
      int16_t* __restrict k = kx.data();
      for (int64_t i = 0; i < n_in; ++i) k[i] = order_key16(xp[i]);
      int64_t* ip = idx + p * n_out;
      max_pool_2x2_plane<int16_t>(g, k, ky.data(), ip);
      for (int64_t i = 0; i < n_out; ++i) yp[i] = xp[ip[i]];
      return true;
    };
    return over_planes(g, n_in, n_out, x, y, body, bits);
  }
  over_planes(g, n_in, n_out, x, y, body);
}

/// dx = dy scattered to idx, in ascending output order. disjoint: no input lies in two
/// windows (then a 16-bit plane is a scatter of bit patterns).
template <class X>
void max_pool_backward_t(const Pool2dGeom& g, const X* dy, const int64_t* idx, X* dx, bool disjoint) {
  using T = PoolT<X>;
  const int64_t n_out = g.OH * g.OW, n_in = g.H * g.W;
  auto body = [&](const T* dyp, T* dxp, int64_t p) {
    const int64_t* ip = idx + p * n_out;
    std::fill(dxp, dxp + n_in, T(0));
    for (int64_t i = 0; i < n_out; ++i) dxp[ip[i]] += dyp[i];
  };
  if constexpr (kIs16<X>) {
    // Windows that do not overlap (LeNet's and ConvNet's 2x2/2) give each
    // input at most one dy: its gradient is 0 + dy, i.e. dy's bit pattern (-0 becomes +0),
    // so a plane of finite dy is a scatter of 16-bit patterns, nothing converted.
    if (disjoint) {
      auto bits = [&](const X* dyp, X* dxp, int64_t p) {
        if (!all_finite16(dyp, n_out)) return false;
        const int64_t* ip = idx + p * n_out;
        std::memset(static_cast<void*>(dxp), 0, size_t(n_in) * sizeof(X));  // +0
        for (int64_t i = 0; i < n_out; ++i) dxp[ip[i]].bits = dyp[i].bits == 0x8000 ? 0 : dyp[i].bits;
        return true;
      };
      return over_planes(g, n_out, n_in, dy, dx, body, bits);
    }
  }
  over_planes(g, n_out, n_in, dy, dx, body);
}

/// Window of output (oh, ow) clipped to the input, and its divisor: with count_include_pad
/// the window clipped to the padded input (PyTorch's pool_size), else the real elements.
struct AvgWindow {
  int64_t h0, h1, w0, w1, div;
};
inline AvgWindow avg_window(const Pool2dGeom& g, bool count_include_pad, int64_t oh, int64_t ow) {
  int64_t h0 = oh * g.sH - g.pH, w0 = ow * g.sW - g.pW;
  int64_t h1 = std::min(h0 + g.kH, g.H + g.pH), w1 = std::min(w0 + g.kW, g.W + g.pW);
  const int64_t pool = (h1 - h0) * (w1 - w0);
  h0 = std::max<int64_t>(h0, 0);
  w0 = std::max<int64_t>(w0, 0);
  h1 = std::min(h1, g.H);
  w1 = std::min(w1, g.W);
  const int64_t div = count_include_pad ? pool : (h1 - h0) * (w1 - w0);
  return {h0, h1, w0, w1, std::max<int64_t>(div, 1)};
}

template <class T>
inline T window_sum(const T* xp, int64_t W, int64_t h0, int64_t h1, int64_t w0, int64_t w1) {
  T s = T(0);
  for (int64_t h = h0; h < h1; ++h)
    for (int64_t w = w0; w < w1; ++w) s += xp[h * W + w];
  return s;
}

template <class T, int KH, int KW, int SW>
void avg_pool_plane(const Pool2dGeom& g, bool cip, const T* __restrict xp, T* __restrict yp) {
  const int64_t kH = KH > 0 ? KH : g.kH, kW = KW > 0 ? KW : g.kW, W = g.W, sW = SW > 0 ? SW : g.sW, pW = g.pW;
  const T full = T(kH * kW);  // divisor of an interior window in both modes
  for_each_window(
      g,
      [&](int64_t oh, int64_t lo, int64_t hi, int64_t h0) {
        const T* r = xp + h0 * W;
        T* yr = yp + oh * g.OW;
        for (int64_t ow = lo; ow < hi; ++ow) {
          const int64_t w0 = ow * sW - pW;
          T s = T(0);
          for (int64_t kh = 0; kh < kH; ++kh)
            for (int64_t kw = 0; kw < kW; ++kw) s += r[kh * W + w0 + kw];
          yr[ow] = s / full;
        }
      },
      [&](int64_t oh, int64_t ow) {
        const AvgWindow a = avg_window(g, cip, oh, ow);
        yp[oh * g.OW + ow] = window_sum(xp, W, a.h0, a.h1, a.w0, a.w1) / T(a.div);
      });
}

template <class X>
void avg_pool_forward_t(const Pool2dGeom& g, bool cip, const X* x, X* y) {
  using T = PoolT<X>;
  auto plane = &avg_pool_plane<T, 0, 0, 0>;
  if (g.kH == 2 && g.kW == 2 && g.sW == 2) plane = &avg_pool_plane<T, 2, 2, 2>;
  else if (g.kH == 3 && g.kW == 3) plane = &avg_pool_plane<T, 3, 3, 0>;
  over_planes(g, g.H * g.W, g.OH * g.OW, x, y, [&](const T* xp, T* yp, int64_t) { plane(g, cip, xp, yp); });
}

template <class X>
void avg_pool_backward_t(const Pool2dGeom& g, bool cip, const X* dy, X* dx) {
  using T = PoolT<X>;
  over_planes(g, g.OH * g.OW, g.H * g.W, dy, dx, [&](const T* dyp, T* dxp, int64_t) {
    std::fill(dxp, dxp + g.H * g.W, T(0));
    const T full = T(g.kH * g.kW);
    auto spread = [&](T v, int64_t h0, int64_t h1, int64_t w0, int64_t w1) {
      for (int64_t h = h0; h < h1; ++h)
        for (int64_t w = w0; w < w1; ++w) dxp[h * g.W + w] += v;
    };
    for_each_window(
        g,
        [&](int64_t oh, int64_t lo, int64_t hi, int64_t h0) {
          for (int64_t ow = lo; ow < hi; ++ow) {
            const int64_t w0 = ow * g.sW - g.pW;
            spread(dyp[oh * g.OW + ow] / full, h0, h0 + g.kH, w0, w0 + g.kW);
          }
        },
        [&](int64_t oh, int64_t ow) {
          const AvgWindow a = avg_window(g, cip, oh, ow);
          spread(dyp[oh * g.OW + ow] / T(a.div), a.h0, a.h1, a.w0, a.w1);
        });
  });
}

// PyTorch's adaptive bins: [floor(i*n/out), ceil((i+1)*n/out)).
inline int64_t bin_start(int64_t i, int64_t n, int64_t out) { return (i * n) / out; }
inline int64_t bin_end(int64_t i, int64_t n, int64_t out) { return ((i + 1) * n + out - 1) / out; }

template <class X>
void adaptive_avg_forward_t(const Pool2dGeom& g, const X* x, X* y) {
  using T = PoolT<X>;
  over_planes(g, g.H * g.W, g.OH * g.OW, x, y, [&](const T* xp, T* yp, int64_t) {
    for (int64_t oh = 0; oh < g.OH; ++oh) {
      const int64_t h0 = bin_start(oh, g.H, g.OH), h1 = bin_end(oh, g.H, g.OH);
      for (int64_t ow = 0; ow < g.OW; ++ow) {
        const int64_t w0 = bin_start(ow, g.W, g.OW), w1 = bin_end(ow, g.W, g.OW);
        T s = T(0);
        for (int64_t h = h0; h < h1; ++h)
          for (int64_t w = w0; w < w1; ++w) s += xp[h * g.W + w];
        yp[oh * g.OW + ow] = s / T((h1 - h0) * (w1 - w0));
      }
    }
  });
}

template <class X>
void adaptive_avg_backward_t(const Pool2dGeom& g, const X* dy, X* dx) {
  using T = PoolT<X>;
  over_planes(g, g.OH * g.OW, g.H * g.W, dy, dx, [&](const T* dyp, T* dxp, int64_t) {
    std::fill(dxp, dxp + g.H * g.W, T(0));
    for (int64_t oh = 0; oh < g.OH; ++oh) {
      const int64_t h0 = bin_start(oh, g.H, g.OH), h1 = bin_end(oh, g.H, g.OH);
      for (int64_t ow = 0; ow < g.OW; ++ow) {
        const int64_t w0 = bin_start(ow, g.W, g.OW), w1 = bin_end(ow, g.W, g.OW);
        const T v = dyp[oh * g.OW + ow] / T((h1 - h0) * (w1 - w0));
        for (int64_t h = h0; h < h1; ++h)
          for (int64_t w = w0; w < w1; ++w) dxp[h * g.W + w] += v;
      }
    }
  });
}

template <class X>
void adaptive_max_forward_t(const Pool2dGeom& g, const X* x, X* y, int64_t* idx) {
  using T = PoolT<X>;
  const int64_t n_out = g.OH * g.OW;
  over_planes(g, g.H * g.W, n_out, x, y, [&](const T* xp, T* yp, int64_t p) {
    int64_t* ip = idx + p * n_out;
    for (int64_t oh = 0; oh < g.OH; ++oh) {
      const int64_t h0 = bin_start(oh, g.H, g.OH), h1 = bin_end(oh, g.H, g.OH);
      for (int64_t ow = 0; ow < g.OW; ++ow) {
        const int64_t w0 = bin_start(ow, g.W, g.OW), w1 = bin_end(ow, g.W, g.OW);
        scan_window(xp, g.W, h0, h1, 1, w0, w1, 1, yp[oh * g.OW + ow], ip[oh * g.OW + ow]);
      }
    }
  });
}

/// Calls f.template operator()<X>() with the storage type of dtype d: float32, float64, or
/// a 16-bit float (computed in float32 a plane at a time, over_planes).
template <class F>
void dispatch_pool(DType d, const char* op, F&& f) {
  if (d == DType::bfloat16) return f.template operator()<BFloat16>();
  if (d == DType::float16) return f.template operator()<Half>();
  KILN_DISPATCH_FLOATING(d, op, f);
}

void max_pool_forward_cpu(DType dtype, const Pool2dGeom& g, const void* x, void* y, int64_t* idx) {
  dispatch_pool(dtype, "max_pool2d", [&]<class T>() {
    max_pool_forward_t<T>(g, static_cast<const T*>(x), static_cast<T*>(y), idx);
  });
}
void max_pool_backward_cpu(DType dtype, const Pool2dGeom& g, const void* dy, const int64_t* idx, void* dx) {
  // windows are disjoint when their dilated extent fits in the stride
  const bool disjoint = (g.kH - 1) * g.dH + 1 <= g.sH && (g.kW - 1) * g.dW + 1 <= g.sW;
  dispatch_pool(dtype, "max_pool2d", [&]<class T>() {
    max_pool_backward_t<T>(g, static_cast<const T*>(dy), idx, static_cast<T*>(dx), disjoint);
  });
}
void adaptive_max_forward_cpu(DType dtype, const Pool2dGeom& g, const void* x, void* y, int64_t* idx) {
  dispatch_pool(dtype, "adaptive_max_pool2d", [&]<class T>() {
    adaptive_max_forward_t<T>(g, static_cast<const T*>(x), static_cast<T*>(y), idx);
  });
}
void adaptive_max_backward_cpu(DType dtype, const Pool2dGeom& g, const void* dy, const int64_t* idx, void* dx) {
  dispatch_pool(dtype, "adaptive_max_pool2d", [&]<class T>() {  // bins may overlap
    max_pool_backward_t<T>(g, static_cast<const T*>(dy), idx, static_cast<T*>(dx), false);
  });
}
void avg_pool_forward_cpu(DType dtype, const Pool2dGeom& g, bool cip, const void* x, void* y) {
  dispatch_pool(dtype, "avg_pool2d", [&]<class T>() {
    avg_pool_forward_t<T>(g, cip, static_cast<const T*>(x), static_cast<T*>(y));
  });
}
void avg_pool_backward_cpu(DType dtype, const Pool2dGeom& g, bool cip, const void* dy, void* dx) {
  dispatch_pool(dtype, "avg_pool2d", [&]<class T>() {
    avg_pool_backward_t<T>(g, cip, static_cast<const T*>(dy), static_cast<T*>(dx));
  });
}
void adaptive_avg_forward_cpu(DType dtype, const Pool2dGeom& g, const void* x, void* y) {
  dispatch_pool(dtype, "adaptive_avg_pool2d", [&]<class T>() {
    adaptive_avg_forward_t<T>(g, static_cast<const T*>(x), static_cast<T*>(y));
  });
}
void adaptive_avg_backward_cpu(DType dtype, const Pool2dGeom& g, const void* dy, void* dx) {
  dispatch_pool(dtype, "adaptive_avg_pool2d", [&]<class T>() {
    adaptive_avg_backward_t<T>(g, static_cast<const T*>(dy), static_cast<T*>(dx));
  });
}

const MaxPool2dKernels kMaxPoolCpu{&max_pool_forward_cpu, &max_pool_backward_cpu};
const AvgPool2dKernels kAvgPoolCpu{&avg_pool_forward_cpu, &avg_pool_backward_cpu};
const AdaptiveAvgPool2dKernels kAdaptiveAvgPoolCpu{&adaptive_avg_forward_cpu, &adaptive_avg_backward_cpu};
const MaxPool2dKernels kAdaptiveMaxPoolCpu{&adaptive_max_forward_cpu, &adaptive_max_backward_cpu};

}  // namespace

void register_cpu_pool() {
  // Each entry is a table of function pointers (forward, backward), see ops/kernels/conv.h.
  register_kernel(Op::max_pool2d, DeviceType::CPU, &kMaxPoolCpu);
  register_kernel(Op::avg_pool2d, DeviceType::CPU, &kAvgPoolCpu);
  register_kernel(Op::adaptive_avg_pool2d, DeviceType::CPU, &kAdaptiveAvgPoolCpu);
  register_kernel(Op::adaptive_max_pool2d, DeviceType::CPU, &kAdaptiveMaxPoolCpu);
}

}  // namespace kiln
