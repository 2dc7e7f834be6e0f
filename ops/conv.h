// 2-D convolution and pooling on NCHW tensors, and their 1-D versions on NCL tensors.
#pragma once
#include <array>
#include <utility>
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

/// Max pooling (PyTorch's max_pool2d); stride {0,0} means stride = kernel. Padding pads
/// with -inf and is at most kernel/2; the kH x kW taps of a window lie dilation apart;
/// ceil_mode rounds the output size up, keeping only windows that start inside the input or
/// its left padding. A NaN in a window is its maximum; on ties the first (row-major) wins.
/// A dilated window whose taps all fall in the padding is an error (PyTorch returns -inf and
/// an index outside the plane, which its backward then writes to).
Tensor max_pool2d(const Tensor& x, IntPair kernel, IntPair stride = {0, 0}, IntPair padding = {0, 0},
                  IntPair dilation = {1, 1}, bool ceil_mode = false);
/// max_pool2d and the positions of its maxima (PyTorch's return_indices=True): int64
/// indices h*W + w into each input plane, of y's shape, not differentiable.
std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, IntPair kernel, IntPair stride = {0, 0},
                                                  IntPair padding = {0, 0}, IntPair dilation = {1, 1},
                                                  bool ceil_mode = false);
/// Average pooling; stride {0,0} means stride = kernel. Padded zeros count in the mean
/// when count_include_pad (PyTorch's default); ceil_mode as max_pool2d's (a window reaching
/// past the padded input divides by its part inside it, as PyTorch).
Tensor avg_pool2d(const Tensor& x, IntPair kernel, IntPair stride = {0, 0}, IntPair padding = {0, 0},
                  bool count_include_pad = true, bool ceil_mode = false);
/// Average pooling to a fixed output size (PyTorch's bin boundaries: bin i of n outputs
/// over an axis of size L covers [floor(i L / n), ceil((i + 1) L / n))).
Tensor adaptive_avg_pool2d(const Tensor& x, IntPair output_size);
/// Max pooling over adaptive_avg_pool2d's bins.
Tensor adaptive_max_pool2d(const Tensor& x, IntPair output_size);
/// adaptive_max_pool2d and the int64 indices h*W + w of its maxima.
std::pair<Tensor, Tensor> adaptive_max_pool2d_with_indices(const Tensor& x, IntPair output_size);

// 1-D versions over (N, C, L) or (C, L): the 2-D op on a height-1 view (x.unsqueeze(-2)),
// so the same kernels, gradients and checks; indices are positions along L.
/// x (N, C, L), weight (O, C/groups, K), bias (O) or undefined -> (N, O, L').
Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), int64_t stride = 1,
              int64_t padding = 0, int64_t dilation = 1, int64_t groups = 1);
/// stride 0 means stride = kernel.
Tensor max_pool1d(const Tensor& x, int64_t kernel, int64_t stride = 0, int64_t padding = 0, int64_t dilation = 1,
                  bool ceil_mode = false);
Tensor avg_pool1d(const Tensor& x, int64_t kernel, int64_t stride = 0, int64_t padding = 0,
                  bool count_include_pad = true, bool ceil_mode = false);
Tensor adaptive_avg_pool1d(const Tensor& x, int64_t output_size);
Tensor adaptive_max_pool1d(const Tensor& x, int64_t output_size);
/// Power-average pooling (torch.nn.functional.lp_pool1d / lp_pool2d): (sum over the window of
/// x^p)^(1/p), PyTorch's composition avg_pool(x^p) * window, through sign * relu(|.|) and the
/// 1/p power (so p = inf is not offered; no padding). stride 0 means stride = kernel.
Tensor lp_pool1d(const Tensor& x, double norm_type, int64_t kernel, int64_t stride = 0, bool ceil_mode = false);
Tensor lp_pool2d(const Tensor& x, double norm_type, IntPair kernel, IntPair stride = {0, 0}, bool ceil_mode = false);

