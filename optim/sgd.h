// SGD with momentum, dampening, Nesterov and L2 weight decay (torch.optim.SGD semantics).
#pragma once
#include "kiln/optim/optimizer.h"

namespace kiln::optim {

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;  ///< L2: added to the gradient
  bool nesterov = false;      ///< needs momentum > 0 and dampening == 0
  bool maximize = false;  ///< ascend instead (the gradient negated; PyTorch's maximize)
};

/// torch.optim.SGD: g += wd*p; buf = g (first step) or momentum*buf + (1-dampening)*g;
/// g = nesterov ? g + momentum*buf : buf; p -= lr*g. State: "momentum_buffer".
///   optim::SGD opt(params, {.lr = 0.1, .momentum = 0.9});
class SGD : public OptimizerWith<SGDOptions> {
 public:
  using Options = SGDOptions;
  SGD(const std::vector<Tensor>& params, SGDOptions options = {});
  SGD(const std::vector<ParamGroup>& groups, SGDOptions options = {});

  bool supports_momentum() const override { return true; }
  double momentum(size_t group) const override { return opts_.at(group).momentum; }
  void set_momentum(size_t group, double m) override { opts_.at(group).momentum = m; }

 protected:
  void update(size_t group, Tensor p, const Tensor& g, ParamState& st) override;
  bool step_group_multi(size_t group, const std::vector<size_t>& idx, const std::vector<Tensor>& grads,
                        const float* found_inf) override;
  FusedUpdate multi_tensor_kind() const override { return FusedUpdate::sgd_multi; }
  std::map<std::string, double> group_hparams(size_t group) const override;
  void set_group_hparams(size_t group, const std::map<std::string, double>& h) override;
  std::vector<std::string> buffer_names() const override { return {"momentum_buffer"}; }
  void check_options(size_t group) const override;
};

}  // namespace kiln::optim
