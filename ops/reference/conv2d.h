// The reference 2-D convolution: seven nested loops, the definition PyTorch's Conv2d
// documents. kiln's CPU convolution (ops/cpu/conv*.cpp) computes the same through im2col +
// GEMM, a stride-1 "wide" layout or register-blocked direct loops, chosen per layer; this
// is what each of them must equal. Oracle of the convolution tests, rung 0 of the ladder.
#pragma once
#include <cstdint>

namespace kiln::reference {

struct Conv2dShape {
  int64_t N, C, H, W;        ///< input (N, C, H, W)
  int64_t O, kH, kW;         ///< weight (O, C / groups, kH, kW)
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dil_h = 1, dil_w = 1, groups = 1;
  int64_t out_h() const { return (H + 2 * pad_h - dil_h * (kH - 1) - 1) / stride_h + 1; }
  int64_t out_w() const { return (W + 2 * pad_w - dil_w * (kW - 1) - 1) / stride_w + 1; }
};

/// y (N, O, out_h, out_w) = x * w + bias (bias may be null), contiguous NCHW, zero padding.
/// y[n][o][oh][ow] = bias[o] + sum over c, i, j of
///   x[n][g*Cg + c][oh*stride - pad + i*dil][ow*stride - pad + j*dil] * w[o][c][i][j],
/// g = o / (O / groups), Cg = C / groups, taps outside the input read 0. Sums in double.
template <class T>
void conv2d(const Conv2dShape& s, const T* x, const T* w, const T* bias, T* y) {
  const int64_t OH = s.out_h(), OW = s.out_w(), Cg = s.C / s.groups, Og = s.O / s.groups;
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t o = 0; o < s.O; ++o)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double acc = bias ? double(bias[o]) : 0.0;
          const int64_t g = o / Og;
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t i = 0; i < s.kH; ++i)
              for (int64_t j = 0; j < s.kW; ++j) {
                const int64_t ih = oh * s.stride_h - s.pad_h + i * s.dil_h;
                const int64_t iw = ow * s.stride_w - s.pad_w + j * s.dil_w;
                if (ih < 0 || ih >= s.H || iw < 0 || iw >= s.W) continue;
                acc += double(x[((n * s.C + g * Cg + c) * s.H + ih) * s.W + iw]) *
                       double(w[((o * Cg + c) * s.kH + i) * s.kW + j]);
              }
          y[((n * s.O + o) * OH + oh) * OW + ow] = T(acc);
        }
}

}  // namespace kiln::reference
