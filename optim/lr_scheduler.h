// Learning-rate schedulers, PyTorch's (torch.optim.lr_scheduler) with their rules: StepLR,
// MultiStepLR, ExponentialLR, MultiplicativeLR, ConstantLR, LinearLR, PolynomialLR and
// CosineAnnealingLR are chainable (each step scales the optimizer's current lr, so a hand-set
// lr carries on and two of them compose); WarmupCosineLR (kiln's linear warm-up then cosine),
// OneCycleLR, CyclicLR, CosineAnnealingWarmRestarts and LambdaLR compute the lr from the
// base lr (with several on one optimizer, the last one stepped wins). SequentialLR switches
// between schedulers at milestones, ChainedScheduler steps several at once, and
// ReduceLROnPlateau lowers the lr when a metric stops improving. Each scheduler sets the
// optimizer's per-group lr on construction (epoch 0) and on every step().
#pragma once
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>
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
  virtual void step();
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
  /// Must be called at the end of a derived constructor, after its checks: records the
  /// groups' initial_lr where no scheduler has yet and sets epoch 0's lrs.
  void initial_step();
  /// The lr of `group` at step `epoch`: closed form from base_lrs_, or (the chainable
  /// schedulers) from the optimizer's current lr. Epoch 0 is the constructor's step.
  virtual double lr_at(size_t group, int64_t epoch) const = 0;
  /// The lr of `group` when SequentialLR starts this scheduler at its milestone (PyTorch's
  /// _update_lr(0)): the closed form at epoch 0 where the scheduler has one (the chainable
  /// ones: from the base lr), else lr_at(group, 0).
  virtual double restart_lr(size_t group) const { return lr_at(group, 0); }
  /// Sets epoch 0 again with restart_lr (SequentialLR at a milestone).
  void restart();
  friend class CompositeScheduler;
  friend class SequentialLR;
  /// Hook for schedulers that also set other hyperparameters (OneCycle's momentum).
  virtual void apply_extra(int64_t /*epoch*/) {}
  /// Settings saved in the state dict (restored by set_settings()).
  virtual std::map<std::string, double> settings() const { return {}; }
  virtual void set_settings(const std::map<std::string, double>& /*s*/) {}

  Optimizer& opt_;
  const char* name_;
  std::vector<double> base_lrs_;
  std::vector<double> last_lr_;
  std::vector<double> attach_lrs_;  // the groups' lrs when this scheduler was made
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
  double restart_lr(size_t group) const override;
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


/// lr = lr * f(epoch) each step (torch's MultiplicativeLR, chainable); f is not saved.
class MultiplicativeLR : public LRScheduler {
 public:
  MultiplicativeLR(Optimizer& opt, std::function<double(int64_t)> f);

 protected:
  double lr_at(size_t group, int64_t epoch) const override;
  double restart_lr(size_t group) const override;

 private:
  std::function<double(int64_t)> f_;
};

struct MultiStepLROptions {
  std::vector<int64_t> milestones = {};  ///< steps (>= 0) at which lr *= gamma; a repeated one applies twice
  double gamma = 0.1;
};
/// lr times gamma at each milestone (torch's MultiStepLR, chainable): alone,
/// base_lr * gamma^(number of milestones <= epoch).
class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(Optimizer& opt, MultiStepLROptions options);

 protected:
  double lr_at(size_t group, int64_t epoch) const override;
  double restart_lr(size_t group) const override;
  std::map<std::string, double> settings() const override;
  void set_settings(const std::map<std::string, double>& s) override;
  void check_options() const;

 private:
  MultiStepLROptions o_;
};

struct ExponentialLROptions {
  double gamma = 0.1;
};
/// lr times gamma every step (torch's ExponentialLR, chainable): base_lr * gamma^epoch.
class ExponentialLR : public LRScheduler {
 public:
  ExponentialLR(Optimizer& opt, ExponentialLROptions options);

 protected:
  double lr_at(size_t group, int64_t epoch) const override;
  double restart_lr(size_t group) const override;
  std::map<std::string, double> settings() const override;
  void set_settings(const std::map<std::string, double>& s) override;
  void check_options() const;

 private:
  ExponentialLROptions o_;
};

struct ConstantLROptions {
  double factor = 1.0 / 3;  ///< in (0, 1]
  int64_t total_iters = 5;
};
/// base_lr * factor for the first total_iters steps, then base_lr (torch's ConstantLR,
/// chainable). factor 0 is refused: PyTorch divides by it at total_iters.
class ConstantLR : public LRScheduler {
 public:
  ConstantLR(Optimizer& opt, ConstantLROptions options = {});

 protected:
  double lr_at(size_t group, int64_t epoch) const override;
  double restart_lr(size_t group) const override;
  std::map<std::string, double> settings() const override;
  void set_settings(const std::map<std::string, double>& s) override;
  void check_options() const;

 private:
  ConstantLROptions o_;
};

