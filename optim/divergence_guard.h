// DivergenceGuard: skips optimizer steps whose loss or gradient norm is not finite, counts
// them, and stops a run (kiln::Error) after too many in a row, so a diverging run neither
// trains on NaN nor goes on silently. GradScaler's own skips (fp16) are counted too.
#pragma once
#include <cstdint>
#include <string>
#include <vector>
#include "kiln/core/tensor.h"
#include "kiln/optim/optimizer.h"

namespace kiln::optim {

struct DivergenceGuardOptions {
  /// Consecutive skipped steps after which check()/record() throw. fp16 loss scaling skips
  /// a few steps at the start while its scale comes down (about one per halving from
  /// 2^16), so the default leaves room for that.
  int64_t max_consecutive_skips = 25;
};

/// Usage, once per optimizer step, after backward:
///   if (guard.check(loss.item(), model.parameters())) opt.step();   // else the step is skipped
///   opt.zero_grad();
/// On a GPU without waiting for it (the decision stays on the device, counted when read):
///   Tensor bad = guard.check_on_device(loss, opt); opt.step_unless(bad); ... later:
///   guard.record(bad.item() != 0, "...");
/// With a GradScaler, let the scaler decide and report what it did:
///   scaler.step(opt); scaler.update(); guard.record(scaler.last_step_skipped(), "inf/NaN gradients (GradScaler)");
class DivergenceGuard {
 public:
  explicit DivergenceGuard(DivergenceGuardOptions options = {});

  /// True when `loss` and every gradient of `params` are finite (so is their norm): take
  /// the step. False: skip it (counted). Throws kiln::Error once max_consecutive_skips
  /// steps in a row were skipped.
  bool check(double loss, const std::vector<Tensor>& params);
  /// check() over the gradients of opt's parameters; when they are only this rank's
  /// (dist::ZeroRedundancyOptimizer), the ranks agree (any inf/NaN skips the step on all).
  /// `loss` must already be the same on every rank (e.g. the mean over ranks).
  bool check(double loss, const Optimizer& opt);
  /// The device form of check(opt), with no host synchronisation: returns a one-element
  /// float32 flag on the gradients' GPU, non-zero when `loss` (a tensor on that GPU) or a
  /// gradient is not finite, for opt.step_unless(flag). Nothing is counted here: read the
  /// flag later and pass it to record() (kiln train does every --log-every steps).
  /// Needs contiguous float32/float64 gradients on one CUDA device.
  Tensor check_on_device(const Tensor& loss, const Optimizer& opt);
  /// Records a step the caller took (skipped = false) or skipped, with the reason.
  void record(bool skipped, const std::string& reason = "");

  int64_t skipped() const { return skipped_; }             ///< skipped steps in all
  int64_t consecutive() const { return consecutive_; }     ///< skipped steps since the last good one
  const std::string& last_reason() const { return last_reason_; }
  /// Restores the total count (e.g. from a checkpoint); the run of consecutive skips restarts.
  void set_skipped(int64_t n) { skipped_ = n; }

 private:
  bool check(double loss, const std::vector<Tensor>& params, const Optimizer* agree);
  DivergenceGuardOptions o_;
  int64_t skipped_ = 0, consecutive_ = 0;
  std::string last_reason_;
};

}  // namespace kiln::optim
