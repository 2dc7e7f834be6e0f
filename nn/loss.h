// Losses as modules (wrapping ops/loss.h): CrossEntropyLoss, NLLLoss, MSELoss, L1Loss,
// SmoothL1Loss, HuberLoss, BCELoss, BCEWithLogitsLoss, KLDivLoss.
//   nn::CrossEntropyLoss loss_fn({.label_smoothing = 0.1});  auto loss = loss_fn(logits, target);
#pragma once
#include "kiln/nn/module.h"
#include "kiln/ops/loss.h"

namespace kiln::nn {

/// Cross entropy from logits (N, C[, d...]) and int64 class targets (N[, d...]).
class CrossEntropyLoss : public Module {
 public:
  explicit CrossEntropyLoss(CrossEntropyArgs args = {}) : args(args) {}
  using Module::forward;
  using Module::operator();
  Tensor forward(const Tensor& logits, const Tensor& target) const { return cross_entropy(logits, target, args); }
  Tensor operator()(const Tensor& logits, const Tensor& target) const { return forward(logits, target); }
  std::string extra_repr() const override;
  CrossEntropyArgs args;
};

/// Negative log-likelihood from log-probabilities (N, C[, d...]) and int64 targets.
class NLLLoss : public Module {
 public:
  explicit NLLLoss(NllLossArgs args = {}) : args(args) {}
  using Module::forward;
  using Module::operator();
  Tensor forward(const Tensor& log_probs, const Tensor& target) const { return nll_loss(log_probs, target, args); }
  Tensor operator()(const Tensor& log_probs, const Tensor& target) const { return forward(log_probs, target); }
  std::string extra_repr() const override;
  NllLossArgs args;
};

/// Mean (or summed) squared error; input and target shapes must match.
class MSELoss : public Module {
 public:
  explicit MSELoss(Reduction reduction = Reduction::mean) : reduction(reduction) {}
  using Module::forward;
  using Module::operator();
  Tensor forward(const Tensor& input, const Tensor& target) const { return mse_loss(input, target, reduction); }
  Tensor operator()(const Tensor& input, const Tensor& target) const { return forward(input, target); }
  std::string extra_repr() const override;
  Reduction reduction;
};

/// A pointwise loss module: forward(input, target) calls F with the module's arguments.
#define KILN_POINTWISE_LOSS(Name, Args, call)                                                     \
  class Name : public Module {                                                                    \
   public:                                                                                        \
    explicit Name(Args args = {}) : args(args) {}                                                 \
    using Module::forward;                                                                        \
    using Module::operator();                                                                     \
    Tensor forward(const Tensor& input, const Tensor& target) const { return call; }              \
    Tensor operator()(const Tensor& input, const Tensor& target) const { return forward(input, target); } \
    std::string extra_repr() const override;                                                      \
    Args args;                                                                                    \
  };

struct L1LossArgs {
  Reduction reduction = Reduction::mean;
};
struct SmoothL1LossArgs {
  Reduction reduction = Reduction::mean;
  double beta = 1.0;
};
struct HuberLossArgs {
  Reduction reduction = Reduction::mean;
  double delta = 1.0;
};
/// Mean (or summed) absolute error.
KILN_POINTWISE_LOSS(L1Loss, L1LossArgs, l1_loss(input, target, args.reduction))
/// Quadratic below beta, absolute above (kiln::smooth_l1_loss).
KILN_POINTWISE_LOSS(SmoothL1Loss, SmoothL1LossArgs, smooth_l1_loss(input, target, args.reduction, args.beta))
/// Quadratic below delta, delta times absolute above (kiln::huber_loss).
KILN_POINTWISE_LOSS(HuberLoss, HuberLossArgs, huber_loss(input, target, args.reduction, args.delta))
/// Binary cross entropy of probabilities in [0, 1] (kiln::binary_cross_entropy).
KILN_POINTWISE_LOSS(BCELoss, BceArgs, binary_cross_entropy(input, target, args))
/// Binary cross entropy of logits, with weight and pos_weight (kiln::binary_cross_entropy_with_logits).
KILN_POINTWISE_LOSS(BCEWithLogitsLoss, BceWithLogitsArgs, binary_cross_entropy_with_logits(input, target, args))
/// KL divergence of log-probabilities from a target (kiln::kl_div); use Reduction::batchmean.
KILN_POINTWISE_LOSS(KLDivLoss, KlDivArgs, kl_div(input, target, args))
#undef KILN_POINTWISE_LOSS

}  // namespace kiln::nn