struct LinearLROptions {
  double start_factor = 1.0 / 3;  ///< in (0, 1]
  double end_factor = 1.0;        ///< in [0, 1]
  int64_t total_iters = 5;        ///< > 0
};
/// The factor of base_lr moves linearly from start_factor to end_factor over total_iters
/// steps, then stays (torch's LinearLR, chainable: the usual warm-up).
class LinearLR : public LRScheduler {
 public:
  LinearLR(Optimizer& opt, LinearLROptions options = {});

 protected:
  double lr_at(size_t group, int64_t epoch) const override;
  double restart_lr(size_t group) const override;
  std::map<std::string, double> settings() const override;
  void set_settings(const std::map<std::string, double>& s) override;
  void check_options() const;

 private:
  LinearLROptions o_;
};

struct PolynomialLROptions {
  int64_t total_iters = 5;  ///< > 0
  double power = 1.0;       ///< >= 0
};
/// base_lr * (1 - min(epoch, total_iters) / total_iters)^power (torch's PolynomialLR,
/// chainable): 0 from total_iters on.
class PolynomialLR : public LRScheduler {
 public:
  PolynomialLR(Optimizer& opt, PolynomialLROptions options = {});

 protected:
  double lr_at(size_t group, int64_t epoch) const override;
  double restart_lr(size_t group) const override;
  std::map<std::string, double> settings() const override;
  void set_settings(const std::map<std::string, double>& s) override;
  void check_options() const;

 private:
  PolynomialLROptions o_;
};

struct CosineAnnealingLROptions {
  int64_t T_max = 1;    ///< half period in steps (> 0)
  double eta_min = 0.0;
};
/// torch's CosineAnnealingLR in its chainable (recursive) form, which alone gives
/// eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2 and, past T_max, rises
/// again (a period of 2 T_max).
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& opt, CosineAnnealingLROptions options);

 protected:
  double lr_at(size_t group, int64_t epoch) const override;
  double restart_lr(size_t group) const override;
  std::map<std::string, double> settings() const override;
  void set_settings(const std::map<std::string, double>& s) override;
  void check_options() const;

 private:
  CosineAnnealingLROptions o_;
};

struct CosineAnnealingWarmRestartsOptions {
  int64_t T_0 = 1;      ///< steps until the first restart (> 0)
  int64_t T_mult = 1;   ///< each period is T_mult times the last (>= 1)
  double eta_min = 0.0;
};
/// SGDR (torch's CosineAnnealingWarmRestarts): eta_min + (base_lr - eta_min) *
/// (1 + cos(pi * T_cur / T_i)) / 2, T_cur counting steps since the last restart and T_i the
/// current period (T_0, T_0 * T_mult, ...).
class CosineAnnealingWarmRestarts : public LRScheduler {
 public:
  CosineAnnealingWarmRestarts(Optimizer& opt, CosineAnnealingWarmRestartsOptions options);
  /// T_cur and T_i at the last step.
  std::pair<int64_t, int64_t> period_position() const { return position(last_epoch_); }

 protected:
  double lr_at(size_t group, int64_t epoch) const override;
  std::map<std::string, double> settings() const override;
  void set_settings(const std::map<std::string, double>& s) override;
  void check_options() const;

 private:
  std::pair<int64_t, int64_t> position(int64_t epoch) const;
  CosineAnnealingWarmRestartsOptions o_;
};

enum class CyclicMode { triangular, triangular2, exp_range };
enum class CyclicScaleMode { cycle, iterations };

struct CyclicLROptions {
  double base_lr = 1e-3;       ///< lower bound of the cycle (every group; also its start)
  double max_lr = 6e-3;        ///< upper bound (every group)
  int64_t step_size_up = 2000;
  int64_t step_size_down = 0;  ///< 0: step_size_up
  CyclicMode mode = CyclicMode::triangular;
  double gamma = 1.0;          ///< exp_range: amplitude * gamma^step
  /// Replaces the mode's amplitude scale: f(cycle number) or f(step) by scale_mode.
  std::function<double(double)> scale_fn = {};
  CyclicScaleMode scale_mode = CyclicScaleMode::cycle;
  bool cycle_momentum = true;  ///< momentum (Adam-like: beta1) moves against the lr
  double base_momentum = 0.8;
  double max_momentum = 0.9;
};
/// torch's CyclicLR: the lr goes from base_lr to max_lr in step_size_up steps and back in
/// step_size_down, the amplitude scaled by 1 (triangular), 1/2^(cycle-1) (triangular2),
/// gamma^step (exp_range) or scale_fn; it sets the groups' lr to base_lr on construction.
/// A custom scale_fn is not saved by state_dict().
class CyclicLR : public LRScheduler {
 public:
  CyclicLR(Optimizer& opt, CyclicLROptions options);
  /// Momentum (or beta1) set last, per group (empty without cycle_momentum).
  std::vector<double> get_last_momentum() const;

