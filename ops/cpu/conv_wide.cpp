// conv2d on the CPU in the "wide" stride-1 layout: GEMMs that read the im2col rows where
// they lie in the padded input (gemm_rows_cpu), so no im2col copy. conv.cpp chooses it for
// stride-1 convolutions (not 1x1 pointwise) whose GEMM depth C*kH*kW is at least their
// output channels, and for what the direct kernels leave of a first layer (its input
// gradient; its forward above 16 outputs); it also runs a transposed-convolution input
// gradient as a forward.
// GCC 12's AVX-512 intrinsics start some results from _mm512_undefined_*(), which
// -Wmaybe-uninitialized reports once inlined (GCC bug 105593): simd::interleave_pairs.
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <algorithm>
#include <vector>
#include "kiln/core/simd_half.h"
#include "kiln/ops/cpu/conv_algos.h"
#include "kiln/ops/kernels/linalg.h"

namespace kiln::conv_cpu {

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

namespace {

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

/// Per-thread scratch of the wide layout (one sample at a time).
template <class T>
struct WideScratch {
  bool copy;                    // x and dx go through xpad and dxpad: padded, or stored as a 16-bit X
  bool bits;                    // x is read as bf16 bits (bf16_bits): xpad16 instead of xpad
  std::vector<T> xpad;          // (C, Hp, Wp), zero border (when copy, not bits)
  std::vector<uint16_t> xpad16; // (C, Hp, Wp) bf16 bits, zero border (bits and padded)
  std::vector<T> out;           // (O, L2): forward output, or output gradient with zero junk columns
  std::vector<T> dcols;         // (C*kH*kW, L2): columns of the input gradient
  std::vector<T> dxpad;         // (C, Hp, Wp) (backward to the input, when copy)
  WideScratch(const Conv2dGeom& g, const Wide& v, bool need_xpad, bool need_dx, bool widen, bool bits_)
      : copy(v.padded || widen),
        bits(bits_),
        xpad(need_xpad && copy && !bits ? size_t(g.C * v.Hp * v.Wp) : 0),
        xpad16(need_xpad && bits && v.padded ? size_t(g.C * v.Hp * v.Wp) : 0),
        out(size_t(g.O * v.L2)),
        dcols(need_dx ? size_t(g.C * g.kH * g.kW * v.L2) : 0),
        dxpad(need_dx && copy ? size_t(g.C * v.Hp * v.Wp) : 0) {}
  /// The padded plane (C, Hp, Wp) of sample xn (C, H, W) as T: xn itself when there is no
  /// padding and no conversion.
  template <class X>
  const T* padded(int nt, const Conv2dGeom& g, const Wide& v, const X* xn) {
    if constexpr (std::is_same_v<X, T>)
      if (!copy) return xn;
    over_channels(nt, g.C, [&](int64_t c0, int64_t c1) { pad_channels(xn, g, v, c0, c1, xpad.data()); });
    return xpad.data();
  }
  /// The same as bf16 bits (bits mode): xn's own bits when there is no padding, else copied
  /// into xpad16's interior (no conversion: half the bytes of a float32 plane).
  template <class X>
  const uint16_t* padded_bits(int nt, const Conv2dGeom& g, const Wide& v, const X* xn) {
    static_assert(sizeof(X) == sizeof(uint16_t));
    const auto* xb = reinterpret_cast<const uint16_t*>(xn);
    if (!v.padded) return xb;
    over_channels(nt, g.C, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c)
        for (int64_t h = 0; h < g.H; ++h)
          copy_row(xpad16.data() + (c * v.Hp + h + g.pH) * v.Wp + g.pW, xb + (c * g.H + h) * g.W, g.W);
    });
    return xpad16.data();
  }
  /// Calls f with the padded plane of xn: bf16 bits in bits mode, else T.
  template <class X, class F>
  void with_padded(int nt, const Conv2dGeom& g, const Wide& v, const X* xn, const F& f) {
    if constexpr (sizeof(X) == sizeof(uint16_t)) {
      if (bits) return f(padded_bits(nt, g, v, xn));
    }
    f(padded(nt, g, v, xn));
  }
};

}  // namespace

