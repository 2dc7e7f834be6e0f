// Adam (L2 weight decay added to the gradient) and AdamW (decoupled weight decay), with
// optional AMSGrad, following torch.optim.Adam / AdamW (foreach=False).
#pragma once
#include <utility>
#include "kiln/optim/optimizer.h"

namespace kiln::optim {

struct AdamOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.0;  ///< L2: g += wd*p
  bool amsgrad = false;
  bool maximize = false;  ///< ascend instead (the gradient negated; PyTorch's maximize)
};

struct AdamWOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.01;  ///< decoupled: p *= 1 - lr*wd before the Adam step
  bool amsgrad = false;
  bool maximize = false;  ///< ascend instead (the gradient negated; PyTorch's maximize)
};

/// Shared implementation of Adam and AdamW. State per parameter: "step", "exp_avg",
/// "exp_avg_sq" and, with amsgrad, "max_exp_avg_sq".
///   m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2; vmax = max(vmax, v) (amsgrad)
///   p -= lr/(1-b1^t) * m / (sqrt(v or vmax)/sqrt(1-b2^t) + eps)
class AdamBase : public OptimizerWithBetas<AdamOptions> {
 protected:
  AdamBase(std::string name, bool decoupled, const std::vector<ParamGroup>& groups, const AdamOptions& o);
  void update(size_t group, Tensor p, const Tensor& g, ParamState& st) override;
  bool step_group_multi(size_t group, const std::vector<size_t>& idx, const std::vector<Tensor>& grads,
                        const float* found_inf) override;
  FusedUpdate multi_tensor_kind() const override { return FusedUpdate::adam_multi; }
  std::map<std::string, double> group_hparams(size_t group) const override;
  void set_group_hparams(size_t group, const std::map<std::string, double>& h) override;
  std::vector<std::string> buffer_names() const override { return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}; }
  void check_options(size_t group) const override;

 private:
  bool decoupled_;
};

/// torch.optim.Adam: weight decay is L2 (added to the gradient).
///   optim::Adam opt(params, {.lr = 1e-3, .betas = {0.9, 0.98}});
class Adam : public AdamBase {
 public:
  using Options = AdamOptions;
  Adam(const std::vector<Tensor>& params, AdamOptions options = {});
  Adam(const std::vector<ParamGroup>& groups, AdamOptions options = {});
};

/// torch.optim.AdamW: decoupled weight decay (default 0.01).
///   optim::AdamW opt(model.parameters(), {.lr = 1e-3, .weight_decay = 0.01});
class AdamW : public AdamBase {
 public:
  using Options = AdamWOptions;
  AdamW(const std::vector<Tensor>& params, AdamWOptions options = {});
  AdamW(const std::vector<ParamGroup>& groups, AdamWOptions options = {});
};

}  // namespace kiln::optim
