// Losses: cross_entropy (from logits, stable), nll_loss and mse_loss.
// 16-bit float inputs are computed in float32 and the loss is float32 (autocast keeps
// losses in fp32); gradients flow back to the 16-bit input in its own dtype.
#pragma once
#include "kiln/core/tensor.h"

namespace kiln {

enum class Reduction { none, mean, sum };

struct CrossEntropyArgs {
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;
  Reduction reduction = Reduction::mean;
};
/// logits (N, C) or (N, C, d1, ...), target int64 class indices (N) or (N, d1, ...).
/// Mean reduction divides by the number of non-ignored targets.
/// One fused kernel (log-softmax + pick + smoothing) and a fused backward
/// ((softmax - smoothed one-hot) * g). With eps = label_smoothing, PyTorch's definition:
///   loss_i = (1 - eps) * (-log p_i[t_i]) + eps * mean_c(-log p_i[c]).
/// Also accepts logits (C) with a 0-dim target (one sample), and int32/uint8 targets.
/// A target outside [0, C) that is not ignore_index throws kiln::Error naming the value.
/// If every target is ignored, the mean is NaN (as in PyTorch) and the gradient 0.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, CrossEntropyArgs args = {});

struct NllLossArgs {
  int64_t ignore_index = -100;
  Reduction reduction = Reduction::mean;
};
/// log-probabilities (N, C) or (N, C, d1, ...) and int64 targets: mean(-log_probs[t]) over
/// non-ignored targets (same shapes, target checks and reductions as cross_entropy).
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, NllLossArgs args = {});

/// (input - target)^2 reduced; shapes must match (no broadcasting). Mixed float dtypes are
/// promoted; both inputs are differentiable. The mean of an empty input is NaN.
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);

}  // namespace kiln
