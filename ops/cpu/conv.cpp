// CPU kernels of the conv op family and their registration in the dispatch table.
// conv2d: im2col + GEMM (gemm_cpu); stride 1 in the "wide" layout, whose GEMMs read the
// im2col rows in place (gemm_rows_cpu), first layers with few channels directly (both
// below). Threads over the batch with per-thread scratch and per-thread weight-gradient
// accumulators reduced in a fixed order. Pooling: loops over N*C planes in parallel (2x2/2
// max pooling vectorised).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>
#include <omp.h>
#include "core/parallel.h"
#include "ops/cpu/conv_kernels.h"
#include "ops/cpu/linalg_kernels.h"
#include "ops/dispatch.h"

namespace kiln {

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

// Vectors as wide as the target's registers (64 bytes with AVX-512), as GCC vector
// extensions: the same code serves float and double and any x86 build.
#if defined(__AVX512F__)
constexpr int kVecBytes = 64;
#elif defined(__AVX__)
constexpr int kVecBytes = 32;
#else
constexpr int kVecBytes = 16;
#endif

template <class T>
struct VecOf {
  typedef T type __attribute__((vector_size(kVecBytes)));
};
template <class T>
using vec_t = typename VecOf<T>::type;
template <class T>
constexpr int64_t kVecLanes = kVecBytes / int64_t(sizeof(T));

template <class T>
inline vec_t<T> load_vec(const T* p) {
  vec_t<T> v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class T>
inline void store_vec(T* p, const vec_t<T>& v) {
  std::memcpy(p, &v, sizeof v);
}
/// Sum of a vector's lanes, pairwise in a fixed order.
template <class T>
inline T reduce_vec_lanes(T* a) {
  for (int64_t w = kVecLanes<T> / 2; w >= 1; w /= 2)
    for (int64_t i = 0; i < w; ++i) a[i] += a[i + w];
  return a[0];
}

/// d[0, n) = s[0, n) for the short rows of images (10-32 pixels), where a memcpy call (or
/// the `rep movs` GCC inlines for short lengths) costs more than the copy: whole vectors,
/// the last one overlapping the one before; rows shorter than a vector take half-width
/// vectors. (The empty asm keeps GCC from recognising the loop as a copy and calling
/// memcpy after all.)
template <class T, int VB = kVecBytes>
inline void copy_row(T* __restrict d, const T* __restrict s, int64_t n) {
  typedef T V __attribute__((vector_size(VB)));
  constexpr int64_t L = VB / int64_t(sizeof(T));
  if (n >= L) {
    for (int64_t i = 0; i + L <= n; i += L) {
      V v;
      std::memcpy(&v, s + i, VB);
#if defined(__x86_64__) || defined(__i386__)
      asm("" : "+v"(v));
#endif
      std::memcpy(d + i, &v, VB);
    }
    if (n % L) {
      V v;
      std::memcpy(&v, s + n - L, VB);
      std::memcpy(d + n - L, &v, VB);
    }
  } else if constexpr (VB > 16) {
    copy_row<T, VB / 2>(d, s, n);
  } else {
    for (int64_t i = 0; i < L; ++i)
      if (i < n) d[i] = s[i];
  }
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

/// A 1x1 kernel with stride 1 and no padding reads x (C, H*W) directly as its columns.
inline bool is_pointwise(const Conv2dGeom& g) {
  return g.kH == 1 && g.kW == 1 && g.sH == 1 && g.sW == 1 && g.pH == 0 && g.pW == 0;
}

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

// ------------------------------------------------------------------ reductions

constexpr int64_t kLanes = 16;  // partial sums per reduction (a vector register or two)

/// Pairwise sum of kLanes partial sums (fixed order: deterministic).
template <class T>
inline T reduce_lanes(T* acc) {
  for (int64_t w = kLanes / 2; w >= 1; w /= 2)
    for (int64_t j = 0; j < w; ++j) acc[j] += acc[j + w];
  return acc[0];
}

/// Sum of r[0, n) with kLanes independent partial sums (vectorises, unlike a plain loop).
template <class T>
inline T sum_lanes(const T* r, int64_t n) {
  T acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t j = 0; j < kLanes; ++j) acc[j] += r[i + j];
  for (; i < n; ++i) acc[0] += r[i];
  return reduce_lanes(acc);
}

// ------------------------------------------------------------------ wide stride-1 layout
//
// A stride-1 convolution is computed over "wide" rows: with the input padded to
// (C, Hp, Wp), output pixel (oh, ow) sits at oh*Wp + ow of a row of length
// L2 = (OH-1)*Wp + OW, and the im2col row of kernel tap (c, kh, kw) is then ONE contiguous
// slice of the padded plane (start c*Hp*Wp + kh*dH*Wp + kw*dW, length L2): the GEMMs of
// the forward and the weight gradient read those slices through a table of offsets, so
// the im2col matrix (C*kH*kW times the input) is never written, and col2im is one
// contiguous add per tap. No per-output-row copies, which dominate at LeNet's
// 10-28-pixel rows. The columns ow >= OW of a wide row are junk in the forward output
// (dropped) and zero in the wide output gradient (so they add nothing to dw and dx; an
// inf or NaN in the input can still reach dw through 0 * inf, where the dense layout would
// skip it). The GEMMs grow by about Wp/OW, and the output (gradient) is copied between the
// wide and the dense layout once per pass, so the wide layout is used when the GEMM depth
// is at least the number of outputs (not for 1 -> 32 channels with a 3x3 kernel).

struct Wide {
  int64_t Hp, Wp, L2;
  bool padded;
};

inline bool use_wide(const Conv2dGeom& g) {
  return g.sH == 1 && g.sW == 1 && !is_pointwise(g) && g.C * g.kH * g.kW >= g.O;
}

inline Wide wide_of(const Conv2dGeom& g) {
  const int64_t Hp = g.H + 2 * g.pH, Wp = g.W + 2 * g.pW;
  return {Hp, Wp, (g.OH - 1) * Wp + g.OW, g.pH > 0 || g.pW > 0};
}

/// Interior of xpad (C, Hp, Wp) = x (C, H, W) for channels [c0, c1); the border is left as is (zero).
template <class T>
void pad_channels(const T* x, const Conv2dGeom& g, const Wide& v, int64_t c0, int64_t c1, T* xpad) {
  for (int64_t c = c0; c < c1; ++c)
    for (int64_t h = 0; h < g.H; ++h)
      copy_row(xpad + (c * v.Hp + h + g.pH) * v.Wp + g.pW, x + (c * g.H + h) * g.W, g.W);
}

/// The im2col matrix of the wide layout without the copy: row (c, kh, kw) is the slice of
/// the padded sample (C, Hp, Wp) starting at c*Hp*Wp + kh*dH*Wp + kw*dW (length L2), so
/// the GEMMs read their columns through this table of offsets (gemm_rows_cpu).
inline std::vector<int64_t> tap_rows(const Conv2dGeom& g, const Wide& v) {
  std::vector<int64_t> rows(size_t(g.C * g.kH * g.kW));
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t kh = 0; kh < g.kH; ++kh)
      for (int64_t kw = 0; kw < g.kW; ++kw)
        rows[size_t((c * g.kH + kh) * g.kW + kw)] = c * v.Hp * v.Wp + kh * g.dH * v.Wp + kw * g.dW;
  return rows;
}

/// One sample's output gradient dy (O, OH, OW) into wide rows (O, row stride ld, width Wp):
/// the junk columns are not written (the caller keeps them zero); db (O) += its sums.
template <class T>
void dense_to_wide(const T* dyn, const Conv2dGeom& g, int64_t Wp, int64_t ld, T* dyw, T* db) {
  const int64_t L = g.OH * g.OW;
  for (int64_t o = 0; o < g.O; ++o) {
    for (int64_t oh = 0; oh < g.OH; ++oh) copy_row(dyw + o * ld + oh * Wp, dyn + o * L + oh * g.OW, g.OW);
    if (db) db[o] += sum_lanes(dyn + o * L, L);
  }
}

/// One sample's output y (O, OH, OW) = the OW real columns of each wide row of out (O,
/// row stride ld, width Wp), plus bias (O) when given.
template <class T>
void wide_to_dense(const T* out, const Conv2dGeom& g, int64_t Wp, int64_t ld, const T* bias, T* yn) {
  for (int64_t o = 0; o < g.O; ++o)
    for (int64_t oh = 0; oh < g.OH; ++oh) {
      const T* __restrict src = out + o * ld + oh * Wp;
      T* __restrict d = yn + (o * g.OH + oh) * g.OW;
      if (!bias) {
        copy_row(d, src, g.OW);
        continue;
      }
      const T b = bias[o];
      for (int64_t ow = 0; ow < g.OW; ++ow) d[ow] = src[ow] + b;
    }
}

/// dxpad (C, Hp, Wp) += col2im(dcols (C*kH*kW, L2), row stride ld) for channels [c0, c1).
template <class T>
void col2im_wide_add(const T* dcols, int64_t ld, const Conv2dGeom& g, const Wide& v, int64_t c0, int64_t c1,
                     T* dxpad) {
  for (int64_t c = c0; c < c1; ++c)
    for (int64_t kh = 0; kh < g.kH; ++kh)
      for (int64_t kw = 0; kw < g.kW; ++kw) {
        const T* __restrict s = dcols + ((c * g.kH + kh) * g.kW + kw) * ld;
        T* __restrict d = dxpad + c * v.Hp * v.Wp + kh * g.dH * v.Wp + kw * g.dW;
        for (int64_t j = 0; j < v.L2; ++j) d[j] += s[j];
      }
}

/// Runs f(c0, c1) over all channels: split over threads when the caller is not already
/// threaded over samples (nt == 1), else in one call.
template <class F>
inline void over_channels(int nt, int64_t C, const F& f) {
  if (nt == 1) parallel_for(0, C, 1, f);
  else f(int64_t(0), C);
}

/// Per-thread scratch of the wide layout (one sample at a time).
template <class T>
struct WideScratch {
  std::vector<T> xpad;   // (C, Hp, Wp), zero border (padded convolutions only)
  std::vector<T> out;    // (O, L2): forward output, or output gradient with zero junk columns
  std::vector<T> dcols;  // (C*kH*kW, L2): columns of the input gradient
  std::vector<T> dxpad;  // (C, Hp, Wp) (backward to the input of a padded convolution)
  WideScratch(const Conv2dGeom& g, const Wide& v, bool need_xpad, bool need_dx)
      : xpad(need_xpad && v.padded ? size_t(g.C * v.Hp * v.Wp) : 0),
        out(size_t(g.O * v.L2)),
        dcols(need_dx ? size_t(g.C * g.kH * g.kW * v.L2) : 0),
        dxpad(need_dx && v.padded ? size_t(g.C * v.Hp * v.Wp) : 0) {}
  /// The padded plane (C, Hp, Wp) of sample xn (C, H, W): xn itself when there is no padding.
  const T* padded(int nt, const Conv2dGeom& g, const Wide& v, const T* xn) {
    if (!v.padded) return xn;
    over_channels(nt, g.C, [&](int64_t c0, int64_t c1) { pad_channels(xn, g, v, c0, c1, xpad.data()); });
    return xpad.data();
  }
};

/// Forward over samples [lo, hi) in the wide layout, one GEMM per sample and group whose
/// columns are read from the padded input through the tap table.
template <class T>
void conv2d_forward_wide(int nt, const Conv2dGeom& g, const T* x, const T* w, const T* bias, T* y, int64_t lo,
                         int64_t hi) {
  const int64_t L = g.OH * g.OW, G = g.groups, Og = g.O / G, Kg = g.C / G * g.kH * g.kW;
  const Wide v = wide_of(g);
  const std::vector<int64_t> rows = tap_rows(g, v);
  WideScratch<T> s(g, v, true, false);
  for (int64_t n = lo; n < hi; ++n) {
    const T* xp = s.padded(nt, g, v, x + n * g.C * g.H * g.W);
    for (int64_t gi = 0; gi < G; ++gi)  // out_g (Og, L2) = w_g (Og, Kg) @ cols_g (Kg, L2)
      gemm_rows_cpu<T>(false, false, Og, v.L2, Kg, T(1), w + gi * Og * Kg, Kg, xp, rows.data() + gi * Kg, T(0),
                       s.out.data() + gi * Og * v.L2, v.L2);
    wide_to_dense(s.out.data(), g, v.Wp, v.L2, bias, y + n * g.O * L);
  }
}

/// Backward over samples [lo, hi) in the wide layout; accumulates into dw (O, Kg) and db (O).
template <class T>
void conv2d_backward_wide(int nt, const Conv2dGeom& g, const T* x, const T* w, const T* dy, T* dx, T* dw, T* db,
                          int64_t lo, int64_t hi) {
  const int64_t L = g.OH * g.OW, G = g.groups, Og = g.O / G, Kg = g.C / G * g.kH * g.kW;
  const Wide v = wide_of(g);
  const std::vector<int64_t> rows = tap_rows(g, v);
  WideScratch<T> s(g, v, dw != nullptr, dx != nullptr);
  T* dyw = s.out.data();  // (O, L2); the junk columns stay zero
  for (int64_t n = lo; n < hi; ++n) {
    dense_to_wide(dy + n * g.O * L, g, v.Wp, v.L2, dyw, db);
    if (dw) {
      const T* xp = s.padded(nt, g, v, x + n * g.C * g.H * g.W);
      for (int64_t gi = 0; gi < G; ++gi)  // dw_g (Og, Kg) += dy_g (Og, L2) @ cols_g^T (L2, Kg)
        gemm_rows_cpu<T>(false, true, Og, Kg, v.L2, T(1), dyw + gi * Og * v.L2, v.L2, xp, rows.data() + gi * Kg,
                         T(1), dw + gi * Og * Kg, Kg);
    }
    if (dx) {
      T* dc = s.dcols.data();  // dcols (C*kH*kW, L2)
      for (int64_t gi = 0; gi < G; ++gi)  // dcols_g (Kg, L2) = w_g^T (Kg, Og) @ dy_g (Og, L2)
        gemm_cpu<T>(true, false, Kg, v.L2, Og, T(1), w + gi * Og * Kg, Kg, dyw + gi * Og * v.L2, v.L2, T(0),
                    dc + gi * Kg * v.L2, v.L2);
      T* dxn = dx + n * g.C * g.H * g.W;
      T* dxp = v.padded ? s.dxpad.data() : dxn;  // (C, Hp, Wp)
      std::fill(dxp, dxp + g.C * v.Hp * v.Wp, T(0));
      over_channels(nt, g.C, [&](int64_t c0, int64_t c1) { col2im_wide_add(dc, v.L2, g, v, c0, c1, dxp); });
      if (v.padded)  // the interior is dx
        for (int64_t c = 0; c < g.C; ++c)
          for (int64_t h = 0; h < g.H; ++h)
            copy_row(dxn + (c * g.H + h) * g.W, dxp + (c * v.Hp + h + g.pH) * v.Wp + g.pW, g.W);
    }
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

// ------------------------------------------------------------------ direct, few input channels
//
// A stride-1 convolution of 1-4 input channels (a first layer such as LeNet's 1 -> 6 or
// ConvNet's 1 -> 32) runs directly on the padded plane in the wide layout, in vector
// registers: the forward (up to 16 outputs) keeps a block of output channels times two
// vectors of a wide output row in accumulators and adds each tap's shifted input vectors
// times a broadcast weight; the weight gradient keeps a block of (output channel, tap)
// pairs, each a vector of partial sums over the wide positions, for ALL the thread's
// samples, and sums the lanes once at the end. im2col would copy the input C*kH*kW times
// (25x for a 5x5 kernel) for a GEMM of depth 25 and 6 outputs, and the weight-gradient
// GEMM (6 x 25, K = the wide row) spends its time transposing the 25 tap rows into the
// packed layout: measured 3x slower for LeNet's conv1, 2.5x for ConvNet's. The input gradient
// (only when the input needs one) is the wide layout's GEMM.

#if defined(__AVX512F__)
constexpr int kDirectOut = 8;   // output channels per forward block (2 x 8 accumulators)
constexpr int kDirectWOut = 4;  // output channels per weight-gradient block (4 x 4 accumulators)
#else  // 16 vector registers
constexpr int kDirectOut = 6;
constexpr int kDirectWOut = 2;
#endif
constexpr int kDirectWTaps = 4;  // taps per weight-gradient block

/// The weight gradient is computed directly for any stride-1 convolution of few input
/// channels; the forward only up to 16 outputs (ConvNet's 1 -> 32 forward is faster as a
/// GEMM, which writes the output in place instead of through a wide row).
inline bool use_direct_wgrad(const Conv2dGeom& g) {
  return g.sH == 1 && g.sW == 1 && g.groups == 1 && g.C <= 4 && !is_pointwise(g);
}
inline bool use_direct(const Conv2dGeom& g) { return use_direct_wgrad(g) && g.O <= 16; }

/// Sizes of the direct kernels' per-thread buffers: the wide row rounded up to two vectors
/// (Lr), and the padded input with a zero tail that the last vectors of every tap may read.
template <class T>
struct DirectPlan {
  Wide v;
  int64_t P, Lr, xlen, ntaps;
  std::vector<int64_t> taps;  // offset of tap (c, kh, kw) in the padded planes
  explicit DirectPlan(const Conv2dGeom& g) : v(wide_of(g)) {
    P = v.Hp * v.Wp;
    Lr = (v.L2 + 2 * kVecLanes<T> - 1) / (2 * kVecLanes<T>) * (2 * kVecLanes<T>);
    taps = tap_rows(g, v);
    ntaps = int64_t(taps.size());
    xlen = std::max(g.C * P, taps.back() + Lr);
  }
  /// The padded sample in xpad (whose border and tail stay zero from its allocation).
  const T* pad(const Conv2dGeom& g, const T* xn, std::vector<T>& xpad) const {
    pad_channels(xn, g, v, 0, g.C, xpad.data());
    return xpad.data();
  }
};

/// out rows [o0, o0 + OB) (O, Lr) = bias + sum over taps t of wt[t][o] * xp[taps[t] + j].
template <class T, int OB>
void direct_forward_block(const T* xp, const DirectPlan<T>& d, const T* wt, int64_t O, int64_t o0, const T* bias,
                          T* out) {
  using V = vec_t<T>;
  constexpr int64_t VL = kVecLanes<T>;
  for (int64_t j = 0; j < d.Lr; j += 2 * VL) {
    V a0[OB], a1[OB];
    for (int i = 0; i < OB; ++i) {
      a0[i] = V{} + (bias ? bias[o0 + i] : T(0));
      a1[i] = a0[i];
    }
    for (int64_t t = 0; t < d.ntaps; ++t) {
      const T* s = xp + d.taps[size_t(t)] + j;
      const V x0 = load_vec(s), x1 = load_vec(s + VL);
      const T* wr = wt + t * O + o0;
      for (int i = 0; i < OB; ++i) {
        a0[i] += wr[i] * x0;
        a1[i] += wr[i] * x1;
      }
    }
    for (int i = 0; i < OB; ++i) {
      store_vec(out + (o0 + i) * d.Lr + j, a0[i]);
      store_vec(out + (o0 + i) * d.Lr + j + VL, a1[i]);
    }
  }
}

template <class T, int OB = kDirectOut>
void direct_forward_rows(const T* xp, const DirectPlan<T>& d, const T* wt, int64_t O, int64_t o0, const T* bias,
                         T* out) {
  if constexpr (OB > 0) {
    if (O - o0 >= OB) return direct_forward_block<T, OB>(xp, d, wt, O, o0, bias, out);
    direct_forward_rows<T, OB - 1>(xp, d, wt, O, o0, bias, out);
  }
}

/// Forward over samples [lo, hi): y (O, OH, OW) per sample.
template <class T>
void conv2d_forward_direct(const Conv2dGeom& g, const T* x, const T* w, const T* bias, T* y, int64_t lo,
                           int64_t hi) {
  const DirectPlan<T> d(g);
  const int64_t L = g.OH * g.OW;
  std::vector<T> wt(size_t(d.ntaps * g.O));  // (taps, O): a tap's weights side by side
  for (int64_t o = 0; o < g.O; ++o)
    for (int64_t t = 0; t < d.ntaps; ++t) wt[size_t(t * g.O + o)] = w[o * d.ntaps + t];
  std::vector<T> xpad(size_t(d.xlen)), out(size_t(g.O * d.Lr));
  for (int64_t n = lo; n < hi; ++n) {
    const T* xp = d.pad(g, x + n * g.C * g.H * g.W, xpad);
    for (int64_t o0 = 0; o0 < g.O; o0 += kDirectOut)
      direct_forward_rows<T>(xp, d, wt.data(), g.O, o0, bias, out.data());
    wide_to_dense(out.data(), g, d.v.Wp, d.Lr, static_cast<const T*>(nullptr), y + n * g.O * L);
  }
}

/// acc[o][t] += dyw[o][j] * xp[taps[t] + j] (vectors over j) for o in [o0, o0 + OB) and
/// taps [t0, t0 + kDirectWTaps) (the tap list is padded to a multiple with dummy taps).
template <class T, int OB>
void direct_wgrad_block(const T* xp, const DirectPlan<T>& d, const int64_t* taps, int64_t ntp, const T* dyw,
                        int64_t o0, int64_t t0, vec_t<T>* acc) {
  using V = vec_t<T>;
  constexpr int TB = kDirectWTaps;
  constexpr int64_t VL = kVecLanes<T>;
  V a[OB][TB];
  for (int i = 0; i < OB; ++i)
    for (int k = 0; k < TB; ++k) a[i][k] = acc[(o0 + i) * ntp + t0 + k];
  const T* s[TB];
  for (int k = 0; k < TB; ++k) s[k] = xp + taps[t0 + k];
  for (int64_t j = 0; j < d.Lr; j += VL) {
    V xv[TB];
    for (int k = 0; k < TB; ++k) xv[k] = load_vec(s[k] + j);
    for (int i = 0; i < OB; ++i) {
      const V dv = load_vec(dyw + (o0 + i) * d.Lr + j);
      for (int k = 0; k < TB; ++k) a[i][k] += dv * xv[k];
    }
  }
  for (int i = 0; i < OB; ++i)
    for (int k = 0; k < TB; ++k) acc[(o0 + i) * ntp + t0 + k] = a[i][k];
}

template <class T, int OB = kDirectWOut>
void direct_wgrad_rows(const T* xp, const DirectPlan<T>& d, const int64_t* taps, int64_t ntp, const T* dyw,
                       int64_t O, int64_t o0, int64_t t0, vec_t<T>* acc) {
  if constexpr (OB > 0) {
    if (O - o0 >= OB) return direct_wgrad_block<T, OB>(xp, d, taps, ntp, dyw, o0, t0, acc);
    direct_wgrad_rows<T, OB - 1>(xp, d, taps, ntp, dyw, O, o0, t0, acc);
  }
}

/// Weight (and bias) gradient over samples [lo, hi), added to dw (O, C*kH*kW) and db (O).
template <class T>
void conv2d_wgrad_direct(const Conv2dGeom& g, const T* x, const T* dy, T* dw, T* db, int64_t lo, int64_t hi) {
  const DirectPlan<T> d(g);
  const int64_t L = g.OH * g.OW, ntp = (d.ntaps + kDirectWTaps - 1) / kDirectWTaps * kDirectWTaps;
  std::vector<int64_t> taps(d.taps);
  taps.resize(size_t(ntp), 0);  // dummy taps: read the plane's start, their sums are dropped
  std::vector<vec_t<T>> acc(size_t(g.O * ntp), vec_t<T>{});
  std::vector<T> xpad(size_t(d.xlen)), dyw(size_t(g.O * d.Lr));  // zero junk columns and tail
  for (int64_t n = lo; n < hi; ++n) {
    dense_to_wide(dy + n * g.O * L, g, d.v.Wp, d.Lr, dyw.data(), db);
    if (!dw) continue;
    const T* xp = d.pad(g, x + n * g.C * g.H * g.W, xpad);
    for (int64_t o0 = 0; o0 < g.O; o0 += kDirectWOut)
      for (int64_t t0 = 0; t0 < ntp; t0 += kDirectWTaps)
        direct_wgrad_rows<T>(xp, d, taps.data(), ntp, dyw.data(), g.O, o0, t0, acc.data());
  }
  if (dw)
    for (int64_t o = 0; o < g.O; ++o)
      for (int64_t t = 0; t < d.ntaps; ++t) {
        T lanes[kVecLanes<T>];
        std::memcpy(lanes, &acc[size_t(o * ntp + t)], sizeof lanes);
        dw[o * d.ntaps + t] += reduce_vec_lanes(lanes);
      }
}

// ------------------------------------------------------------------ conv2d

template <class T>
void conv2d_forward_t(const Conv2dGeom& g, const T* x, const T* w, const T* bias, T* y) {
  const int64_t L = g.OH * g.OW, G = g.groups, Cg = g.C / G, Og = g.O / G;
  const int64_t Kg = Cg * g.kH * g.kW;  // GEMM depth per group
  const bool pw = is_pointwise(g), direct = use_direct(g), wide = !direct && use_wide(g);
  const int nt = batch_threads(g.N);
  run_chunks(nt, g.N, [&](int, int64_t lo, int64_t hi) {
    if (direct) return conv2d_forward_direct(g, x, w, bias, y, lo, hi);
    if (wide) return conv2d_forward_wide(nt, g, x, w, bias, y, lo, hi);
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
        gemm_cpu<T>(false, false, Og, L, Kg, T(1), wg, Kg, cg, L, bg ? T(1) : T(0), yg, L);
      }
    }
  });
}

template <class T>
void conv2d_backward_t(const Conv2dGeom& g, const T* x, const T* w, const T* dy, T* dx, T* dw, T* db) {
  const int64_t L = g.OH * g.OW, G = g.groups, Cg = g.C / G, Og = g.O / G;
  const int64_t Kg = Cg * g.kH * g.kW;
  const int64_t wsize = g.O * Kg;
  const bool pw = is_pointwise(g), direct = use_direct_wgrad(g), wide = !direct && use_wide(g);
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
  run_chunks(nt, g.N, [&](int t, int64_t lo, int64_t hi) {
    T* dwt = dw;
    T* dbt = db;
    if (nt > 1) {
      if (dw) { dw_acc[t].assign(size_t(wsize), T(0)); dwt = dw_acc[t].data(); }
      if (db) { db_acc[t].assign(size_t(g.O), T(0)); dbt = db_acc[t].data(); }
    }
    if (direct || wide) {
      if (direct) conv2d_wgrad_direct(g, x, dy, dwt, dbt, lo, hi);  // dw, db in registers
      // What is left for the wide layout's GEMMs (dx: GEMM + col2im unless transposed)
      T* dw_gemm = direct ? nullptr : dwt;
      T* db_gemm = direct ? nullptr : dbt;
      T* dx_gemm = dx_transposed ? nullptr : dx;
      if (dw_gemm || db_gemm || dx_gemm) conv2d_backward_wide<T>(nt, g, x, w, dy, dx_gemm, dw_gemm, db_gemm, lo, hi);
      if (dx_transposed) conv2d_forward_wide<T>(nt, gt, dy, wt.data(), nullptr, dx, lo, hi);
      return;
    }
    std::vector<T> cols((!pw && (dw || dx)) ? size_t(G * Kg * L) : 0);  // (C*kH*kW, L)
    for (int64_t n = lo; n < hi; ++n) {
      const T* xn = x + n * g.C * g.H * g.W;
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
          T* dwg = dwt + gi * Og * Kg;
          gemm_cpu<T>(false, true, Og, Kg, L, T(1), dyg, L, cg, L, T(1), dwg, Kg);
        }
      }
      if (db)
        for (int64_t o = 0; o < g.O; ++o) dbt[o] += sum_lanes(dyn + o * L, L);
      if (dx) {
        T* dxn = dx + n * g.C * g.H * g.W;
        T* dc = pw ? dxn : cols.data();  // dcols (C*kH*kW, L)
        for (int64_t gi = 0; gi < G; ++gi) {  // dcols_g (Kg, L) = w_g^T (Kg, Og) @ dy_g (Og, L)
          gemm_cpu<T>(true, false, Kg, L, Og, T(1), w + gi * Og * Kg, Kg, dyn + gi * Og * L, L, T(0),
                      dc + gi * Kg * L, L);
        }
        if (!pw) {
          std::fill(dxn, dxn + g.C * g.H * g.W, T(0));
          over_channels(nt, g.C, [&](int64_t c0, int64_t c1) { col2im_add(dc, g, c0, c1, dxn); });
        }
      }
    }
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
  KILN_DISPATCH_FLOATING(dtype, "conv2d", [&]<class T>() {
    conv2d_forward_t<T>(g, static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(bias),
                        static_cast<T*>(y));
  });
}

void conv2d_backward_cpu(DType dtype, const Conv2dGeom& g, const void* x, const void* w, const void* dy, void* dx,
                         void* dw, void* dbias) {
  KILN_DISPATCH_FLOATING(dtype, "conv2d", [&]<class T>() {
    conv2d_backward_t<T>(g, static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(dy),
                         static_cast<T*>(dx), static_cast<T*>(dw), static_cast<T*>(dbias));
  });
}

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

/// kB windows of 2x2 max pooling, stride 2: window j covers r0[2j, 2j+2) and r1[2j, 2j+2),
/// scanned in the generic kernel's order (same winner on ties and NaN); y[j] gets the max
/// and idx[j] = base + offset of the winner (r1 is r0 + W). Fixed trip count and restrict
/// pointers: the four-way select vectorises (not inlined: inlined into the row loop, GCC
/// unrolls the block before its vectoriser sees it and emits scalar branches).
template <class T, int64_t kB>
[[gnu::noinline]] void max_2x2_block(const T* __restrict r0, const T* __restrict r1, int32_t W, int64_t base,
                                     T* __restrict y, int64_t* __restrict idx) {
  T best[kB];
  int32_t bi[kB];
  for (int64_t j = 0; j < kB; ++j) {
    T m = r0[2 * j];
    int32_t k = 0;
    max_step(r0[2 * j + 1], int32_t(1), m, k);
    max_step(r1[2 * j], W, m, k);
    max_step(r1[2 * j + 1], W + 1, m, k);
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

template <class T>
void max_pool_forward_t(const Pool2dGeom& g, const T* x, T* y, int64_t* idx) {
  auto plane = &max_pool_plane<T, 0, 0, 0>;
  if (g.kH == 2 && g.kW == 2 && g.sH == 2 && g.sW == 2 && g.pH == 0 && g.pW == 0) plane = &max_pool_2x2_plane<T>;
  else if (g.kH == 2 && g.kW == 2 && g.sW == 2) plane = &max_pool_plane<T, 2, 2, 2>;
  else if (g.kH == 3 && g.kW == 3 && g.sW == 2) plane = &max_pool_plane<T, 3, 3, 2>;
  else if (g.kH == 3 && g.kW == 3) plane = &max_pool_plane<T, 3, 3, 0>;
  parallel_for(0, g.P, plane_grain(g), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) plane(g, x + p * g.H * g.W, y + p * g.OH * g.OW, idx + p * g.OH * g.OW);
  });
}

template <class T>
void max_pool_backward_t(const Pool2dGeom& g, const T* dy, const int64_t* idx, T* dx) {
  parallel_for(0, g.P, plane_grain(g), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      T* dxp = dx + p * g.H * g.W;
      const T* dyp = dy + p * g.OH * g.OW;
      const int64_t* ip = idx + p * g.OH * g.OW;
      std::fill(dxp, dxp + g.H * g.W, T(0));
      for (int64_t i = 0; i < g.OH * g.OW; ++i) dxp[ip[i]] += dyp[i];
    }
  });
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