/// A bf16 forward (bits mode, one group, C even, the AVX512_BF16 kernel) with nothing
/// packed: the padded input is stored with its channels interleaved in pairs, (C/2, Hp, Wp)
/// 32-bit lanes holding (channel 2c', channel 2c'+1), so the GEMM's row of pairs for channel
/// pair c' and tap (kh, kw) is one contiguous run of that plane, read in place by
/// sgemm_bf16_pair_rows; the weights are paired in the same (channel pair, tap) order once
/// per call. The depth is the same products in another order: the sums differ from the
/// packed path's only by float32 rounding.
template <class X>
void conv2d_forward_wide_pairs(int nt, const Conv2dGeom& g, const X* x, const float* w, const float* bias, X* y,
                               int64_t lo, int64_t hi) {
  const int64_t L = g.OH * g.OW, T = g.kH * g.kW, Cp = g.C / 2, Kp = Cp * T;
  const Wide v = wide_of(g);
  const int64_t plane = v.Hp * v.Wp;
  std::vector<uint32_t> a(size_t(g.O * Kp));  // (O, Kp) weight pairs, the even channel in the low half
  for (int64_t o = 0; o < g.O; ++o)
    for (int64_t cp = 0; cp < Cp; ++cp)
      for (int64_t t = 0; t < T; ++t)
        a[size_t(o * Kp + cp * T + t)] = uint32_t(float_to_bf16_bits(w[(o * g.C + 2 * cp) * T + t])) |
                                         uint32_t(float_to_bf16_bits(w[(o * g.C + 2 * cp + 1) * T + t])) << 16;
  std::vector<int64_t> off(static_cast<size_t>(Kp));  // pair row (c', kh, kw): its start in the interleaved plane
  for (int64_t cp = 0; cp < Cp; ++cp)
    for (int64_t kh = 0; kh < g.kH; ++kh)
      for (int64_t kw = 0; kw < g.kW; ++kw) off[size_t(cp * T + kh * g.kW + kw)] = cp * plane + kh * g.dH * v.Wp + kw * g.dW;
  thread_local std::vector<uint32_t> xi;   // (C/2, Hp, Wp) interleaved, zero border
  thread_local std::vector<float> out;     // (O, L2)
  xi.assign(size_t(Cp * plane), 0u);
  out.resize(size_t(g.O * v.L2));
  for (int64_t n = lo; n < hi; ++n) {
    const auto* xb = reinterpret_cast<const uint16_t*>(x + n * g.C * g.H * g.W);
    over_channels(nt, Cp, [&](int64_t c0, int64_t c1) {
      for (int64_t cp = c0; cp < c1; ++cp)
        for (int64_t h = 0; h < g.H; ++h) {
          const uint16_t* r0 = xb + (2 * cp * g.H + h) * g.W;
          const uint16_t* r1 = r0 + g.H * g.W;
          uint32_t* d = xi.data() + cp * plane + (h + g.pH) * v.Wp + g.pW;
#if defined(KILN_SIMD_BF16_ROWS)
          simd::interleave_pairs(r0, r1, d, g.W);
#else
          for (int64_t i = 0; i < g.W; ++i) d[i] = uint32_t(r0[i]) | uint32_t(r1[i]) << 16;
#endif
        }
    });
    sgemm_bf16_pair_rows(g.O, v.L2, Kp, a.data(), Kp, xi.data(), off.data(), out.data(), v.L2);
    wide_to_dense(out.data(), g, v.Wp, v.L2, bias, y + n * g.O * L);
  }
}

/// Forward over samples [lo, hi) in the wide layout, one GEMM per sample and group whose
/// columns are read from the padded input through the tap table.
template <class T, class X>
void conv2d_forward_wide(int nt, const Conv2dGeom& g, const X* x, const T* w, const T* bias, X* y, int64_t lo,
                         int64_t hi) {
  if constexpr (std::is_same_v<T, float> && std::is_same_v<X, BFloat16>)
    if (bf16_bits<T, X>(g) && g.groups == 1 && g.C % 2 == 0 && sgemm_bf16_pair_rows_available())
      return conv2d_forward_wide_pairs(nt, g, x, w, bias, y, lo, hi);
  const int64_t L = g.OH * g.OW, G = g.groups, Og = g.O / G, Kg = g.C / G * g.kH * g.kW;
  const Wide v = wide_of(g);
  const std::vector<int64_t> rows = tap_rows(g, v);
  WideScratch<T> s(g, v, true, false, !std::is_same_v<X, T>, bf16_bits<T, X>(g));
  for (int64_t n = lo; n < hi; ++n) {
    s.with_padded(nt, g, v, x + n * g.C * g.H * g.W, [&](const auto* xp) {
      for (int64_t gi = 0; gi < G; ++gi)  // out_g (Og, L2) = w_g (Og, Kg) @ cols_g (Kg, L2)
        conv_gemm(g, false, false, Og, v.L2, Kg, w + gi * Og * Kg, Kg, xp, 0, rows.data() + gi * Kg, T(0),
                  s.out.data() + gi * Og * v.L2, v.L2);
    });
    wide_to_dense(s.out.data(), g, v.Wp, v.L2, bias, y + n * g.O * L);
  }
}

