// Optimizer base class: parameter groups, per-parameter state (named buffers + step),
// zero_grad, per-group learning rate, and state_dict()/load_state_dict() as one flat
// ordered map name -> Tensor (scalars are 0-dim tensors), ready for a safetensors writer.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <utility>
#include <map>
#include <optional>
#include <string>
#include <vector>
#include "kiln/core/tensor.h"
#include "kiln/optim/update_kernels.h"

namespace kiln::optim {

/// A flat, ordered name -> Tensor map. Scalars are 0-dim tensors (float64 for
/// hyperparameters, int64 for counters). Optimizer layout (PyTorch's, flattened):
///   "param_groups.<g>.params"    int64 (n_g): global indices of the group's parameters
///   "param_groups.<g>.<hparam>"  float64 0-dim: lr, weight_decay, momentum, beta1, ...
///   "state.<i>.step"             int64 0-dim: updates applied to parameter i
///   "state.<i>.<buffer>"         tensor shaped like parameter i (momentum_buffer, exp_avg, ...)
///   "state.<i>.<number>"         float64 0-dim: a per-parameter number (NAdam's mu_product)
///   "step_count"                 int64 0-dim: number of step() calls
using StateDict = std::map<std::string, Tensor>;
using OptimizerState = StateDict;

/// Parameters with optional per-group overrides of the optimizer's options, as PyTorch's
/// param group dicts: lr and weight_decay by field, any other option by its state_dict name
/// (SGD: momentum, dampening, nesterov; Adam/AdamW: beta1, beta2, eps, amsgrad; RMSprop:
/// alpha, eps, momentum, centered; flags as 0 or 1):
///   optim::SGD opt({{.params = body}, {.params = head, .lr = 0.1, .options = {{"momentum", 0.0}}}},
///                  {.lr = 0.01, .momentum = 0.9});
/// An unknown name, or lr / weight_decay given both ways, is an error naming the group.
struct ParamGroup {
  std::vector<Tensor> params = {};
  std::optional<double> lr = std::nullopt;
  std::optional<double> weight_decay = std::nullopt;
  std::map<std::string, double> options = {};
};

/// Base of every optimizer. Parameters are leaf tensors updated in place under NoGradGuard;
/// a parameter whose grad is undefined is skipped by step(). Not copyable (a GradScaler and
/// schedulers refer to it).
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  /// Applies one update to every parameter that has a gradient. On CUDA, SGD and
  /// Adam/AdamW update each parameter group with one multi-tensor kernel launch.
  virtual void step();
  /// Whether step_unless() can run: every parameter is a contiguous float32/float64 tensor
  /// on one CUDA device and this optimizer has a multi-tensor kernel there (SGD, Adam, AdamW).
  bool can_skip_on_device() const;
  /// step(), but the kernels skip the whole update on the device when the one-element
  /// float32 tensor found_inf (on the parameters' device) is non-zero: no host
  /// synchronisation (GradScaler's device path). A skipped step leaves the parameters and
  /// buffers untouched and is taken out of the step counts that state_dict() reports (what
  /// the CPU path, which does not call step() at all, would report); step_count() still
  /// counts the call (it is a host value). Requires can_skip_on_device().
  void step_unless(const Tensor& found_inf);
  /// PyTorch's `maximize`: the group's updates ascend the objective (each step reads the
  /// negated gradient; p.grad() itself is left alone). Set through the options' `maximize`
  /// field or a ParamGroup's options["maximize"]; saved in state_dict() as
  /// param_groups.<g>.maximize when on.
  virtual bool maximize(size_t group) const {
    (void)group;
    return false;
  }
  /// Clears gradients: undefined (set_to_none, the default, like PyTorch) or zero-filled.
  void zero_grad(bool set_to_none = true);
  /// Adds a parameter group (PyTorch's add_param_group: layers unfrozen later in a
  /// fine-tuning run), with the optimizer's default options and the group's overrides; its
  /// parameters get their state at their first update. They must not be in another group.
  /// A scheduler made before this call leaves the new group's lr alone (as PyTorch's, which
  /// keep a base lr per group they were made with).
  virtual void add_param_group(const ParamGroup& group) = 0;

