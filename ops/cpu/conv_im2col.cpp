// conv2d on the CPU as im2col + GEMM (gemm_cpu), and the input gradient as GEMM + col2im:
// the general algorithm. conv.cpp chooses it for what the direct kernels (conv_direct.cpp)
// and the wide stride-1 layout (conv_wide.cpp) do not take: strides above 1, 1x1
// pointwise convolutions (whose input is already their column matrix), and stride-1
// layers whose GEMM depth C*kH*kW is below their output channels.
#include <algorithm>
#include <cstring>
#include <vector>
#include "kiln/ops/cpu/conv_algos.h"
#include "kiln/ops/kernels/linalg.h"

namespace kiln::conv_cpu {

namespace {

// ------------------------------------------------------------------ im2col / col2im

/// d[0, n) = s[0, n): runs shorter than 32 bytes inline (a fixed trip count, which GCC
/// does not turn into a memcpy call), longer ones one memcpy.
template <class T>
inline void copy_run(T* __restrict d, const T* __restrict s, int64_t n) {
  constexpr int64_t B = 32 / sizeof(T);
  if (n >= B) {
    std::memcpy(d, s, size_t(n) * sizeof(T));
    return;
  }
  for (int64_t i = 0; i < B; ++i)
    if (i < n) d[i] = s[i];
}

/// d[0, n) = 0; the short runs (padding columns) without a memset call.
template <class T>
inline void zero_run(T* d, int64_t n) {
  constexpr int64_t B = 32 / sizeof(T);
  if (n >= B) {
    std::memset(d, 0, size_t(n) * sizeof(T));
    return;
  }
  for (int64_t i = 0; i < B; ++i)
    if (i < n) d[i] = T(0);
}

/// First output index o in [0, n) with o*s + off >= 0, and first with o*s + off >= lim
/// (so o*s + off lies in [0, lim) for o in [lo, hi)).
inline void valid_range(int64_t off, int64_t s, int64_t lim, int64_t n, int64_t& lo, int64_t& hi) {
  auto ceil_div_pos = [](int64_t a, int64_t b) { return a <= 0 ? int64_t(0) : (a + b - 1) / b; };
  lo = std::min(ceil_div_pos(-off, s), n);
  hi = std::max(lo, std::min(ceil_div_pos(lim - off, s), n));
}

/// cols (C*kH*kW, OH*OW) for input channels [c0, c1) of one sample x (C, H, W).
template <class T>
void im2col(const T* x, const Conv2dGeom& g, int64_t c0, int64_t c1, T* cols) {
  const int64_t L = g.OH * g.OW, OW = g.OW;
  for (int64_t c = c0; c < c1; ++c) {
    const T* xc = x + c * g.H * g.W;  // (H, W)
    for (int64_t kh = 0; kh < g.kH; ++kh) {
      const int64_t hoff = kh * g.dH - g.pH;
      int64_t oh_lo, oh_hi;  // output rows whose input row oh*sH + hoff is inside
      valid_range(hoff, g.sH, g.H, g.OH, oh_lo, oh_hi);
      for (int64_t kw = 0; kw < g.kW; ++kw) {
        T* row = cols + ((c * g.kH + kh) * g.kW + kw) * L;  // (OH, OW)
        const int64_t woff = kw * g.dW - g.pW;
        int64_t lo, hi;
        valid_range(woff, g.sW, g.W, OW, lo, hi);
        zero_run(row, oh_lo * OW);
        zero_run(row + oh_hi * OW, (g.OH - oh_hi) * OW);
        for (int64_t oh = oh_lo; oh < oh_hi; ++oh) {
          T* r = row + oh * OW;
          const T* xr = xc + (oh * g.sH + hoff) * g.W;  // input row; column of ow is ow*sW + woff
          zero_run(r, lo);
          if (g.sW == 1) copy_run(r + lo, xr + lo + woff, hi - lo);
          else
            for (int64_t ow = lo; ow < hi; ++ow) r[ow] = xr[ow * g.sW + woff];
          zero_run(r + hi, OW - hi);
        }
      }
    }
  }
}

/// dx (C, H, W) += col2im(dcols (C*kH*kW, OH*OW)) for channels [c0, c1).
template <class T>
void col2im_add(const T* cols, const Conv2dGeom& g, int64_t c0, int64_t c1, T* dx) {
  const int64_t L = g.OH * g.OW;
  for (int64_t c = c0; c < c1; ++c) {
    T* xc = dx + c * g.H * g.W;
    for (int64_t kh = 0; kh < g.kH; ++kh) {
      for (int64_t kw = 0; kw < g.kW; ++kw) {
        const T* row = cols + ((c * g.kH + kh) * g.kW + kw) * L;
        const int64_t woff = kw * g.dW - g.pW;
        int64_t lo, hi;
        valid_range(woff, g.sW, g.W, g.OW, lo, hi);
        for (int64_t oh = 0; oh < g.OH; ++oh) {
          const int64_t ih = oh * g.sH - g.pH + kh * g.dH;
          if (ih < 0 || ih >= g.H) continue;
          const T* r = row + oh * g.OW;
          T* xr = xc + ih * g.W;
          if (g.sW == 1) {
            for (int64_t ow = lo; ow < hi; ++ow) xr[ow + woff] += r[ow];
          } else {
            for (int64_t ow = lo; ow < hi; ++ow) xr[ow * g.sW + woff] += r[ow];
          }
        }
      }
    }
  }
}

}  // namespace

template <class T>
void conv2d_forward_im2col(int nt, const Conv2dGeom& g, const T* x, const T* w, const T* bias, T* y, int64_t lo,
                           int64_t hi) {
  const int64_t L = g.OH * g.OW, G = g.groups, Og = g.O / G;
  const int64_t Kg = g.C / G * g.kH * g.kW;  // GEMM depth per group
  const bool pw = is_pointwise(g);
  std::vector<T> cols(pw ? 0 : size_t(G * Kg * L));  // (C*kH*kW, L)
  for (int64_t n = lo; n < hi; ++n) {
    const T* xn = x + n * g.C * g.H * g.W;
    T* yn = y + n * g.O * L;  // (O, L)
    const T* cn = xn;
    if (!pw) {
      over_channels(nt, g.C, [&](int64_t c0, int64_t c1) { im2col(xn, g, c0, c1, cols.data()); });
      cn = cols.data();
    }
    for (int64_t gi = 0; gi < G; ++gi) {  // y_g (Og, L) = w_g (Og, Kg) @ cols_g (Kg, L) + b_g
      const T* wg = w + gi * Og * Kg;
      const T* cg = cn + gi * Kg * L;
      const T* bg = bias ? bias + gi * Og : nullptr;
      T* yg = yn + gi * Og * L;
      if (bg)  // bias rows first, then accumulate (beta = 1): no separate pass
        for (int64_t o = 0; o < Og; ++o) std::fill(yg + o * L, yg + (o + 1) * L, bg[o]);
      conv_gemm<T>(g, false, false, Og, L, Kg, wg, Kg, cg, L, nullptr, bg ? T(1) : T(0), yg, L);
    }
  }
}

template <class T>
void conv2d_backward_im2col(int nt, const Conv2dGeom& g, const T* x, const T* w, const T* dy, T* dx, T* dw, T* db,
                            int64_t lo, int64_t hi) {
  const int64_t L = g.OH * g.OW, G = g.groups, Og = g.O / G;
  const int64_t Kg = g.C / G * g.kH * g.kW;
  const bool pw = is_pointwise(g);
  std::vector<T> cols((!pw && (dw || dx)) ? size_t(G * Kg * L) : 0);  // (C*kH*kW, L)
  for (int64_t n = lo; n < hi; ++n) {
    const T* xn = dw ? x + n * g.C * g.H * g.W : nullptr;  // x is null when only dx is wanted
    const T* dyn = dy + n * g.O * L;  // (O, L)
    if (dw) {
      const T* cn = xn;
      if (!pw) {
        over_channels(nt, g.C, [&](int64_t c0, int64_t c1) { im2col(xn, g, c0, c1, cols.data()); });
        cn = cols.data();
      }
      for (int64_t gi = 0; gi < G; ++gi) {  // dw_g (Og, Kg) += dy_g (Og, L) @ cols_g^T (L, Kg)
        const T* dyg = dyn + gi * Og * L;
        const T* cg = cn + gi * Kg * L;
        T* dwg = dw + gi * Og * Kg;
        conv_gemm<T>(g, false, true, Og, Kg, L, dyg, L, cg, L, nullptr, T(1), dwg, Kg);
      }
    }
    if (db)
      for (int64_t o = 0; o < g.O; ++o) db[o] += sum_lanes(dyn + o * L, L);
    if (dx) {
      T* dxn = dx + n * g.C * g.H * g.W;
      T* dc = pw ? dxn : cols.data();  // dcols (C*kH*kW, L)
      for (int64_t gi = 0; gi < G; ++gi) {  // dcols_g (Kg, L) = w_g^T (Kg, Og) @ dy_g (Og, L)
        conv_gemm<T>(g, true, false, Kg, L, Og, w + gi * Og * Kg, Kg, dyn + gi * Og * L, L, nullptr, T(0),
                     dc + gi * Kg * L, L);
      }
      if (!pw) {
        std::fill(dxn, dxn + g.C * g.H * g.W, T(0));
        over_channels(nt, g.C, [&](int64_t c0, int64_t c1) { col2im_add(dc, g, c0, c1, dxn); });
      }
    }
  }
}

template void conv2d_forward_im2col<float>(int, const Conv2dGeom&, const float*, const float*, const float*, float*,
                                           int64_t, int64_t);
template void conv2d_forward_im2col<double>(int, const Conv2dGeom&, const double*, const double*, const double*,
                                            double*, int64_t, int64_t);
template void conv2d_backward_im2col<float>(int, const Conv2dGeom&, const float*, const float*, const float*, float*,
                                            float*, float*, int64_t, int64_t);
template void conv2d_backward_im2col<double>(int, const Conv2dGeom&, const double*, const double*, const double*,
                                             double*, double*, double*, int64_t, int64_t);

}  // namespace kiln::conv_cpu
