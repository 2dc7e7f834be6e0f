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

}  // namespace kiln