  /// "SGD", "Adam", ...
  const std::string& name() const { return name_; }
  size_t num_groups() const { return groups_.size(); }
  /// The parameters of one group.
  const std::vector<Tensor>& params(size_t group) const;
  /// All parameters, group by group (the order of the state_dict indices).
  std::vector<Tensor> all_params() const;

  /// Learning rate of a group.
  virtual double lr(size_t group = 0) const = 0;
  /// Sets the learning rate of one group.
  virtual void set_lr(size_t group, double lr) = 0;
  /// Sets the learning rate of every group.
  void set_lr(double lr);
  /// The lr a group had when the first scheduler was attached (PyTorch's
  /// group["initial_lr"]): every later scheduler takes it as its base lr too, so a second
  /// scheduler does not start from the first one's already scaled lr. Set by LRScheduler.
  std::optional<double> initial_lr(size_t group) const;
  void set_initial_lr(size_t group, double lr);

  /// Whether the optimizer has a momentum-like hyperparameter (SGD/RMSprop momentum,
  /// Adam beta1) that OneCycleLR can cycle.
  virtual bool supports_momentum() const { return false; }
  virtual double momentum(size_t group) const;
  virtual void set_momentum(size_t group, double m);

  /// Makes a GradScaler's inf/NaN finding agree across processes (true when any rank found
  /// one). An optimizer that sees only this rank's gradients (dist::ZeroRedundancyOptimizer)
  /// takes the max over ranks; the others see gradients already averaged (by DDP) or are
  /// alone, and return `found`.
  virtual bool agree_found_inf(bool found) const { return found; }
  /// The same for a one-element float32 device flag, in place.
  virtual void agree_found_inf(Tensor& flag) const { (void)flag; }

  /// Number of step() calls so far.
  int64_t step_count() const { return step_count_; }
  /// Names of the per-parameter numbers this optimizer may keep beside "step" (NAdam's
  /// "mu_product"), saved as float64 0-dim tensors; a wrapper (ZeRO-1) copies them per
  /// parameter instead of sharding them.
  virtual std::vector<std::string> scalar_names() const { return {}; }
  /// Whether `name` is one of scalar_names().
  bool is_scalar_state(const std::string& name) const;

  /// Snapshot (copies) of the hyperparameters and per-parameter state.
  virtual StateDict state_dict() const;
  /// Restores a state_dict() of an optimizer of the same kind over the same parameter
  /// layout; state tensors are copied to each parameter's device and dtype. Throws
  /// kiln::Error (changing nothing) on unknown keys, wrong group layout or shapes.
  virtual void load_state_dict(const StateDict& sd);

 protected:
  /// Per-parameter state: number of updates applied, named buffers (shaped like the
  /// parameter) and named numbers (NAdam's mu_product).
  struct ParamState {
    int64_t step = 0;
    std::map<std::string, Tensor> buffers;
    std::map<std::string, double> scalars;
  };

  Optimizer(std::string name, const std::vector<ParamGroup>& groups);
  /// Checks one more group's parameters as the constructor does (leaf, floating, in no
  /// other group) and appends it with empty state; pop_group() takes the last one back.
  void append_group(const std::vector<Tensor>& params);
  void pop_group();

