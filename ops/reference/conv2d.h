// The reference 2-D convolution: seven nested loops, the definition PyTorch's Conv2d
// documents. kiln's CPU convolution (ops/cpu/conv*.cpp) computes the same through im2col +
// GEMM, a stride-1 "wide" layout or register-blocked direct loops, chosen per layer; this
// is what each of them must equal. Oracle of the convolution tests, rung 0 of the ladder.
#pragma once
#include <cstdint>
#include "kiln/core/macros.h"

namespace kiln::reference {

struct Conv2dShape {
  int64_t N, C, H, W;        ///< input (N, C, H, W)
  int64_t O, kH, kW;         ///< weight (O, C / groups, kH, kW)
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dil_h = 1, dil_w = 1, groups = 1;
  KILN_HD_INLINE int64_t out_h() const { return (H + 2 * pad_h - dil_h * (kH - 1) - 1) / stride_h + 1; }
  KILN_HD_INLINE int64_t out_w() const { return (W + 2 * pad_w - dil_w * (kW - 1) - 1) / stride_w + 1; }
};

/// One output element y[n][o][oh][ow] = bias[o] + sum over c, i, j of
///   x[n][g*Cg + c][oh*stride - pad + i*dil][ow*stride - pad + j*dil] * w[o][c][i][j],
/// g = o / (O / groups), Cg = C / groups, taps outside the input read 0 (contiguous NCHW,
/// bias may be null), summed in Acc. Host and device code: the GPU ladder's naive kernel
/// (ops/cuda/ladder.cu) gives one thread one element and calls this with Acc = float.
template <class Acc, class T>
KILN_HD_INLINE Acc conv2d_at(const Conv2dShape& s, const T* x, const T* w, const T* bias, int64_t n, int64_t o,
                             int64_t oh, int64_t ow) {
  const int64_t Cg = s.C / s.groups, g = o / (s.O / s.groups);
  Acc acc = bias ? Acc(bias[o]) : Acc(0);
  for (int64_t c = 0; c < Cg; ++c)
    for (int64_t i = 0; i < s.kH; ++i)
      for (int64_t j = 0; j < s.kW; ++j) {
        const int64_t ih = oh * s.stride_h - s.pad_h + i * s.dil_h;
        const int64_t iw = ow * s.stride_w - s.pad_w + j * s.dil_w;
        if (ih < 0 || ih >= s.H || iw < 0 || iw >= s.W) continue;
        acc += Acc(x[((n * s.C + g * Cg + c) * s.H + ih) * s.W + iw]) * Acc(w[((o * Cg + c) * s.kH + i) * s.kW + j]);
      }
  return acc;
}

/// y (N, O, out_h, out_w) = x * w + bias, every element by conv2d_at, summed in double.
template <class T>
void conv2d(const Conv2dShape& s, const T* x, const T* w, const T* bias, T* y) {
  const int64_t OH = s.out_h(), OW = s.out_w();
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t o = 0; o < s.O; ++o)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow)
          y[((n * s.O + o) * OH + oh) * OW + ow] = T(conv2d_at<double>(s, x, w, bias, n, o, oh, ow));
}

}  // namespace kiln::reference
