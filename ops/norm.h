// Normalisation: batch norm (training with batch statistics and running-stat update,
// inference with running stats), layer norm and group norm.
#pragma once
#include "kiln/core/tensor.h"

namespace kiln {

/// x (N, C, ...) normalised per channel C. In training, uses the batch's mean and biased
/// variance and updates running_mean/running_var in place (unbiased variance, momentum);
/// in inference, uses the running stats. weight/bias (C) may be undefined. eps > 0 when
/// training (PyTorch's check), >= 0 in inference.
Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                  const Tensor& running_var, bool training, double momentum = 0.1, double eps = 1e-5);

/// Normalises over the trailing dims given by normalized_shape; weight/bias of that shape
/// (or undefined).
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);

/// x (N, C, ...) normalised over each group of C / num_groups channels (and all the spatial
/// positions) of each sample, with the biased variance, then weight/bias (C, or undefined)
/// per channel (torch.nn.functional.group_norm). layer_norm's kernels over (N, G, C/G * HW),
/// so, like layer_norm, differentiable once.
Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight = Tensor(), const Tensor& bias = Tensor(),
                  double eps = 1e-5);

/// x (N, C, ...) normalised per sample and channel over its positions (torch.nn.functional.
/// instance_norm). use_input_stats (PyTorch's training or not track_running_stats): each
/// instance's own mean and biased variance (group_norm with a group per channel; more than one
/// position needed), and, where running_mean / running_var (C) are given, they move towards
/// the batch's average instance statistics in place: r = mean over N of ((1 - momentum) r +
/// momentum stat), the variance unbiased, as PyTorch's batch_norm over (1, N*C, ...). Otherwise
/// the running statistics normalise, as batch_norm in inference.
Tensor instance_norm(const Tensor& x, const Tensor& running_mean = Tensor(), const Tensor& running_var = Tensor(),
                     const Tensor& weight = Tensor(), const Tensor& bias = Tensor(), bool use_input_stats = true,
                     double momentum = 0.1, double eps = 1e-5);

}  // namespace kiln
