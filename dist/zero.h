// ZeroRedundancyOptimizer: ZeRO stage 1, optimizer-state sharding (as in llm.c). Every
// rank keeps the whole model but only 1/world of the optimizer state. Each parameter group
// is laid out as one flat vector per dtype, padded to a multiple of the world size; rank r
// owns the r-th equal slice (its shard). A step
//   1. reduce-scatters the flat gradient (the mean over ranks; each rank receives its shard),
//   2. runs the wrapped optimizer (SGD, Adam, AdamW, RMSprop: all element-wise) on the shard,
//   3. all-gathers the updated shards back into every rank's parameters.
// Gradients stay local until step(), so gradient accumulation needs no no_sync(), and the
// model is used without DistributedDataParallel (or with ddp.set_require_sync(false), to
// keep DDP's buffer broadcast). The gradient traffic is one reduce-scatter plus one
// all-gather: the bytes of one all-reduce, but none of it overlaps backward.
//
//   dist::ZeroRedundancyOptimizer opt(model->parameters(), [](std::vector<optim::ParamGroup> shard) {
//     return std::make_unique<optim::AdamW>(shard, optim::AdamWOptions{.lr = 1e-3});
//   });
//   loss.backward(); opt.step(); opt.zero_grad();
//
// state_dict() is the full, unsharded state in the wrapped optimizer's own layout (what
// that optimizer over the whole model would write), so checkpoints move freely between
// ZeRO-1, plain optimizers and world sizes; it is a collective (every rank calls it).
#pragma once
#include <functional>
#include <memory>
#include <vector>
#include "kiln/optim/optimizer.h"

namespace kiln::dist {

/// Builds the wrapped optimizer over the shard parameter groups it is given (one group per
/// group of the model, with the group's lr / weight_decay overrides).
using ShardOptimizerFactory = std::function<std::unique_ptr<optim::Optimizer>(const std::vector<optim::ParamGroup>&)>;

class ZeroRedundancyOptimizer : public optim::Optimizer {
 public:
  /// Broadcasts rank 0's parameters (every rank then starts from the same model) and builds
  /// the shards. Parameters of one group must share a device; they may mix float dtypes.
  ZeroRedundancyOptimizer(const std::vector<optim::ParamGroup>& groups, const ShardOptimizerFactory& make);
  ZeroRedundancyOptimizer(const std::vector<Tensor>& params, const ShardOptimizerFactory& make)
      : ZeroRedundancyOptimizer(optim::single_group(params), make) {}

  /// Reduce-scatter, the wrapped optimizer's step on this rank's shard, all-gather. A
  /// parameter without a gradient counts as a zero gradient (all shards step together).
  void step() override;
  /// Not supported: the shards are laid out at construction (a kiln::Error).
  void add_param_group(const optim::ParamGroup& group) override;
  double lr(size_t group = 0) const override { return inner_->lr(group); }
  void set_lr(size_t group, double lr) override { inner_->set_lr(group, lr); }
  using Optimizer::set_lr;
  bool supports_momentum() const override { return inner_->supports_momentum(); }
  double momentum(size_t group) const override { return inner_->momentum(group); }
  void set_momentum(size_t group, double m) override { inner_->set_momentum(group, m); }
  /// A GradScaler's inf/NaN check sees the local gradients: every rank takes the max, so
  /// all skip the step together.
  bool agree_found_inf(bool found) const override;
  void agree_found_inf(Tensor& flag) const override;

  /// The full state (a collective: every rank must call it; every rank gets the whole dict).
  optim::StateDict state_dict() const override;
  /// Takes a full state (of this ZeRO optimizer, or of the wrapped optimizer's kind over
  /// the same parameters, saved with any world size) and keeps this rank's shard of it.
  void load_state_dict(const optim::StateDict& sd) override;

  /// The wrapped optimizer over this rank's shards.
  const optim::Optimizer& shard_optimizer() const { return *inner_; }
  /// Bytes of optimizer state (buffers) this rank holds: about 1/world of the unsharded state.
  int64_t state_bytes() const;

 protected:
  void update(size_t group, Tensor p, const Tensor& g, ParamState& st) override;
  std::map<std::string, double> group_hparams(size_t) const override { return {}; }
  void set_group_hparams(size_t, const std::map<std::string, double>&) override {}
  std::vector<std::string> buffer_names() const override { return {}; }
  void check_options(size_t) const override {}

 private:
  /// One flat vector: the parameters of one group with one dtype.
  struct Flat {
    size_t group;
    std::vector<size_t> params;    ///< indices into groups_[group]
    std::vector<int64_t> offsets;  ///< of each parameter in the flat vector
    int64_t numel = 0, shard = 0;  ///< unpadded length; shard length (padded = shard * world)
    Tensor shard_param;            ///< this rank's slice, the wrapped optimizer's parameter
  };
  /// Copies this rank's slice of the parameters into f.shard_param.
  void copy_into_shard(Flat& f);
  std::vector<Flat> flats_;
  std::unique_ptr<optim::Optimizer> inner_;
};

}  // namespace kiln::dist
