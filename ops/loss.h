// Losses: cross_entropy (from logits, stable), nll_loss, mse_loss (own kernels), and the
// pointwise losses l1, smooth_l1, huber, binary_cross_entropy (with logits) and kl_div
// (compositions of elementwise ops with PyTorch's formulas).
// 16-bit float inputs are computed in float32 and the loss is float32 (autocast keeps
// losses in fp32); gradients flow back to the 16-bit input in its own dtype.
#pragma once
#include "kiln/core/tensor.h"

namespace kiln {

/// batchmean: the sum divided by the batch size input.size(0), kl_div's only (PyTorch's
/// recommended KL reduction); the other losses refuse it.
enum class Reduction { none, mean, sum, batchmean };

struct CrossEntropyArgs {
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;
  Reduction reduction = Reduction::mean;
  /// Class weights (C): each target's loss times weight[target]; a mean divides by the sum
  /// of the non-ignored targets' weights, and label smoothing weighs class c by weight[c]
  /// (PyTorch's). Computed with recorded ops on log_softmax instead of the fused kernel.
  Tensor weight = {};
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
  Tensor weight = {};  ///< class weights (C), as CrossEntropyArgs::weight
};
/// log-probabilities (N, C) or (N, C, d1, ...) and int64 targets: mean(-log_probs[t]) over
/// non-ignored targets (same shapes, target checks and reductions as cross_entropy).
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, NllLossArgs args = {});

/// (input - target)^2 reduced; shapes must match (no broadcasting). Mixed float dtypes are
/// promoted; both inputs are differentiable. The mean of an empty input is NaN.
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);

// Pointwise losses: input and target of one shape (no broadcasting), floating, on one
// device; 16-bit inputs computed in float32 (the loss is float32, as mse_loss); float32
// under autocast. Both input and target are differentiable. The mean of an empty input is NaN.

/// |input - target| reduced (PyTorch's l1_loss).
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);
/// With z = |input - target|: 0.5 z^2 / beta where z < beta, z - 0.5 beta elsewhere;
/// beta = 0 is l1_loss (PyTorch's smooth_l1_loss). beta must be >= 0.
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean,
                      double beta = 1.0);
/// With z = |input - target|: 0.5 z^2 where z < delta, delta (z - 0.5 delta) elsewhere
/// (PyTorch's huber_loss; delta > 0).
Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean,
                  double delta = 1.0);

struct BceArgs {
  Tensor weight = {};  ///< rescales each element; broadcastable to the input
  Reduction reduction = Reduction::mean;
};
/// -w (t log p + (1 - t) log(1 - p)) for probabilities p and targets t in [0, 1] (checked:
/// a value outside is an error naming it, which reads the tensors back to the host), each
/// log clamped at -100 so p = 0 or 1 gives a finite loss; the gradients are PyTorch's:
/// w (p - t) / max(p (1 - p), 1e-12), finite at a saturated p too, and -w logit(p) for t.
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const BceArgs& args = {});

struct BceWithLogitsArgs {
  Tensor weight = {};      ///< rescales each element; broadcastable to the input
  Tensor pos_weight = {};  ///< weight of the positive term, per class: broadcastable to the input
  Reduction reduction = Reduction::mean;
};
/// binary_cross_entropy(sigmoid(x), t) without overflow, as PyTorch:
///   w ((1 - t) x - (1 + (pos_weight - 1) t) log_sigmoid(x)).
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target,
                                        const BceWithLogitsArgs& args = {});

struct KlDivArgs {
  Reduction reduction = Reduction::mean;  ///< batchmean gives the true KL divergence per sample
  bool log_target = false;                ///< target given as log-probabilities
};
/// Pointwise KL divergence of log-probabilities `input` from `target` (PyTorch's kl_div):
/// t (log t - input) with 0 where t = 0, or e^t (t - input) when log_target. Where t = 0 a
/// target that requires grad gets -input g (the t log t term left out; PyTorch gives NaN).
Tensor kl_div(const Tensor& input, const Tensor& target, const KlDivArgs& args = {});

}  // namespace kiln