template <class T>
void avg_pool_forward_t(const Pool2dGeom& g, bool cip, const T* x, T* y) {
  auto plane = &avg_pool_plane<T, 0, 0, 0>;
  if (g.kH == 2 && g.kW == 2 && g.sW == 2) plane = &avg_pool_plane<T, 2, 2, 2>;
  else if (g.kH == 3 && g.kW == 3) plane = &avg_pool_plane<T, 3, 3, 0>;
  parallel_for(0, g.P, plane_grain(g), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) plane(g, cip, x + p * g.H * g.W, y + p * g.OH * g.OW);
  });
}

template <class T>
void avg_pool_backward_t(const Pool2dGeom& g, bool cip, const T* dy, T* dx) {
  parallel_for(0, g.P, plane_grain(g), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      T* dxp = dx + p * g.H * g.W;
      const T* dyp = dy + p * g.OH * g.OW;
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
    }
  });
}

// PyTorch's adaptive bins: [floor(i*n/out), ceil((i+1)*n/out)).
inline int64_t bin_start(int64_t i, int64_t n, int64_t out) { return (i * n) / out; }
inline int64_t bin_end(int64_t i, int64_t n, int64_t out) { return ((i + 1) * n + out - 1) / out; }

template <class T>
void adaptive_avg_forward_t(const Pool2dGeom& g, const T* x, T* y) {
  parallel_for(0, g.P, plane_grain(g), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const T* xp = x + p * g.H * g.W;
      T* yp = y + p * g.OH * g.OW;
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
    }
  });
}

