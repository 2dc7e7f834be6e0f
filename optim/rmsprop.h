// RMSprop with optional momentum, centering and L2 weight decay (torch.optim.RMSprop).
#pragma once
#include "kiln/optim/optimizer.h"

namespace kiln::optim {

struct RMSpropOptions {
  double lr = 1e-2;
  double alpha = 0.99;
  double eps = 1e-8;
  double weight_decay = 0.0;  ///< L2: g += wd*p
  double momentum = 0.0;
  bool centered = false;
  bool maximize = false;  ///< ascend instead (the gradient negated; PyTorch's maximize)
};

/// torch.optim.RMSprop: sq = alpha*sq + (1-alpha)*g^2; avg = sqrt(sq [- ga^2]) + eps
/// (centered keeps ga = alpha*ga + (1-alpha)*g); with momentum buf = m*buf + g/avg,
/// p -= lr*buf, else p -= lr*g/avg. State: "step", "square_avg", "grad_avg", "momentum_buffer".
class RMSprop : public OptimizerWith<RMSpropOptions> {
 public:
  using Options = RMSpropOptions;
  RMSprop(const std::vector<Tensor>& params, RMSpropOptions options = {});
  RMSprop(const std::vector<ParamGroup>& groups, RMSpropOptions options = {});

  bool supports_momentum() const override { return true; }
  double momentum(size_t group) const override { return opts_.at(group).momentum; }
  void set_momentum(size_t group, double m) override { opts_.at(group).momentum = m; }

 protected:
  void update(size_t group, Tensor p, const Tensor& g, ParamState& st) override;
  std::map<std::string, double> group_hparams(size_t group) const override;
  void set_group_hparams(size_t group, const std::map<std::string, double>& h) override;
  std::vector<std::string> buffer_names() const override { return {"square_avg", "grad_avg", "momentum_buffer"}; }
  void check_options(size_t group) const override;
};

}  // namespace kiln::optim
