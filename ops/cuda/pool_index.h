// Window and bin math of the GPU pooling kernels (ops/cuda/conv.cu), shared with the CPU
// test that emulates their grids (tests/cuda/test_cuda_pool_index.cpp). Forward: one thread
// per output (p, oh, ow); backward: one thread per input (p, h, w) gathering the windows
// that contain it, in ascending (oh, ow) order - the order in which the CPU scatters - so
// the sums match the CPU's bit for bit and need no atomics.
#pragma once
#include <cstdint>
#include "kiln/core/macros.h"
#include "kiln/ops/kernels/conv.h"

namespace kiln::cuda {

KILN_HD_INLINE int64_t pool_min(int64_t a, int64_t b) { return a < b ? a : b; }
KILN_HD_INLINE int64_t pool_max(int64_t a, int64_t b) { return a > b ? a : b; }

/// Splits the flat index i of a (P, A, B) buffer into (p, a, b).
KILN_HD_INLINE void split3(int64_t i, int64_t A, int64_t B, int64_t& p, int64_t& a, int64_t& b) {
  b = i % B;
  const int64_t q = i / B;
  a = q % A;
  p = q / A;
}

/// Outputs o in [lo, hi) whose window [o*s - pad, o*s - pad + k) contains input position i
/// (out outputs along this axis).
KILN_HD_INLINE void windows_containing(int64_t i, int64_t k, int64_t s, int64_t pad, int64_t out, int64_t& lo,
                                       int64_t& hi) {
  // o*s <= i + pad  and  o*s > i + pad - k
  const int64_t a = i + pad - k + 1;  // o >= ceil(a / s)
  lo = a <= 0 ? 0 : (a + s - 1) / s;
  hi = pool_min(out, (i + pad) / s + 1);
  if (hi < lo) hi = lo;
}

/// First tap at or after 0 of a window starting at a with taps d apart.
KILN_HD_INLINE int64_t first_tap(int64_t a, int64_t d) { return a >= 0 ? a : a + ((-a + d - 1) / d) * d; }

/// Max pooling window of output (oh, ow): its taps inside the input are h0, h0 + dH, ...
/// below h1 (and likewise along w). Never empty (pool_geom checks it; with dilation 1
/// padding <= kernel/2 suffices).
struct PoolWindow {
  int64_t h0, h1, w0, w1;
};
KILN_HD_INLINE PoolWindow max_window(const Pool2dGeom& g, int64_t oh, int64_t ow) {
  const int64_t h = oh * g.sH - g.pH, w = ow * g.sW - g.pW;
  return {first_tap(h, g.dH), pool_min(h + (g.kH - 1) * g.dH + 1, g.H), first_tap(w, g.dW),
          pool_min(w + (g.kW - 1) * g.dW + 1, g.W)};
}

/// Max and flat argmax h*W + w over rows h0, h0 + dh, ... < h1 and columns w0, w0 + dw, ...
/// < w1 of plane xp (row length W): the first maximum wins, a NaN propagates (the CPU's
/// max_step: take when v > best or v is NaN).
template <class T, class A>
KILN_HD_INLINE void window_max(const T* xp, int64_t W, int64_t h0, int64_t h1, int64_t dh, int64_t w0, int64_t w1,
                               int64_t dw, T& y, int64_t& idx) {
  A best = A(xp[h0 * W + w0]);
  int64_t bi = h0 * W + w0;
  for (int64_t h = h0; h < h1; h += dh)
    for (int64_t w = w0; w < w1; w += dw) {
      const A v = A(xp[h * W + w]);
      if (v > best || v != v) {
        best = v;
        bi = h * W + w;
      }
    }
  y = T(best);
  idx = bi;
}

/// The sum of dy over outputs [oh0, oh1) x [ow0, ow1) (row length OW) whose argmax is `me`,
/// in ascending output order (the CPU's scatter order).
template <class T, class A>
KILN_HD_INLINE T argmax_gather(const T* dyp, const int64_t* ip, int64_t OW, int64_t oh0, int64_t oh1, int64_t ow0,
                               int64_t ow1, int64_t me) {
  A s = A(0);
  for (int64_t oh = oh0; oh < oh1; ++oh)
    for (int64_t ow = ow0; ow < ow1; ++ow)
      if (ip[oh * OW + ow] == me) s += A(dyp[oh * OW + ow]);
  return T(s);
}

/// Max and flat argmax of one max-pooling window of plane xp (window_max over its taps).
template <class T, class A>
KILN_HD_INLINE void max_pool_out(const Pool2dGeom& g, const T* xp, int64_t oh, int64_t ow, T& y, int64_t& idx) {
  const PoolWindow b = max_window(g, oh, ow);
  window_max<T, A>(xp, g.W, b.h0, b.h1, g.dH, b.w0, b.w1, g.dW, y, idx);
}

/// dx at (h, w) of one plane: the sum of dy over the windows whose argmax is h*W + w (the
/// windows whose span, dilated, covers (h, w); the argmax test drops those that skip it).
template <class T, class A>
KILN_HD_INLINE T max_pool_dx(const Pool2dGeom& g, const T* dyp, const int64_t* ip, int64_t h, int64_t w) {
  int64_t oh0, oh1, ow0, ow1;
  windows_containing(h, (g.kH - 1) * g.dH + 1, g.sH, g.pH, g.OH, oh0, oh1);
  windows_containing(w, (g.kW - 1) * g.dW + 1, g.sW, g.pW, g.OW, ow0, ow1);
  return argmax_gather<T, A>(dyp, ip, g.OW, oh0, oh1, ow0, ow1, h * g.W + w);
}

/// Average pooling window of (oh, ow) clipped to the input, and its divisor: with
/// count_include_pad the window clipped to the padded input, else the real elements
/// (the CPU's avg_window).
struct AvgPoolWindow {
  int64_t h0, h1, w0, w1, div;
};
KILN_HD_INLINE AvgPoolWindow avg_window(const Pool2dGeom& g, bool count_include_pad, int64_t oh, int64_t ow) {
  int64_t h0 = oh * g.sH - g.pH, w0 = ow * g.sW - g.pW;
  int64_t h1 = pool_min(h0 + g.kH, g.H + g.pH), w1 = pool_min(w0 + g.kW, g.W + g.pW);
  const int64_t pool = (h1 - h0) * (w1 - w0);
  h0 = pool_max(h0, 0);
  w0 = pool_max(w0, 0);
  h1 = pool_min(h1, g.H);
  w1 = pool_min(w1, g.W);
  const int64_t div = count_include_pad ? pool : (h1 - h0) * (w1 - w0);
  return {h0, h1, w0, w1, pool_max(div, 1)};
}

template <class T, class A>
KILN_HD_INLINE T avg_pool_out(const Pool2dGeom& g, bool count_include_pad, const T* xp, int64_t oh, int64_t ow) {
  const AvgPoolWindow b = avg_window(g, count_include_pad, oh, ow);
  A s = A(0);
  for (int64_t h = b.h0; h < b.h1; ++h)
    for (int64_t w = b.w0; w < b.w1; ++w) s += A(xp[h * g.W + w]);
  return T(s / A(b.div));
}

/// dx at (h, w): sum of dy / divisor over the windows that contain (h, w).
template <class T, class A>
KILN_HD_INLINE T avg_pool_dx(const Pool2dGeom& g, bool count_include_pad, const T* dyp, int64_t h, int64_t w) {
  int64_t oh0, oh1, ow0, ow1;
  windows_containing(h, g.kH, g.sH, g.pH, g.OH, oh0, oh1);
  windows_containing(w, g.kW, g.sW, g.pW, g.OW, ow0, ow1);
  A s = A(0);
  for (int64_t oh = oh0; oh < oh1; ++oh)
    for (int64_t ow = ow0; ow < ow1; ++ow) {
      // The window may reach into the padding: its divisor is the clipped one.
      s += A(dyp[oh * g.OW + ow]) / A(avg_window(g, count_include_pad, oh, ow).div);
    }
  return T(s);
}

/// PyTorch's adaptive bins along one axis: bin i of out covers [floor(i*n/out), ceil((i+1)*n/out)).
KILN_HD_INLINE int64_t adaptive_start(int64_t i, int64_t n, int64_t out) { return (i * n) / out; }
KILN_HD_INLINE int64_t adaptive_end(int64_t i, int64_t n, int64_t out) { return ((i + 1) * n + out - 1) / out; }

/// Bins [lo, hi) that contain input position i: floor(i*out/n) <= bin < ceil((i+1)*out/n).
KILN_HD_INLINE void bins_containing(int64_t i, int64_t n, int64_t out, int64_t& lo, int64_t& hi) {
  lo = (i * out) / n;
  hi = pool_min(out, ((i + 1) * out + n - 1) / n);
}

template <class T, class A>
KILN_HD_INLINE T adaptive_avg_out(const Pool2dGeom& g, const T* xp, int64_t oh, int64_t ow) {
  const int64_t h0 = adaptive_start(oh, g.H, g.OH), h1 = adaptive_end(oh, g.H, g.OH);
  const int64_t w0 = adaptive_start(ow, g.W, g.OW), w1 = adaptive_end(ow, g.W, g.OW);
  A s = A(0);
  for (int64_t h = h0; h < h1; ++h)
    for (int64_t w = w0; w < w1; ++w) s += A(xp[h * g.W + w]);
  return T(s / A((h1 - h0) * (w1 - w0)));
}

template <class T, class A>
KILN_HD_INLINE T adaptive_avg_dx(const Pool2dGeom& g, const T* dyp, int64_t h, int64_t w) {
  int64_t oh0, oh1, ow0, ow1;
  bins_containing(h, g.H, g.OH, oh0, oh1);
  bins_containing(w, g.W, g.OW, ow0, ow1);
  A s = A(0);
  for (int64_t oh = oh0; oh < oh1; ++oh) {
    const int64_t nh = adaptive_end(oh, g.H, g.OH) - adaptive_start(oh, g.H, g.OH);
    for (int64_t ow = ow0; ow < ow1; ++ow) {
      const int64_t nw = adaptive_end(ow, g.W, g.OW) - adaptive_start(ow, g.W, g.OW);
      s += A(dyp[oh * g.OW + ow]) / A(nh * nw);
    }
  }
  return T(s);
}

/// Max and flat argmax of adaptive bin (oh, ow), max_pool_out's rule.
template <class T, class A>
KILN_HD_INLINE void adaptive_max_out(const Pool2dGeom& g, const T* xp, int64_t oh, int64_t ow, T& y, int64_t& idx) {
  window_max<T, A>(xp, g.W, adaptive_start(oh, g.H, g.OH), adaptive_end(oh, g.H, g.OH), 1,
                   adaptive_start(ow, g.W, g.OW), adaptive_end(ow, g.W, g.OW), 1, y, idx);
}

/// dx at (h, w): the sum of dy over the bins whose argmax is h*W + w, in ascending bin order.
template <class T, class A>
KILN_HD_INLINE T adaptive_max_dx(const Pool2dGeom& g, const T* dyp, const int64_t* ip, int64_t h, int64_t w) {
  int64_t oh0, oh1, ow0, ow1;
  bins_containing(h, g.H, g.OH, oh0, oh1);
  bins_containing(w, g.W, g.OW, ow0, ow1);
  return argmax_gather<T, A>(dyp, ip, g.OW, oh0, oh1, ow0, ow1, h * g.W + w);
}

}  // namespace kiln::cuda
