// Losses as modules (wrapping ops/loss.h): CrossEntropyLoss, NLLLoss, MSELoss, L1Loss,
// SmoothL1Loss, HuberLoss, BCELoss, BCEWithLogitsLoss, KLDivLoss, HingeEmbeddingLoss,
// SoftMarginLoss, MultiLabelSoftMarginLoss, MultiMarginLoss, PoissonNLLLoss (two inputs),
// MarginRankingLoss, CosineEmbeddingLoss, TripletMarginLoss, GaussianNLLLoss (three).
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
struct HingeEmbeddingLossArgs {
  double margin = 1.0;
  Reduction reduction = Reduction::mean;
};
struct SoftMarginLossArgs {
  Reduction reduction = Reduction::mean;
};
/// x for similar pairs (target 1), max(0, margin - x) for dissimilar ones (-1).
KILN_POINTWISE_LOSS(HingeEmbeddingLoss, HingeEmbeddingLossArgs,
                    hinge_embedding_loss(input, target, args.margin, args.reduction))
/// log(1 + exp(-target * input)) (kiln::soft_margin_loss).
KILN_POINTWISE_LOSS(SoftMarginLoss, SoftMarginLossArgs, soft_margin_loss(input, target, args.reduction))
/// Multi-label one-vs-all logistic loss (kiln::multilabel_soft_margin_loss).
KILN_POINTWISE_LOSS(MultiLabelSoftMarginLoss, MultilabelSoftMarginArgs, multilabel_soft_margin_loss(input, target, args))
/// Multi-class hinge loss over int64 class targets (kiln::multi_margin_loss).
KILN_POINTWISE_LOSS(MultiMarginLoss, MultiMarginArgs, multi_margin_loss(input, target, args))
struct MultiLabelMarginLossArgs {
  Reduction reduction = Reduction::mean;
};
/// Multi-label hinge loss over -1-terminated class lists (kiln::multilabel_margin_loss).
KILN_POINTWISE_LOSS(MultiLabelMarginLoss, MultiLabelMarginLossArgs, multilabel_margin_loss(input, target, args.reduction))
/// Poisson negative log-likelihood (kiln::poisson_nll_loss).
KILN_POINTWISE_LOSS(PoissonNLLLoss, PoissonNllArgs, poisson_nll_loss(input, target, args))
#undef KILN_POINTWISE_LOSS

/// A loss module of three inputs: forward(a, b, c) calls F with the module's arguments.
#define KILN_TERNARY_LOSS(Name, Args, A, B, C, call)                                             \
  class Name : public Module {                                                                    \
   public:                                                                                        \
    explicit Name(Args args = {}) : args(args) {}                                                 \
    using Module::forward;                                                                        \
    using Module::operator();                                                                     \
    Tensor forward(const Tensor& A, const Tensor& B, const Tensor& C) const { return call; }      \
    Tensor operator()(const Tensor& A, const Tensor& B, const Tensor& C) const { return forward(A, B, C); } \
    std::string extra_repr() const override;                                                      \
    Args args;                                                                                    \
  };
struct MarginRankingLossArgs {
  double margin = 0.0;
  Reduction reduction = Reduction::mean;
};
struct CosineEmbeddingLossArgs {
  double margin = 0.0;
  Reduction reduction = Reduction::mean;
};
/// max(0, -target * (x1 - x2) + margin) (kiln::margin_ranking_loss).
KILN_TERNARY_LOSS(MarginRankingLoss, MarginRankingLossArgs, x1, x2, target,
                  margin_ranking_loss(x1, x2, target, args.margin, args.reduction))
/// 1 - cos for similar pairs (target 1), max(0, cos - margin) for dissimilar ones (-1).
KILN_TERNARY_LOSS(CosineEmbeddingLoss, CosineEmbeddingLossArgs, x1, x2, target,
                  cosine_embedding_loss(x1, x2, target, args.margin, args.reduction))
/// max(0, margin + d(anchor, positive) - d(anchor, negative)) (kiln::triplet_margin_loss).
KILN_TERNARY_LOSS(TripletMarginLoss, TripletMarginArgs, anchor, positive, negative,
                  triplet_margin_loss(anchor, positive, negative, args))
/// Gaussian negative log-likelihood of target under mean input and variance var.
KILN_TERNARY_LOSS(GaussianNLLLoss, GaussianNllArgs, input, target, var, gaussian_nll_loss(input, target, var, args))
#undef KILN_TERNARY_LOSS

/// Connectionist temporal classification loss (kiln::ctc_loss):
///   nn::CTCLoss ctc({.blank = 0}); Tensor l = ctc(log_probs, targets, input_lengths, target_lengths);
class CTCLoss : public Module {
 public:
  explicit CTCLoss(CtcLossArgs args = {}) : args(args) {}
  using Module::forward;
  using Module::operator();
  Tensor forward(const Tensor& log_probs, const Tensor& targets, const Tensor& input_lengths,
                 const Tensor& target_lengths) const {
    return ctc_loss(log_probs, targets, input_lengths, target_lengths, args);
  }
  Tensor operator()(const Tensor& log_probs, const Tensor& targets, const Tensor& input_lengths,
                    const Tensor& target_lengths) const {
    return forward(log_probs, targets, input_lengths, target_lengths);
  }
  CtcLossArgs args;
};

}  // namespace kiln::nn
