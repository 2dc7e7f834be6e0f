// Kernel types of the conv op family (conv2d and 2-D pooling). Each op registers one
// table of function pointers (forward + backward) under its Op in the dispatch table:
//   kernel<const Conv2dKernels>(Op::conv2d, dev)->forward(...)
// All buffers are contiguous NCHW; kernels take raw pointers and a geometry struct. The
// pooling kernels take every floating dtype (the CPU computes float16 / bfloat16 in
// float32 a plane at a time, or selects their bit patterns where max pooling allows).
#pragma once
#include <cstdint>
#include "kiln/core/dtype.h"

namespace kiln {

/// Shapes of one conv2d call: x (N, C, H, W), w (O, C/groups, kH, kW), y (N, O, OH, OW).
struct Conv2dGeom {
  int64_t N, C, H, W;
  int64_t O, kH, kW;
  int64_t sH, sW, pH, pW, dH, dW;
  int64_t groups;
  int64_t OH, OW;
  /// CPU only: the float32 buffers hold bf16 values (a bfloat16 convolution, widened), so
  /// the GEMMs may multiply them as bf16 pairs and sum in float32 (exact products; the
  /// AVX512_BF16 GEMM where sgemm_bf16_preferred()). Ignored by the CUDA kernels.
  bool bf16_products = false;
};

/// Buffers in dtype; on the CPU dtype may also be float16 / bfloat16, meaning x, y, dy and
/// dx are stored in that dtype (computed on in float32: widened a channel plane at a time as
/// the direct and wide algorithms copy them, a block of samples for im2col) and w, bias, dw
/// and dbias are float32.
struct Conv2dKernels {
  /// y (N, O, OH, OW) = conv(x (N, C, H, W), w (O, C/groups, kH, kW)) + bias (O); bias may be null.
  void (*forward)(DType dtype, const Conv2dGeom& g, const void* x, const void* w, const void* bias, void* y);
  /// From dy (N, O, OH, OW): dx (N, C, H, W), dw (O, C/groups, kH, kW), dbias (O). Any of
  /// the three may be null (not wanted); the others are overwritten.
  void (*backward)(DType dtype, const Conv2dGeom& g, const void* x, const void* w, const void* dy, void* dx,
                   void* dw, void* dbias);
};

/// Shapes of one pooling call over P = N*C independent planes: x (P, H, W) -> y (P, OH, OW).
/// kH..pW are unused by adaptive pooling.
struct Pool2dGeom {
  int64_t P, H, W;
  int64_t kH, kW, sH, sW, pH, pW;
  int64_t OH, OW;
  int64_t dH = 1, dW = 1;  ///< dilation (max pooling only): window taps h0 + j dH, j < kH
};

struct MaxPool2dKernels {
  /// y (P, OH, OW) and idx (P, OH, OW): flat index h*W + w of each window's max in its plane.
  /// Padding counts as -inf; NaN propagates.
  void (*forward)(DType dtype, const Pool2dGeom& g, const void* x, void* y, int64_t* idx);
  /// dx (P, H, W) = scatter-add of dy (P, OH, OW) to idx (dx is overwritten).
  void (*backward)(DType dtype, const Pool2dGeom& g, const void* dy, const int64_t* idx, void* dx);
};

/// adaptive_max_pool2d registers a MaxPool2dKernels too: its windows are the adaptive bins
/// of AdaptiveAvgPool2dKernels, y and idx as max pooling's.

struct AvgPool2dKernels {
  /// y (P, OH, OW): window means; padded zeros count in the divisor when count_include_pad.
  void (*forward)(DType dtype, const Pool2dGeom& g, bool count_include_pad, const void* x, void* y);
  /// dx (P, H, W) from dy (P, OH, OW) (dx is overwritten).
  void (*backward)(DType dtype, const Pool2dGeom& g, bool count_include_pad, const void* dy, void* dx);
};

struct AdaptiveAvgPool2dKernels {
  /// y (P, OH, OW): mean over bins [floor(i*H/OH), ceil((i+1)*H/OH)) (PyTorch's).
  void (*forward)(DType dtype, const Pool2dGeom& g, const void* x, void* y);
  /// dx (P, H, W) from dy (P, OH, OW) (dx is overwritten).
  void (*backward)(DType dtype, const Pool2dGeom& g, const void* dy, void* dx);
};

}  // namespace kiln