template <class T>
void adaptive_avg_backward_t(const Pool2dGeom& g, const T* dy, T* dx) {
  parallel_for(0, g.P, plane_grain(g), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      T* dxp = dx + p * g.H * g.W;
      const T* dyp = dy + p * g.OH * g.OW;
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
    }
  });
}

void max_pool_forward_cpu(DType dtype, const Pool2dGeom& g, const void* x, void* y, int64_t* idx) {
  KILN_DISPATCH_FLOATING(dtype, "max_pool2d", [&]<class T>() {
    max_pool_forward_t<T>(g, static_cast<const T*>(x), static_cast<T*>(y), idx);
  });
}
void max_pool_backward_cpu(DType dtype, const Pool2dGeom& g, const void* dy, const int64_t* idx, void* dx) {
  KILN_DISPATCH_FLOATING(dtype, "max_pool2d", [&]<class T>() {
    max_pool_backward_t<T>(g, static_cast<const T*>(dy), idx, static_cast<T*>(dx));
  });
}
void avg_pool_forward_cpu(DType dtype, const Pool2dGeom& g, bool cip, const void* x, void* y) {
  KILN_DISPATCH_FLOATING(dtype, "avg_pool2d", [&]<class T>() {
    avg_pool_forward_t<T>(g, cip, static_cast<const T*>(x), static_cast<T*>(y));
  });
}
void avg_pool_backward_cpu(DType dtype, const Pool2dGeom& g, bool cip, const void* dy, void* dx) {
  KILN_DISPATCH_FLOATING(dtype, "avg_pool2d", [&]<class T>() {
    avg_pool_backward_t<T>(g, cip, static_cast<const T*>(dy), static_cast<T*>(dx));
  });
}
void adaptive_avg_forward_cpu(DType dtype, const Pool2dGeom& g, const void* x, void* y) {
  KILN_DISPATCH_FLOATING(dtype, "adaptive_avg_pool2d", [&]<class T>() {
    adaptive_avg_forward_t<T>(g, static_cast<const T*>(x), static_cast<T*>(y));
  });
}
void adaptive_avg_backward_cpu(DType dtype, const Pool2dGeom& g, const void* dy, void* dx) {
  KILN_DISPATCH_FLOATING(dtype, "adaptive_avg_pool2d", [&]<class T>() {
    adaptive_avg_backward_t<T>(g, static_cast<const T*>(dy), static_cast<T*>(dx));
  });
}