 protected:
  double lr_at(size_t group, int64_t epoch) const override;
  void apply_extra(int64_t epoch) override;
  std::map<std::string, double> settings() const override;
  void set_settings(const std::map<std::string, double>& s) override;
  void check_options() const;

 private:
  static Optimizer& start_at_base(Optimizer& opt, const CyclicLROptions& o);
  /// {scale factor within the cycle, amplitude scale} at a step.
  std::pair<double, double> shape_at(int64_t epoch) const;
  double amplitude(double x) const;
  CyclicLROptions o_;
};

/// What SequentialLR and ChainedScheduler share: the schedulers they drive (this optimizer's,
/// outliving the composite) and a state dict that carries theirs under "schedulers.<i>.".
class CompositeScheduler : public LRScheduler {
 public:
  StateDict state_dict() const override;
  /// Loads every scheduler's state and the composite's own, or none of them.
  void load_state_dict(const StateDict& sd) override;

 protected:
  CompositeScheduler(Optimizer& opt, const char* name, const std::vector<std::reference_wrapper<LRScheduler>>& schedulers);
  double lr_at(size_t group, int64_t epoch) const override;
  std::vector<std::reference_wrapper<LRScheduler>> scheds_;
};

/// Runs one scheduler until the first milestone, the next until the second, and so on
/// (torch's SequentialLR). At a milestone the next scheduler starts again from epoch 0
/// (closed form from the base lr). SequentialLR, ChainedScheduler and ReduceLROnPlateau
/// cannot be among the schedulers.
///   optim::LinearLR warm(opt, {.start_factor = 0.1, .total_iters = 5});
///   optim::CosineAnnealingLR cos(opt, {.T_max = 95});
///   optim::SequentialLR sched(opt, {warm, cos}, {5});
class SequentialLR : public CompositeScheduler {
 public:
  SequentialLR(Optimizer& opt, std::vector<std::reference_wrapper<LRScheduler>> schedulers,
               std::vector<int64_t> milestones);
  void step() override;

 protected:
  std::map<std::string, double> settings() const override;
  void set_settings(const std::map<std::string, double>& s) override;

 private:
  std::vector<int64_t> milestones_;
};

/// Steps every scheduler, in order, at each step() (torch's ChainedScheduler): chainable
/// schedulers multiply their factors. It sets no lr on construction. The schedulers share one
/// optimizer; ReduceLROnPlateau cannot be among them.
class ChainedScheduler : public CompositeScheduler {
 public:
  explicit ChainedScheduler(std::vector<std::reference_wrapper<LRScheduler>> schedulers);
  void step() override;

 private:
  static Optimizer& optimizer_of(const std::vector<std::reference_wrapper<LRScheduler>>& s);
};

enum class PlateauMode { min, max };
enum class ThresholdMode { rel, abs };

struct ReduceLROnPlateauOptions {
  PlateauMode mode = PlateauMode::min;  ///< min: a lower metric is better (a loss); max: higher
  double factor = 0.1;                  ///< new lr = lr * factor, in [0, 1)
  int64_t patience = 10;                ///< steps without improvement tolerated
  double threshold = 1e-4;              ///< what counts as an improvement (see threshold_mode)
  ThresholdMode threshold_mode = ThresholdMode::rel;  ///< rel: best * (1 -+ threshold); abs: best -+ threshold
  int64_t cooldown = 0;                 ///< steps after a reduction before counting again
  double min_lr = 0.0;                  ///< every group's floor ...
  std::vector<double> min_lrs = {};     ///< ... or one per group
  double eps = 1e-8;                    ///< a reduction smaller than eps is not applied
};
/// torch's ReduceLROnPlateau: step(metric) once per evaluation; after more than `patience`
/// steps without an improvement of the best metric, every group's lr becomes
/// max(lr * factor, min_lr). A NaN metric is never an improvement. step() without a metric
/// is an error.
///   optim::ReduceLROnPlateau plateau(opt, {.patience = 2});
///   for (...) { train_one_epoch(); plateau.step(validation_loss); }
class ReduceLROnPlateau : public LRScheduler {
 public:
  ReduceLROnPlateau(Optimizer& opt, ReduceLROnPlateauOptions options = {});
  void step(double metric);
  /// Throws kiln::Error: ReduceLROnPlateau needs the metric.
  void step() override;
  double best() const { return best_; }
  int64_t num_bad_epochs() const { return num_bad_; }
  bool in_cooldown() const { return cooldown_counter_ > 0; }
  /// The base keys, the options, "best" (may be infinite) and the counters.
  StateDict state_dict() const override;
  void load_state_dict(const StateDict& sd) override;

 protected:
  double lr_at(size_t group, int64_t epoch) const override;
  std::map<std::string, double> settings() const override;
  void set_settings(const std::map<std::string, double>& s) override;
  void check_options() const;

 private:
  bool is_better(double a) const;
  ReduceLROnPlateauOptions o_;
  double best_;
  int64_t num_bad_ = 0;
  int64_t cooldown_counter_ = 0;
};

}  // namespace kiln::optim
