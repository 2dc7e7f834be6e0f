// Internal to the CPU conv2d kernels (conv.cpp, conv_im2col.cpp, conv_wide.cpp,
// conv_direct.cpp; not part of the public API): the helpers several algorithms share,
// inline so each file's hot loops inline them as they did when all were one file, the
// tests that choose an algorithm, and the entry points of each algorithm (templates
// instantiated for float and double in their files). conv.cpp picks one per call.
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>
#include <omp.h>
#include "kiln/core/copy.h"
#include "kiln/core/parallel.h"
#include "kiln/core/simd_width.h"
#include "kiln/ops/cpu/sgemm.h"
#include "kiln/ops/kernels/conv.h"
#include "kiln/ops/kernels/linalg.h"

namespace kiln::conv_cpu {

// Vectors as wide as the target's registers (64 bytes with AVX-512), as GCC vector
// extensions: the same code serves float and double and any x86 build.
constexpr int kVecBytes = simd::kRegBytes;

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

/// A 1x1 kernel with stride 1 and no padding reads x (C, H*W) directly as its columns.
inline bool is_pointwise(const Conv2dGeom& g) {
  return g.kH == 1 && g.kW == 1 && g.sH == 1 && g.sW == 1 && g.pH == 0 && g.pW == 0;
}

// ------------------------------------------------------------------ the GEMMs

/// Every GEMM of the algorithms (alpha 1, beta 0 or 1): gemm_cpu, or gemm_rows_cpu when
/// B's rows come from the table b_rows (ldb unused). A bf16 convolution (g.bf16_products)
/// runs the bf16 GEMM instead, which rounds the float32 values to bf16 as it packs them:
/// exact, since they are bf16 values, and twice the multiply rate on a CPU where
/// VDPBF16PS doubles the FMAs.
template <class T>
void conv_gemm(const Conv2dGeom& g, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const T* A,
               int64_t lda, const T* B, int64_t ldb, const int64_t* b_rows, T beta, T* C, int64_t ldc) {
  if constexpr (std::is_same_v<T, float>) {
    if (g.bf16_products) {
      const bool small = double(M) * double(N) * double(K) < double(1 << 21);  // as gemm_cpu: ~20 us on one core
      sgemm_bf16_rounding(trans_a, trans_b, M, N, K, A, lda, B, ldb, b_rows, beta, C, ldc,
                          omp_in_parallel() || small ? 1 : get_num_threads());
      return;
    }
  }
  if (b_rows) gemm_rows_cpu<T>(trans_a, trans_b, M, N, K, T(1), A, lda, B, b_rows, beta, C, ldc);
  else gemm_cpu<T>(trans_a, trans_b, M, N, K, T(1), A, lda, B, ldb, beta, C, ldc);
}

/// conv_gemm for a bf16 convolution whose B operand is kept as bf16 bits (the wide layout's
/// padded input): the bf16 GEMM reads them as they are and rounds only A (float32 holding
/// bf16 values, exact) as it packs: the same products as the float32 buffers gave.
inline void conv_gemm(const Conv2dGeom&, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A,
                      int64_t lda, const uint16_t* B, int64_t ldb, const int64_t* b_rows, float beta, float* C,
                      int64_t ldc) {
  const bool small = double(M) * double(N) * double(K) < double(1 << 21);
  sgemm_bf16_rounding(trans_a, trans_b, M, N, K, A, lda, B, ldb, b_rows, beta, C, ldc,
                      omp_in_parallel() || small ? 1 : get_num_threads());
}

/// Whether a (T, X) convolution keeps its input as bf16 bits for the bf16 GEMM: X bf16, T
/// float32, and products in bf16 (Conv2dGeom::bf16_products).
template <class T, class X>
bool bf16_bits(const Conv2dGeom& g) {
  return std::is_same_v<X, BFloat16> && std::is_same_v<T, float> && g.bf16_products;
}

/// Whether the wide layout's weight gradient runs transposed on sgemm_bf16_a_rows (the tap
/// rows of the bf16 padded input read in place, conv_wide.cpp): bf16 bits, one group, and
/// the AVX512_BF16 kernel chosen. conv.cpp then also sends a first layer's weight gradient
/// there instead of the direct float32 kernel.
template <class T, class X>
bool wide_wgrad_a_rows(const Conv2dGeom& g) {
  return bf16_bits<T, X>(g) && g.groups == 1 && sgemm_bf16_pair_rows_available();
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
// (explained in conv_wide.cpp; the direct kernels of conv_direct.cpp use it too)

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

// The copies between the dense tensors and the wide layout's buffers also widen a 16-bit X
// (a float16 / bfloat16 convolution, T = float) a channel plane at a time into a per-thread
// buffer, and round results back the same way: each value is converted once, where it is
// copied anyway, and the float32 algorithms run unchanged (the bits of widening first).

/// Per-thread plane buffer of the conversions below.
template <class T>
inline std::vector<T>& plane_buffer() {
  thread_local std::vector<T> buf;
  return buf;
}

/// Interior of xpad (C, Hp, Wp) = x (C, H, W) for channels [c0, c1); the border is left as is (zero).
template <class T, class X>
void pad_channels(const X* x, const Conv2dGeom& g, const Wide& v, int64_t c0, int64_t c1, T* xpad) {
  for (int64_t c = c0; c < c1; ++c) {
    const T* xc = widened(x + c * g.H * g.W, g.H * g.W, plane_buffer<T>());
    for (int64_t h = 0; h < g.H; ++h) copy_row(xpad + (c * v.Hp + h + g.pH) * v.Wp + g.pW, xc + h * g.W, g.W);
  }
}

/// dx (C, H, W) = the interior of dxpad (C, Hp, Wp), rounded to X. (Without padding and
/// conversion there is nothing to do: the columns were added into dx itself.)
template <class T, class X>
void unpad_channels(const T* dxpad, const Conv2dGeom& g, const Wide& v, X* dx) {
  const int64_t HW = g.H * g.W;
  std::vector<T>& buf = plane_buffer<T>();
  if constexpr (!std::is_same_v<X, T>) buf.resize(size_t(HW));
  for (int64_t c = 0; c < g.C; ++c) {
    const T* plane = dxpad + c * HW;  // without padding the interior is the plane
    if (v.padded) {
      T* d = nullptr;
      if constexpr (std::is_same_v<X, T>) d = dx + c * HW;
      else d = buf.data();
      for (int64_t h = 0; h < g.H; ++h) copy_row(d + h * g.W, dxpad + (c * v.Hp + h + g.pH) * v.Wp + g.pW, g.W);
      plane = d;
    }
    if constexpr (!std::is_same_v<X, T>) convert_floats(plane, dx + c * HW, HW);
  }
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
template <class T, class X>
void dense_to_wide(const X* dyn, const Conv2dGeom& g, int64_t Wp, int64_t ld, T* dyw, T* db) {
  const int64_t L = g.OH * g.OW;
  if constexpr (!std::is_same_v<X, T>) {
    if (!db) {  // each 16-bit row widened straight into place (exact, as widened() is)
      for (int64_t o = 0; o < g.O; ++o)
        for (int64_t oh = 0; oh < g.OH; ++oh) convert_floats(dyn + o * L + oh * g.OW, dyw + o * ld + oh * Wp, g.OW);
      return;
    }
  }
  for (int64_t o = 0; o < g.O; ++o) {
    const T* d = widened(dyn + o * L, L, plane_buffer<T>());
    for (int64_t oh = 0; oh < g.OH; ++oh) copy_row(dyw + o * ld + oh * Wp, d + oh * g.OW, g.OW);
    if (db) db[o] += sum_lanes(d, L);
  }
}

/// One sample's output y (O, OH, OW) = the OW real columns of each wide row of out (O,
/// row stride ld, width Wp), plus bias (O) when given.
template <class T, class X>
void wide_to_dense(const T* out, const Conv2dGeom& g, int64_t Wp, int64_t ld, const T* bias, X* yn) {
  const int64_t L = g.OH * g.OW;
  if constexpr (!std::is_same_v<X, T>) {
    if (!bias) {  // each row rounded straight into the 16-bit y
      for (int64_t o = 0; o < g.O; ++o)
        for (int64_t oh = 0; oh < g.OH; ++oh) convert_floats(out + o * ld + oh * Wp, yn + o * L + oh * g.OW, g.OW);
      return;
    }
  }
  if constexpr (!std::is_same_v<X, T>) plane_buffer<T>().resize(size_t(L));
  for (int64_t o = 0; o < g.O; ++o) {
    T* yo = nullptr;  // the dense plane: y's own, or the buffer rounded into y afterwards
    if constexpr (std::is_same_v<X, T>) yo = yn + o * L;
    else yo = plane_buffer<T>().data();
    for (int64_t oh = 0; oh < g.OH; ++oh) {
      const T* __restrict src = out + o * ld + oh * Wp;
      T* __restrict d = yo + oh * g.OW;
      if (!bias) {
        copy_row(d, src, g.OW);
        continue;
      }
      const T b = bias[o];
      for (int64_t ow = 0; ow < g.OW; ++ow) d[ow] = src[ow] + b;
    }
    if constexpr (!std::is_same_v<X, T>) convert_floats(yo, yn + o * L, L);
  }
}

/// Runs f(c0, c1) over all channels: split over threads when the caller is not already
/// threaded over samples (nt == 1), else in one call.
template <class F>
inline void over_channels(int nt, int64_t C, const F& f) {
  if (nt == 1) parallel_for(0, C, 1, f);
  else f(int64_t(0), C);
}

// ------------------------------------------------------------------ the algorithms

/// The weight gradient is computed directly for any stride-1 convolution of few input
/// channels; the forward only up to 16 outputs (ConvNet's 1 -> 32 forward is faster as a
/// GEMM, which writes the output in place instead of through a wide row).
inline bool use_direct_wgrad(const Conv2dGeom& g) {
  return g.sH == 1 && g.sW == 1 && g.groups == 1 && g.C <= 4 && !is_pointwise(g);
}
inline bool use_direct(const Conv2dGeom& g) { return use_direct_wgrad(g) && g.O <= 16; }

// Each runs over samples [lo, hi) of the batch (one chunk of conv.cpp's run_chunks); nt is
// the number of threads over samples (1: the algorithm may thread over channels itself).

/// im2col + GEMM (conv_im2col.cpp): y (N, O, OH, OW) for samples [lo, hi).
template <class T>
void conv2d_forward_im2col(int nt, const Conv2dGeom& g, const T* x, const T* w, const T* bias, T* y, int64_t lo,
                           int64_t hi);
/// im2col + GEMM backward over samples [lo, hi): adds to dw (O, Kg) and db (O), writes dx;
/// any of the three may be null.
template <class T>
void conv2d_backward_im2col(int nt, const Conv2dGeom& g, const T* x, const T* w, const T* dy, T* dx, T* dw, T* db,
                            int64_t lo, int64_t hi);

// The wide and direct algorithms also take x, y, dy, dx stored as X, a 16-bit float, with
// T = float: they widen and round as they copy between the dense tensors and their own
// buffers (see pad_channels), instantiated for float / double and for (float, Half),
// (float, BFloat16).

/// The wide stride-1 layout (conv_wide.cpp): forward over samples [lo, hi).
template <class T, class X = T>
void conv2d_forward_wide(int nt, const Conv2dGeom& g, const X* x, const T* w, const T* bias, X* y, int64_t lo,
                         int64_t hi);
/// The wide layout's backward over samples [lo, hi); accumulates into dw (O, Kg) and db (O).
template <class T, class X = T>
void conv2d_backward_wide(int nt, const Conv2dGeom& g, const X* x, const T* w, const X* dy, X* dx, T* dw, T* db,
                          int64_t lo, int64_t hi);

/// The direct kernels of few input channels (conv_direct.cpp): forward over samples [lo, hi).
template <class T, class X = T>
void conv2d_forward_direct(const Conv2dGeom& g, const X* x, const T* w, const T* bias, X* y, int64_t lo,
                           int64_t hi);
/// Weight (and bias) gradient over samples [lo, hi), added to dw (O, C*kH*kW) and db (O).
template <class T, class X = T>
void conv2d_wgrad_direct(const Conv2dGeom& g, const X* x, const X* dy, T* dw, T* db, int64_t lo, int64_t hi);

}  // namespace kiln::conv_cpu
