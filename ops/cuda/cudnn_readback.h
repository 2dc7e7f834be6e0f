// What cuDNN reads back from the descriptors kiln's conv2d and batch_norm set up
// (ops/cuda/conv.cu, ops/cuda/norm.cu), for tests/cuda/test_cuda_cudnn_desc.cpp. Setting
// and querying descriptors needs no GPU (only cudnnCreate does), so the descriptor set-up
// is tested on every CUDA build. CUDA builds only (KILN_WITH_CUDA).
#pragma once
#include <cstdint>
#include "kiln/core/dtype.h"
#include "kiln/ops/kernels/conv.h"

namespace kiln::cuda {

/// conv2d's descriptors for one call, read back through cudnnGet*Descriptor.
struct ConvDescriptorReadback {
  int x[4] = {}, w[4] = {}, y[4] = {};  ///< NCHW dims of the input, filter and output descriptors
  int out[4] = {};                      ///< cudnnGetConvolution2dForwardOutputDim
  int pad[2] = {}, stride[2] = {}, dilation[2] = {};
  int groups = 0;
  int math = -1;           ///< cudnnMathType_t
  int data_type = -1;      ///< cudnnDataType_t of x, w and y (checked equal)
  int compute_type = -1;   ///< cudnnDataType_t of the accumulation
  bool cross_correlation = false;
};
ConvDescriptorReadback conv2d_descriptor_readback(DType dtype, const Conv2dGeom& g);

/// batch_norm's descriptors for x (N, C, S): x as (N, C, S, 1) and the derived
/// per-channel descriptor.
struct BatchNormDescriptorReadback {
  int x[4] = {}, param[4] = {};
  int x_type = -1, param_type = -1;  ///< cudnnDataType_t
};
BatchNormDescriptorReadback batch_norm_descriptor_readback(DType dtype, int64_t N, int64_t C, int64_t S);

}  // namespace kiln::cuda
