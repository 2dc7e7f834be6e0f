// Training helpers: gradient accumulation (several micro-batches, one optimizer step).
//
// With a mean-reduced loss and k equal micro-batches, backward on loss_i / k for each
// micro-batch sums to the gradient of the mean loss over the whole k*b batch, so k steps
// of batch b with accumulation match one step of batch k*b (up to rounding). Gradients
// accumulate in .grad across backward() calls; zero them after each optimizer step.
//
//   nn::GradAccumulator acc(4);                 // effective batch = 4 micro-batches
//   for (auto& batch : loader) {
//     Tensor loss = kiln::cross_entropy(model(batch.input), batch.target);
//     if (acc.backward(loss)) {                 // (loss / 4).backward(); true every 4th call
//       opt.step();
//       opt.zero_grad();
//     }
//   }
//
// Or, when the micro-batches of one step are at hand:
//   double loss = nn::accumulate_gradients(4, [&](int i) { return loss_fn(model(x[i]), y[i]); });
//   opt.step(); opt.zero_grad();
#pragma once
#include "kiln/core/autograd.h"
#include "kiln/core/error.h"
#include "kiln/core/tensor.h"
#include "kiln/ops/elementwise.h"

namespace kiln::nn {

/// Counts micro-batches, scales their losses by 1/accum_steps and says when to step.
class GradAccumulator {
 public:
  explicit GradAccumulator(int accum_steps) : accum_steps_(accum_steps) {
    KILN_CHECK(accum_steps >= 1, "GradAccumulator: accum_steps must be >= 1, got ", accum_steps);
  }
  /// loss / accum_steps (call backward on this yourself, then count()).
  Tensor scale(const Tensor& loss) const { return accum_steps_ == 1 ? loss : loss / double(accum_steps_); }
  /// scale(loss).backward() and count(): returns true when this micro-batch completes a
  /// group of accum_steps, i.e. when to call the optimizer's step() and zero_grad().
  bool backward(const Tensor& loss) {
    scale(loss).backward();
    return count();
  }
  /// Counts one micro-batch; true when it completes a group (then the count restarts).
  bool count() {
    if (++micro_step_ < accum_steps_) return false;
    micro_step_ = 0;
    return true;
  }
  /// Micro-batches counted in the current (incomplete) group.
  int micro_step() const { return micro_step_; }
  int accum_steps() const { return accum_steps_; }
  /// Forgets a partial group (e.g. at the end of an epoch after stepping on it).
  void reset() { micro_step_ = 0; }

 private:
  int accum_steps_;
  int micro_step_ = 0;
};

/// Runs `micro_batch_fn(i)` for i = 0 .. accum_steps-1; each returns a scalar loss, on
/// which backward is called after scaling by 1/accum_steps. Returns the mean of the
/// losses (as double). The caller steps the optimizer and zeroes the gradients.
template <class F>
double accumulate_gradients(int accum_steps, F&& micro_batch_fn) {
  KILN_CHECK(accum_steps >= 1, "accumulate_gradients: accum_steps must be >= 1, got ", accum_steps);
  GradAccumulator acc(accum_steps);
  double total = 0.0;
  for (int i = 0; i < accum_steps; ++i) {
    Tensor loss = micro_batch_fn(i);
    KILN_CHECK(loss.defined() && loss.numel() == 1, "accumulate_gradients: micro_batch_fn(", i,
               ") must return a one-element loss, got ", loss.defined() ? shape_str(loss.shape()) : "undefined");
    total += loss.item();
    acc.backward(loss);
  }
  return total / accum_steps;
}

}  // namespace kiln::nn
