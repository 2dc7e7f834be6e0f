// 2-D convolution and pooling on NCHW tensors.
#pragma once
#include <array>
#include "kiln/core/tensor.h"

namespace kiln {

using IntPair = std::array<int64_t, 2>;

struct Conv2dArgs {
  IntPair stride{1, 1};
  IntPair padding{0, 0};
  IntPair dilation{1, 1};
  int64_t groups = 1;
};
/// x (N, C, H, W), weight (O, C/groups, kH, kW), bias (O) or undefined -> (N, O, H', W').
/// C and O must be at least 1 (a kiln::Error otherwise; PyTorch returns an empty tensor for
/// C = 0 and refuses O = 0), and H and W too (as PyTorch; only N may be 0). conv_transpose2d
/// and the pools likewise. On the CPU a NaN or inf in x (w) can reach more entries of dw
/// (dx) than in PyTorch: the direct, wide and transposed algorithms multiply it by the zeros
/// of their padding columns (0 * inf = NaN); im2col and 1x1 convolutions match PyTorch.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), Conv2dArgs args = {});

struct ConvTranspose2dArgs {
  IntPair stride{1, 1};
  IntPair padding{0, 0};
  IntPair output_padding{0, 0};  ///< added to one side of the output; < stride or < dilation
  IntPair dilation{1, 1};
  int64_t groups = 1;
};
/// Transposed convolution (PyTorch's conv_transpose2d; "deconvolution"): the gradient of
/// conv2d with respect to its input. x (N, Cin, H, W) or (Cin, H, W), weight
/// (Cin, Cout/groups, kH, kW), bias (Cout) or undefined -> (N, Cout, H', W') with
/// H' = (H - 1) stride - 2 padding + dilation (kH - 1) + output_padding + 1. Runs conv2d's
/// kernels: its backward-data pass forward, its forward and backward-filter passes backward.
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
                        ConvTranspose2dArgs args = {});

/// Max pooling; stride {0,0} means stride = kernel. Padding pads with -inf.
Tensor max_pool2d(const Tensor& x, IntPair kernel, IntPair stride = {0, 0}, IntPair padding = {0, 0});
/// Average pooling; stride {0,0} means stride = kernel. Padded zeros count in the mean
/// when count_include_pad (PyTorch's default).
Tensor avg_pool2d(const Tensor& x, IntPair kernel, IntPair stride = {0, 0}, IntPair padding = {0, 0},
                  bool count_include_pad = true);
/// Average pooling to a fixed output size (PyTorch's bin boundaries).
Tensor adaptive_avg_pool2d(const Tensor& x, IntPair output_size);

/// Chooses how conv2d on CUDA picks its cuDNN algorithms: false (the default) takes
/// cuDNN's heuristic choice; true times the candidates on the first call of each shape
/// (input and weight sizes, stride, padding, dilation, groups, dtype) and direction, and
/// keeps the fastest - worth it when shapes repeat, as in training. A plain flag read at
/// every call; it changes nothing on the CPU.
void cudnn_benchmark(bool enabled);
/// Whether cudnn_benchmark(true) is in effect.
bool cudnn_benchmark_enabled();

}  // namespace kiln