/// Transposed 1-D convolution (PyTorch's conv_transpose1d): conv_transpose2d on a height-1
/// view. x (N, Cin, L) or (Cin, L), weight (Cin, Cout/groups, K).
Tensor conv_transpose1d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), int64_t stride = 1,
                        int64_t padding = 0, int64_t output_padding = 0, int64_t groups = 1, int64_t dilation = 1);
/// max_unpool2d / 1d (PyTorch's): the inverse of max pooling with indices: y (N, C,
/// output_size) zero but for x's entries written at their indices (positions h W + w in
/// each plane, as max_pool2d_with_indices gives). Differentiable in x.
Tensor max_unpool2d(const Tensor& x, const Tensor& indices, IntPair output_size);
Tensor max_unpool1d(const Tensor& x, const Tensor& indices, int64_t output_size);

// 3-D versions over (N, C, D, H, W) or (C, D, H, W): each a sum (or max) over the kernel's
// depth taps of the 2-D op on depth slices folded into the batch (one conv2d / pool2d call
// per tap), so they run conv2d's kernels on every device and are differentiable through them.
using IntTriple = std::array<int64_t, 3>;
struct Conv3dArgs {
  IntTriple stride{1, 1, 1};
  IntTriple padding{0, 0, 0};
  IntTriple dilation{1, 1, 1};
  int64_t groups = 1;
};
/// x (N, C, D, H, W), weight (O, C/groups, kD, kH, kW), bias (O) or undefined -> (N, O, D', H', W').
Tensor conv3d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), Conv3dArgs args = {});
/// stride {0, 0, 0} means stride = kernel; padding (-inf for max, zeros counted in the mean
/// when count_include_pad) at most kernel / 2; no ceil_mode. Max: on ties the first in (d, h,
/// w) order, as PyTorch's.
Tensor max_pool3d(const Tensor& x, IntTriple kernel, IntTriple stride = {0, 0, 0}, IntTriple padding = {0, 0, 0},
                  IntTriple dilation = {1, 1, 1});
Tensor avg_pool3d(const Tensor& x, IntTriple kernel, IntTriple stride = {0, 0, 0}, IntTriple padding = {0, 0, 0},
                  bool count_include_pad = true);
struct ConvTranspose3dArgs {
  IntTriple stride{1, 1, 1};
  IntTriple padding{0, 0, 0};
  IntTriple output_padding{0, 0, 0};  ///< added to one side of the output; < stride or < dilation
  IntTriple dilation{1, 1, 1};
  int64_t groups = 1;
};
/// Transposed 3-D convolution (PyTorch's conv_transpose3d): x (N, Cin, D, H, W) or unbatched,
/// weight (Cin, Cout/groups, kD, kH, kW), bias (Cout) or undefined -> (N, Cout, D', H', W'),
/// D' = (D - 1) stride - 2 padding + dilation (kD - 1) + output_padding + 1 and so on: each
/// depth tap one conv_transpose2d over the depth slices folded into the batch, its slices
/// placed stride apart at their depth and summed.
Tensor conv_transpose3d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
                        ConvTranspose3dArgs args = {});
/// Adaptive pooling to a fixed (D, H, W) output size with PyTorch's bins in each dim
/// (adaptive_avg_pool3d / adaptive_max_pool3d): the 2-D op on every depth slice, then the
/// 1-D op over depth (both separate over the boxes' dims).
Tensor adaptive_avg_pool3d(const Tensor& x, IntTriple output_size);
Tensor adaptive_max_pool3d(const Tensor& x, IntTriple output_size);

/// Chooses how conv2d on CUDA picks its cuDNN algorithms: false (the default) takes
/// cuDNN's heuristic choice; true times the candidates on the first call of each shape
/// (input and weight sizes, stride, padding, dilation, groups, dtype) and direction, and
/// keeps the fastest - worth it when shapes repeat, as in training. A plain flag read at
/// every call; it changes nothing on the CPU.
void cudnn_benchmark(bool enabled);
/// Whether cudnn_benchmark(true) is in effect.
bool cudnn_benchmark_enabled();

}  // namespace kiln
