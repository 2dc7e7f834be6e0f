// Losses: cross_entropy (from logits, stable), nll_loss, mse_loss (own kernels), the
// pointwise losses l1, smooth_l1, huber, binary_cross_entropy (with logits) and kl_div, and
// the margin and likelihood losses (margin ranking, hinge embedding, soft margin, multilabel
// soft margin, cosine embedding, triplet margin, multi margin, Poisson NLL, Gaussian NLL):
// compositions of elementwise ops with PyTorch's formulas.
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


// Margin and likelihood losses (PyTorch's, in recorded ops: every input differentiable,
// targets too where PyTorch's are; 16-bit inputs computed in float32, and float32 under
// autocast). Targets may be floating or integer tensors (converted); reductions none, mean
// (over the elements of the per-element or per-sample loss) and sum.

/// max(0, -target * (x1 - x2) + margin), target 1 where x1 should rank higher and -1 where
/// lower (torch.nn.functional.margin_ranking_loss); the three broadcast, with one number of dims.
Tensor margin_ranking_loss(const Tensor& x1, const Tensor& x2, const Tensor& target, double margin = 0.0,
                           Reduction reduction = Reduction::mean);
/// x where target is 1, max(0, margin - x) where it is -1 (both terms for another value, as
/// PyTorch's): for distances x of similar (1) and dissimilar (-1) pairs; target broadcasts.
Tensor hinge_embedding_loss(const Tensor& input, const Tensor& target, double margin = 1.0,
                            Reduction reduction = Reduction::mean);
/// log(1 + exp(-target * input)), target 1 or -1, same shapes (two-class logistic loss).
Tensor soft_margin_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);
struct MultilabelSoftMarginArgs {
  Tensor weight = {};  ///< per class (C), broadcast
  Reduction reduction = Reduction::mean;
};
/// Per sample, the mean over the C classes of -(t log sigmoid(x) + (1 - t) log sigmoid(-x)),
/// input and 0/1 target (N, C) or (C): multi-label classification.
Tensor multilabel_soft_margin_loss(const Tensor& input, const Tensor& target, const MultilabelSoftMarginArgs& args = {});
/// 1 - cos(x1, x2) where target is 1, max(0, cos(x1, x2) - margin) where it is -1; inputs
/// (N, D) with target (N), or (D) with a 0-dim target; cos with PyTorch's float 1e-12 in each
/// squared norm.
Tensor cosine_embedding_loss(const Tensor& x1, const Tensor& x2, const Tensor& target, double margin = 0.0,
                             Reduction reduction = Reduction::mean);
struct TripletMarginArgs {
  double margin = 1.0;  ///< > 0
  double p = 2.0;       ///< the norm of pairwise_distance
  double eps = 1e-6;    ///< added to the difference, as pairwise_distance
  bool swap = false;    ///< the negative's distance is the smaller of anchor's and positive's
  Reduction reduction = Reduction::mean;
};
/// max(0, margin + d(anchor, positive) - d(anchor, negative)), d = pairwise_distance over the
/// last dim (torch.nn.functional.triplet_margin_loss).
Tensor triplet_margin_loss(const Tensor& anchor, const Tensor& positive, const Tensor& negative,
                           const TripletMarginArgs& args = {});
struct MultiMarginArgs {
  int p = 1;            ///< 1 or 2
  double margin = 1.0;
  Tensor weight = {};   ///< per class (C): sample i's terms times weight[target_i]
  Reduction reduction = Reduction::mean;
};
/// The multi-class hinge loss: per sample, the sum over classes d != target of
/// max(0, margin - x[target] + x[d])^p, times weight[target], over C; input (N, C) with int64
/// targets (N), or (C) with a 0-dim target; a target outside [0, C) is an error naming it.
Tensor multi_margin_loss(const Tensor& input, const Tensor& target, const MultiMarginArgs& args = {});
struct CtcLossArgs {
  int64_t blank = 0;
  Reduction reduction = Reduction::mean;  ///< mean: each loss divided by its target length, then averaged
  bool zero_infinity = false;             ///< impossible alignments give 0 (and no gradient) instead of inf
};
/// Connectionist temporal classification (PyTorch's ctc_loss): log_probs (T, N, C) (or
/// (T, C)) of log_softmax outputs, targets (N, S) padded or 1-D concatenated, the int64
/// input_lengths and target_lengths (N) (read back). The forward (alpha) recursion in log
/// space, one whole-batch step per time step; -inf is carried as -1e30 so that impossible
/// paths get no gradient, and a sample with no path gets inf. The gradient is PyTorch's:
/// exp(log_probs) - the posterior of each label, which is the true gradient once it goes
/// back through log_softmax (the exp term sums to nothing there) but not for a free
/// log_probs leaf.
Tensor ctc_loss(const Tensor& log_probs, const Tensor& targets, const Tensor& input_lengths,
                const Tensor& target_lengths, const CtcLossArgs& args = {});
/// The multi-label hinge loss (PyTorch's multilabel_margin_loss): target (C) or (N, C) int64
/// holds each sample's classes, ended by the first -1; per sample the sum over its target
/// classes j and the classes i outside its set of max(0, 1 - (x_j - x_i)), divided by C.
/// Reads the target back (its sets decide the pairs).
Tensor multilabel_margin_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);
struct PoissonNllArgs {
  bool log_input = true;  ///< input is log(rate): exp(x) - t x; else x - t log(x + eps)
  bool full = false;      ///< add Stirling's t log t - t + log(2 pi t) / 2 where t > 1
  double eps = 1e-8;
  Reduction reduction = Reduction::mean;
};
/// The negative log-likelihood of counts `target` under a Poisson of rate given by `input`
/// (same shapes), without the constant log(t!) unless full.
Tensor poisson_nll_loss(const Tensor& input, const Tensor& target, const PoissonNllArgs& args = {});
struct GaussianNllArgs {
  bool full = false;  ///< add log(2 pi) / 2
  double eps = 1e-6;  ///< var is clamped to eps in value (not in the gradient, as PyTorch's)
  Reduction reduction = Reduction::mean;
};
/// (log(var) + (input - target)^2 / var) / 2: the negative log-likelihood of target under a
/// Gaussian of mean input and variance var; var has the input's shape, that shape without its
/// last dim (one var per sample) or with one dim of size 1, and no negative entry (checked: a
/// read back from a GPU). A number for var is the same everywhere.
Tensor gaussian_nll_loss(const Tensor& input, const Tensor& target, const Tensor& var, const GaussianNllArgs& args = {});
Tensor gaussian_nll_loss(const Tensor& input, const Tensor& target, double var, const GaussianNllArgs& args = {});
}  // namespace kiln