/// Backward over samples [lo, hi) in the wide layout; accumulates into dw (O, Kg) and db (O).
template <class T, class X>
void conv2d_backward_wide(int nt, const Conv2dGeom& g, const X* x, const T* w, const X* dy, X* dx, T* dw, T* db,
                          int64_t lo, int64_t hi) {
  const int64_t L = g.OH * g.OW, G = g.groups, Og = g.O / G, Kg = g.C / G * g.kH * g.kW;
  const Wide v = wide_of(g);
  const std::vector<int64_t> rows = tap_rows(g, v);
  WideScratch<T> s(g, v, dw != nullptr, dx != nullptr, !std::is_same_v<X, T>, bf16_bits<T, X>(g));
  T* dyw = s.out.data();  // (O, L2); the junk columns stay zero
  // A bf16 weight gradient with the padded input kept as bf16 bits runs transposed where
  // the AVX512_BF16 kernel is chosen: dw^T (Kg, O) += cols (Kg, L2) @ dy^T, the tap rows of
  // the padded input read in place as A (sgemm_bf16_a_rows), so only dy (O rows) is packed
  // where dy @ cols^T packs all C kH kW tap rows; the sum, in dwt, is added to dw at the end.
  const bool a_rows = dw && wide_wgrad_a_rows<T, X>(g);
  std::vector<float> dwt(a_rows ? size_t(Kg * g.O) : 0, 0.f);
  for (int64_t n = lo; n < hi; ++n) {
    dense_to_wide(dy + n * g.O * L, g, v.Wp, v.L2, dyw, db);
    if (a_rows) {
      if constexpr (std::is_same_v<T, float> && std::is_same_v<X, BFloat16>) {
        const uint16_t* xp = s.padded_bits(nt, g, v, x + n * g.C * g.H * g.W);
        sgemm_bf16_a_rows(Kg, g.O, v.L2, xp, rows.data(), dyw, v.L2, 1.f, dwt.data(), g.O);
      }
    } else if (dw) {
      s.with_padded(nt, g, v, x + n * g.C * g.H * g.W, [&](const auto* xp) {
        for (int64_t gi = 0; gi < G; ++gi)  // dw_g (Og, Kg) += dy_g (Og, L2) @ cols_g^T (L2, Kg)
          conv_gemm(g, false, true, Og, Kg, v.L2, dyw + gi * Og * v.L2, v.L2, xp, 0, rows.data() + gi * Kg, T(1),
                    dw + gi * Og * Kg, Kg);
      });
    }
    if (dx) {
      T* dc = s.dcols.data();  // dcols (C*kH*kW, L2)
      for (int64_t gi = 0; gi < G; ++gi)  // dcols_g (Kg, L2) = w_g^T (Kg, Og) @ dy_g (Og, L2)
        conv_gemm<T>(g, true, false, Kg, v.L2, Og, w + gi * Og * Kg, Kg, dyw + gi * Og * v.L2, v.L2, nullptr, T(0),
                     dc + gi * Kg * v.L2, v.L2);
      X* dxn = dx + n * g.C * g.H * g.W;
      T* dxp = nullptr;  // (C, Hp, Wp)
      if constexpr (std::is_same_v<X, T>) dxp = s.copy ? s.dxpad.data() : dxn;
      else dxp = s.dxpad.data();
      std::fill(dxp, dxp + g.C * v.Hp * v.Wp, T(0));
      over_channels(nt, g.C, [&](int64_t c0, int64_t c1) { col2im_wide_add(dc, v.L2, g, v, c0, c1, dxp); });
      if (s.copy) unpad_channels(dxp, g, v, dxn);  // the interior is dx
    }
  }
  if (a_rows)
    for (int64_t o = 0; o < g.O; ++o)
      for (int64_t k = 0; k < Kg; ++k) dw[o * Kg + k] += dwt[size_t(k * g.O + o)];
}

#define KILN_WIDE(T, X)                                                                                         \
  template void conv2d_forward_wide<T, X>(int, const Conv2dGeom&, const X*, const T*, const T*, X*, int64_t,       \
                                          int64_t);                                                                \
  template void conv2d_backward_wide<T, X>(int, const Conv2dGeom&, const X*, const T*, const X*, X*, T*, T*, int64_t, \
                                           int64_t);
KILN_WIDE(float, float)
KILN_WIDE(double, double)
KILN_WIDE(float, Half)
KILN_WIDE(float, BFloat16)
#undef KILN_WIDE

}  // namespace kiln::conv_cpu
