// Learning-rate schedulers: StepLR, WarmupCosineLR (linear warmup then cosine decay),
// OneCycleLR (PyTorch's, with optional momentum cycling) and LambdaLR. Each sets the
// optimizer's per-group lr on construction (epoch 0) and on every step(). As in PyTorch,
// StepLR is chainable (it scales the optimizer's current lr, so a hand-set lr carries on and
// two StepLRs compose) while the others compute the lr from the base lr; with several
// schedulers on one optimizer, each step() writes its own value and the last one stepped wins.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>
#include "kiln/optim/optimizer.h"

namespace kiln::optim {

/// Base of the schedulers: keeps the base lr of every group (the group's lr when the first
/// scheduler was attached to the optimizer, Optimizer::initial_lr, as PyTorch's
/// "initial_lr") and the step counter last_epoch (0 after construction, +1 per step()). The scheduler
/// keeps a reference to the optimizer, which must outlive it.
///   optim::StepLR sched(opt, {.step_size = 30, .gamma = 0.1});
///   for (...) { train_one_epoch(); sched.step(); }
class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  /// Advances one step and writes the new lrs into the optimizer.
  void step();
  /// The lrs (one per group) the scheduler set last.
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  int64_t last_epoch() const { return last_epoch_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  Optimizer& optimizer() const { return opt_; }

  /// last_epoch, base_lrs, last_lr and the schedule's settings (0-dim tensors).
  virtual StateDict state_dict() const;
  /// Restores a state_dict() and writes its last lrs (and OneCycle's momentum) into the
  /// optimizer, so restoring before or after the optimizer's own state gives the same lrs.
  virtual void load_state_dict(const StateDict& sd);

 protected:
  LRScheduler(Optimizer& opt, const char* name);
  /// Must be called at the end of a derived constructor: sets epoch 0's lrs.
  void initial_step();
  /// The lr of `group` at step `epoch`: closed form from base_lrs_, or (StepLR) from the
  /// optimizer's current lr.
  virtual double lr_at(size_t group, int64_t epoch) const = 0;
  /// Hook for schedulers that also set other hyperparameters (OneCycle's momentum).
  virtual void apply_extra(int64_t /*epoch*/) {}
  /// Settings saved in the state dict (restored by set_settings()).
  virtual std::map<std::string, double> settings() const { return {}; }
  virtual void set_settings(const std::map<std::string, double>& /*s*/) {}

  Optimizer& opt_;
  const char* name_;
  std::vector<double> base_lrs_;
  std::vector<double> last_lr_;
  int64_t last_epoch_ = -1;
};

struct StepLROptions {
  int64_t step_size = 1;
  double gamma = 0.1;
};
/// lr times gamma every step_size steps (PyTorch's chainable form: the optimizer's current
/// lr is scaled, so alone it gives base_lr * gamma^(floor(epoch / step_size))).
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& opt, StepLROptions options);

 protected:
  double lr_at(size_t group, int64_t epoch) const override;
  std::map<std::string, double> settings() const override;
  void set_settings(const std::map<std::string, double>& s) override;
  /// Throws kiln::Error unless the options are valid (the constructor and a restore).
  void check_options() const;

 private:
  StepLROptions o_;
};

struct WarmupCosineLROptions {
  int64_t warmup_steps = 0;   ///< W
  int64_t total_steps = 1;    ///< T (> W)
  double min_lr = 0.0;        ///< lr at and after step T
  double start_factor = 0.0;  ///< lr at step 0 is start_factor * base_lr
};
/// Linear warmup then cosine decay:
///   epoch < W:       base * (start_factor + (1 - start_factor) * epoch / W)
///   W <= epoch <= T: min_lr + (base - min_lr) * (1 + cos(pi * (epoch - W) / (T - W))) / 2
///   epoch > T:       min_lr
class WarmupCosineLR : public LRScheduler {
 public:
  WarmupCosineLR(Optimizer& opt, WarmupCosineLROptions options);

 protected:
  double lr_at(size_t group, int64_t epoch) const override;
  std::map<std::string, double> settings() const override;
  void set_settings(const std::map<std::string, double>& s) override;
  /// Throws kiln::Error unless the options are valid (the constructor and a restore).
  void check_options() const;

 private:
  WarmupCosineLROptions o_;
};

enum class AnnealStrategy { cos, linear };

struct OneCycleLROptions {
  double max_lr = 0.1;          ///< peak lr (every group)
  int64_t total_steps = 100;    ///< number of step() calls the cycle spans
  double pct_start = 0.3;
  AnnealStrategy anneal_strategy = AnnealStrategy::cos;
  bool cycle_momentum = true;   ///< cycles momentum (Adam: beta1) inversely to the lr
  double base_momentum = 0.85;
  double max_momentum = 0.95;
  double div_factor = 25.0;     ///< initial_lr = max_lr / div_factor
  double final_div_factor = 1e4;  ///< min_lr = initial_lr / final_div_factor
  bool three_phase = false;
};
/// torch.optim.lr_scheduler.OneCycleLR: lr from initial_lr up to max_lr over the first
/// pct_start of the steps, then down to min_lr (three_phase: back to initial_lr, then to
/// min_lr); momentum moves the opposite way between max_momentum and base_momentum.
/// Stepping more than total_steps times throws kiln::Error, and so do options that leave a
/// phase with no steps (pct_start * total_steps == 1; pct_start == 1 without three_phase),
/// where PyTorch raises ZeroDivisionError.
class OneCycleLR : public LRScheduler {
 public:
  OneCycleLR(Optimizer& opt, OneCycleLROptions options);
  /// Momentum (or beta1) set last, per group (empty without cycle_momentum).
  std::vector<double> get_last_momentum() const;

 protected:
  double lr_at(size_t group, int64_t epoch) const override;
  void apply_extra(int64_t epoch) override;
  std::map<std::string, double> settings() const override;
  void set_settings(const std::map<std::string, double>& s) override;
  /// Throws kiln::Error unless the options are valid (the constructor and a restore).
  void check_options() const;

 private:
  struct Phase {
    double end_step;
    int start_lr, end_lr;  // 0 initial, 1 max, 2 min
    int start_m, end_m;    // 0 max_momentum, 1 base_momentum
  };
  void build_phases();
  double anneal(double start, double end, double pct) const;
  double value_at(int64_t epoch, bool momentum) const;
  OneCycleLROptions o_;
  std::vector<Phase> phases_;
};

/// lr = base_lr * f(epoch) (torch's LambdaLR); f is not saved by state_dict().
class LambdaLR : public LRScheduler {
 public:
  LambdaLR(Optimizer& opt, std::function<double(int64_t)> f);

 protected:
  double lr_at(size_t group, int64_t epoch) const override;

 private:
  std::function<double(int64_t)> f_;
};

}  // namespace kiln::optim