  /// Updates one parameter p with its gradient g (same device, converted to p's dtype)
  /// under NoGradGuard. Called by step() for each parameter with a defined grad.
  virtual void update(size_t group, Tensor p, const Tensor& g, ParamState& st) = 0;
  /// Steps the parameters idx of a group (grads: theirs, same device and dtype) with one
  /// multi-tensor kernel launch per dtype; returns false (doing nothing) when the group
  /// cannot take that path, and step() then calls update() per parameter. found_inf: see
  /// step_unless() (null for a plain step()).
  virtual bool step_group_multi(size_t group, const std::vector<size_t>& idx, const std::vector<Tensor>& grads,
                                const float* found_inf);
  /// The multi-tensor kernel kind of this optimizer (kCount: none).
  virtual FusedUpdate multi_tensor_kind() const { return FusedUpdate::kCount; }
  /// The registered multi-tensor kernel of this optimizer for the parameters idx of a group,
  /// or nullptr unless they are contiguous float32/float64 tensors on one CUDA device.
  void* multi_kernel_for(size_t group, const std::vector<size_t>& idx) const;
  /// Device counter of skipped steps of parameter i of a group (created, zeroed, when
  /// `create`), or nullptr when none exists.
  float* skip_counter(size_t group, size_t i, bool create);
  /// The common part of step_group_multi: per dtype (float32, then float64), one slot per
  /// parameter of idx with p, its contiguous gradient, n, the counted step and the skip
  /// counter; fill(p, state, slot) adds the optimizer's buffers; then launch(dtype, slots).
  template <class Fill, class Launch>
  void launch_group_slots(size_t group, const std::vector<size_t>& idx, const std::vector<Tensor>& grads,
                          const float* found_inf, Fill&& fill, Launch&& launch) {
    std::vector<Tensor> keep;  // contiguous gradients, alive until the launches are queued
    for (DType dt : {DType::float32, DType::float64}) {
      std::vector<TensorSlot> slots;
      for (size_t k = 0; k < idx.size(); ++k) {
        Tensor& p = groups_[group][idx[k]];
        if (p.dtype() != dt) continue;
        ParamState& st = state_[group][idx[k]];
        TensorSlot sl;
        fill(p, st, sl);
        ++st.step;
        keep.push_back(grads[k].contiguous());
        sl.p = p.raw_data();
        sl.g = keep.back().raw_data();
        sl.n = p.numel();
        sl.step = st.step;
        sl.skipped = skip_counter(group, idx[k], found_inf != nullptr);
        slots.push_back(sl);
      }
      if (!slots.empty()) launch(dt, slots);
    }
  }

  /// Sets a group's maximize flag (an optimizer without one refuses true).
  virtual void set_maximize(size_t group, bool on);
  /// Hyperparameters of a group by name (for state_dict) and their restore (maximize is
  /// handled by the base class).
  virtual std::map<std::string, double> group_hparams(size_t group) const = 0;
  virtual void set_group_hparams(size_t group, const std::map<std::string, double>& h) = 0;
  /// Names of the per-parameter buffers this optimizer may keep.
  virtual std::vector<std::string> buffer_names() const = 0;
  /// The shape of a state buffer of parameter p: p's own unless the optimizer keeps a
  /// smaller statistic (Adafactor's factored row and column variances).
  virtual Shape buffer_shape(const std::string& /*name*/, const Tensor& p) const { return p.shape(); }

  /// Throws kiln::Error when a group's options are invalid (called by constructors and step()).
  virtual void check_options(size_t group) const = 0;

  /// Applies a group's `options` overrides (ParamGroup) through group_hparams /
  /// set_group_hparams; throws kiln::Error, changing nothing, on an unknown name.
  void apply_group_overrides(size_t group, const ParamGroup& g);
  /// Assigns h[name] to each listed field; throws on unknown or missing names.
  void assign_hparams(size_t group, const std::map<std::string, double>& h,
                      const std::vector<std::pair<const char*, double*>>& fields) const;
  /// True when the fused kernel can run on p and its state buffers: p is contiguous with a
  /// float32/float64 dtype and every (non-null) buffer is contiguous with p's dtype and device.
  static bool fused_ok(const Tensor& p, std::initializer_list<const Tensor*> buffers);

  /// st.buffers[name], created as zeros_like(p) when missing (sets *created if given).
  Tensor& buffer(ParamState& st, const std::string& name, const Tensor& p, bool* created = nullptr);

  std::string name_;
  std::vector<std::vector<Tensor>> groups_;
  std::vector<std::vector<ParamState>> state_;
  int64_t step_count_ = 0;