const Conv2dKernels kConv2dCpu{&conv2d_forward_cpu, &conv2d_backward_cpu};
const MaxPool2dKernels kMaxPoolCpu{&max_pool_forward_cpu, &max_pool_backward_cpu};
const AvgPool2dKernels kAvgPoolCpu{&avg_pool_forward_cpu, &avg_pool_backward_cpu};
const AdaptiveAvgPool2dKernels kAdaptiveAvgPoolCpu{&adaptive_avg_forward_cpu, &adaptive_avg_backward_cpu};

}  // namespace

void register_cpu_conv() {
  // Each entry is a table of function pointers (forward, backward), see conv_kernels.h.
  register_kernel(Op::conv2d, DeviceType::CPU, const_cast<Conv2dKernels*>(&kConv2dCpu));
  register_kernel(Op::max_pool2d, DeviceType::CPU, const_cast<MaxPool2dKernels*>(&kMaxPoolCpu));
  register_kernel(Op::avg_pool2d, DeviceType::CPU, const_cast<AvgPool2dKernels*>(&kAvgPoolCpu));
  register_kernel(Op::adaptive_avg_pool2d, DeviceType::CPU,
                  const_cast<AdaptiveAvgPool2dKernels*>(&kAdaptiveAvgPoolCpu));
}

}  // namespace kiln
