// Losses as modules (wrapping ops/loss.h): CrossEntropyLoss, NLLLoss, MSELoss.
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

}  // namespace kiln::nn