 private:
  void step_impl(const Tensor* found_inf);
  /// Per group: float32 device counters of skipped steps per parameter (undefined until
  /// step_unless() runs); skipped_steps_: the same for step_count_.
  std::vector<Tensor> skipped_;
  std::vector<std::optional<double>> initial_lrs_;  // per group, see initial_lr()
  Tensor skipped_steps_;
};

/// Resolves a group's options from the defaults and the group's overrides.
template <class Options>
Options resolve_group_options(const Options& defaults, const ParamGroup& g) {
  Options o = defaults;
  if (g.lr) o.lr = *g.lr;
  if constexpr (requires { o.weight_decay; }) {
    if (g.weight_decay) o.weight_decay = *g.weight_decay;
  } else {
    KILN_CHECK(!g.weight_decay, "a parameter group sets weight_decay, which this optimizer does not have");
  }
  return o;
}

/// One group holding all params.
inline std::vector<ParamGroup> single_group(const std::vector<Tensor>& params) {
  return {ParamGroup{.params = params}};
}

/// What every concrete optimizer shares: one Options per parameter group (the defaults
/// with the group's overrides), checked at construction, and the options / lr accessors.
/// Subclasses implement the update and the hparam mapping.
template <class Opts>
class OptimizerWith : public Optimizer {
 public:
  /// The (resolved) options of a group; changes take effect at the next step.
  Opts& options(size_t group = 0) { return opts_.at(group); }
  const Opts& options(size_t group = 0) const { return opts_.at(group); }
  double lr(size_t group = 0) const override { return opts_.at(group).lr; }
  void set_lr(size_t group, double lr) override { opts_.at(group).lr = lr; }
  using Optimizer::set_lr;
  bool maximize(size_t group) const override {
    if constexpr (requires { opts_.at(group).maximize; }) return opts_.at(group).maximize;
    else return false;
  }

 protected:
  OptimizerWith(std::string name, const std::vector<ParamGroup>& groups, const Opts& defaults)
      : Optimizer(std::move(name), groups), defaults_(defaults), groups_given_(groups) {
    for (const auto& g : groups) opts_.push_back(resolve_group_options(defaults, g));
  }

 public:
  void add_param_group(const ParamGroup& group) override {
    append_group(group.params);
    opts_.push_back(resolve_group_options(defaults_, group));
    try {
      apply_group_overrides(opts_.size() - 1, group);
      check_options(opts_.size() - 1);
    } catch (...) {  // an invalid override: the optimizer stays as it was
      opts_.pop_back();
      pop_group();
      throw;
    }
  }

 protected:
  void set_maximize(size_t group, bool on) override {
    if constexpr (requires { opts_.at(group).maximize; }) opts_.at(group).maximize = on;
    else Optimizer::set_maximize(group, on);
  }
  /// Applies each group's named overrides and runs check_options on every group (call at
  /// the end of the subclass constructor: a virtual call from this constructor would not
  /// reach the subclass's hparam mapping).
  void check_all_options() {
    for (size_t g = 0; g < opts_.size(); ++g) {
      apply_group_overrides(g, groups_given_[g]);
      check_options(g);
    }
    groups_given_.clear();
  }
  Opts defaults_;  // the constructor's options, for groups added later
  std::vector<Opts> opts_;

 private:
  std::vector<ParamGroup> groups_given_;  // until check_all_options() applies their overrides
};

/// An OptimizerWith whose momentum is beta1 (Adam and its relatives): what OneCycleLR and
/// CyclicLR cycle.
template <class Opts>
class OptimizerWithBetas : public OptimizerWith<Opts> {
 public:
  bool supports_momentum() const override { return true; }
  double momentum(size_t group) const override { return this->opts_.at(group).betas.first; }
  void set_momentum(size_t group, double m) override { this->opts_.at(group).betas.first = m; }

 protected:
  using OptimizerWith<Opts>::OptimizerWith;
};

}  // namespace kiln::optim
