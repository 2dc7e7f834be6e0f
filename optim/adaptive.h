// PyTorch's other optimizers: Adagrad, Adadelta, Adamax, NAdam, RAdam, Rprop, ASGD and Adafactor
// (torch.optim, the single-tensor form PyTorch runs on the CPU), each from tensor ops, so
// they run on every device with elementwise kernels. They take parameter groups, overrides
// by state_dict name, state_dict()/load_state_dict() and schedulers as SGD and Adam do.
#pragma once
#include <optional>
#include <utility>
#include "kiln/optim/optimizer.h"

namespace kiln::optim {

struct AdagradOptions {
  double lr = 1e-2;
  double lr_decay = 0.0;  ///< the step's lr is lr / (1 + (step - 1) * lr_decay)
  double weight_decay = 0.0;  ///< L2: g += wd*p
  double initial_accumulator_value = 0.0;
  double eps = 1e-10;
  bool maximize = false;  ///< ascend instead (the gradient negated; PyTorch's maximize)
};
/// torch.optim.Adagrad: sum += g^2; p -= clr * g / (sqrt(sum) + eps). State: "step", "sum"
/// (starting at initial_accumulator_value).
class Adagrad : public OptimizerWith<AdagradOptions> {
 public:
  using Options = AdagradOptions;
  Adagrad(const std::vector<Tensor>& params, AdagradOptions options = {});
  Adagrad(const std::vector<ParamGroup>& groups, AdagradOptions options = {});

 protected:
  void update(size_t group, Tensor p, const Tensor& g, ParamState& st) override;
  std::map<std::string, double> group_hparams(size_t group) const override;
  void set_group_hparams(size_t group, const std::map<std::string, double>& h) override;
  std::vector<std::string> buffer_names() const override { return {"sum"}; }
  void check_options(size_t group) const override;
};

struct AdadeltaOptions {
  double lr = 1.0;
  double rho = 0.9;
  double eps = 1e-6;
  double weight_decay = 0.0;  ///< L2
  bool maximize = false;  ///< ascend instead (the gradient negated; PyTorch's maximize)
};
/// torch.optim.Adadelta: sq = rho*sq + (1-rho)*g^2; delta = sqrt(acc + eps) / sqrt(sq + eps) * g;
/// acc = rho*acc + (1-rho)*delta^2; p -= lr*delta. State: "step", "square_avg", "acc_delta".
class Adadelta : public OptimizerWith<AdadeltaOptions> {
 public:
  using Options = AdadeltaOptions;
  Adadelta(const std::vector<Tensor>& params, AdadeltaOptions options = {});
  Adadelta(const std::vector<ParamGroup>& groups, AdadeltaOptions options = {});

 protected:
  void update(size_t group, Tensor p, const Tensor& g, ParamState& st) override;
  std::map<std::string, double> group_hparams(size_t group) const override;
  void set_group_hparams(size_t group, const std::map<std::string, double>& h) override;
  std::vector<std::string> buffer_names() const override { return {"square_avg", "acc_delta"}; }
  void check_options(size_t group) const override;
};

struct AdamaxOptions {
  double lr = 2e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.0;  ///< L2
  bool maximize = false;  ///< ascend instead (the gradient negated; PyTorch's maximize)
};
/// torch.optim.Adamax (Adam with the infinity norm): m = lerp(m, g, 1-b1);
/// u = max(b2*u, |g| + eps); p -= lr/(1-b1^t) * m/u. State: "step", "exp_avg", "exp_inf".
class Adamax : public OptimizerWithBetas<AdamaxOptions> {
 public:
  using Options = AdamaxOptions;
  Adamax(const std::vector<Tensor>& params, AdamaxOptions options = {});
  Adamax(const std::vector<ParamGroup>& groups, AdamaxOptions options = {});

 protected:
  void update(size_t group, Tensor p, const Tensor& g, ParamState& st) override;
  std::map<std::string, double> group_hparams(size_t group) const override;
  void set_group_hparams(size_t group, const std::map<std::string, double>& h) override;
  std::vector<std::string> buffer_names() const override { return {"exp_avg", "exp_inf"}; }
  void check_options(size_t group) const override;
};

struct NAdamOptions {
  double lr = 2e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.0;
  double momentum_decay = 4e-3;
  bool decoupled_weight_decay = false;  ///< true: p *= 1 - lr*wd (NAdamW), else L2
  bool maximize = false;  ///< ascend instead (the gradient negated; PyTorch's maximize)
};
/// torch.optim.NAdam (Adam with Nesterov momentum, Dozat 2016): the momentum coefficient
/// mu_t = b1 * (1 - 0.5 * 0.96^(t * momentum_decay)) and its running product set the weights
/// of the gradient and of the momentum in the step. State: "step", "exp_avg", "exp_avg_sq" and
/// the number "mu_product".
class NAdam : public OptimizerWithBetas<NAdamOptions> {
 public:
  using Options = NAdamOptions;
  NAdam(const std::vector<Tensor>& params, NAdamOptions options = {});
  NAdam(const std::vector<ParamGroup>& groups, NAdamOptions options = {});
  std::vector<std::string> scalar_names() const override { return {"mu_product"}; }

 protected:
  void update(size_t group, Tensor p, const Tensor& g, ParamState& st) override;
  std::map<std::string, double> group_hparams(size_t group) const override;
  void set_group_hparams(size_t group, const std::map<std::string, double>& h) override;
  std::vector<std::string> buffer_names() const override { return {"exp_avg", "exp_avg_sq"}; }
  void check_options(size_t group) const override;
};

struct RAdamOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool decoupled_weight_decay = false;  ///< true: p *= 1 - lr*wd (RAdamW), else L2
  bool maximize = false;  ///< ascend instead (the gradient negated; PyTorch's maximize)
};
/// torch.optim.RAdam (rectified Adam, Liu et al. 2019): while the variance estimate is too
/// young (rho_t <= 5) a momentum-SGD step lr * m / (1-b1^t); after, Adam's step times the
/// rectification term. State: "step", "exp_avg", "exp_avg_sq".
class RAdam : public OptimizerWithBetas<RAdamOptions> {
 public:
  using Options = RAdamOptions;
  RAdam(const std::vector<Tensor>& params, RAdamOptions options = {});
  RAdam(const std::vector<ParamGroup>& groups, RAdamOptions options = {});

 protected:
  void update(size_t group, Tensor p, const Tensor& g, ParamState& st) override;
  std::map<std::string, double> group_hparams(size_t group) const override;
  void set_group_hparams(size_t group, const std::map<std::string, double>& h) override;
  std::vector<std::string> buffer_names() const override { return {"exp_avg", "exp_avg_sq"}; }
  void check_options(size_t group) const override;
};

struct RpropOptions {
  double lr = 1e-2;  ///< every entry's first step size
  std::pair<double, double> etas = {0.5, 1.2};            ///< (etaminus, etaplus): step size factors
  std::pair<double, double> step_sizes = {1e-6, 50.0};    ///< (min, max) step size
  bool maximize = false;  ///< ascend instead (the gradient negated; PyTorch's maximize)
};
/// torch.optim.Rprop (resilient backpropagation, full-batch): each entry's step size grows by
/// etaplus while its gradient keeps its sign and shrinks by etaminus when the sign flips (the
/// step is then skipped and the gradient remembered as 0), clamped to step_sizes;
/// p -= sign(g) * step_size. State: "step", "prev", "step_size". state_dict names:
/// etaminus, etaplus, step_size_min, step_size_max.
class Rprop : public OptimizerWith<RpropOptions> {
 public:
  using Options = RpropOptions;
  Rprop(const std::vector<Tensor>& params, RpropOptions options = {});
  Rprop(const std::vector<ParamGroup>& groups, RpropOptions options = {});

 protected:
  void update(size_t group, Tensor p, const Tensor& g, ParamState& st) override;
  std::map<std::string, double> group_hparams(size_t group) const override;
  void set_group_hparams(size_t group, const std::map<std::string, double>& h) override;
  std::vector<std::string> buffer_names() const override { return {"prev", "step_size"}; }
  void check_options(size_t group) const override;
};

struct ASGDOptions {
  double lr = 1e-2;
  double lambd = 1e-4;  ///< decay term
  double alpha = 0.75;  ///< power for the eta update
  double t0 = 1e6;      ///< the step at which averaging starts
  double weight_decay = 0.0;  ///< L2
  bool maximize = false;  ///< ascend instead (the gradient negated; PyTorch's maximize)
};
/// torch.optim.ASGD (averaged SGD, Polyak and Juditsky 1992): p *= 1 - lambd * eta;
/// p -= eta * g; the running average ax of the parameter (from step t0 on, before it ax = p);
/// then eta = lr / (1 + lambd * lr * t)^alpha and mu = 1 / max(1, t - t0). State: "step",
/// "ax" and the numbers "eta" and "mu" (float64; PyTorch keeps them as tensors of the default
/// dtype, so in float32 its eta is rounded to float32).
class ASGD : public OptimizerWith<ASGDOptions> {
 public:
  using Options = ASGDOptions;
  ASGD(const std::vector<Tensor>& params, ASGDOptions options = {});
  ASGD(const std::vector<ParamGroup>& groups, ASGDOptions options = {});
  std::vector<std::string> scalar_names() const override { return {"eta", "mu"}; }

 protected:
  void update(size_t group, Tensor p, const Tensor& g, ParamState& st) override;
  std::map<std::string, double> group_hparams(size_t group) const override;
  void set_group_hparams(size_t group, const std::map<std::string, double>& h) override;
  std::vector<std::string> buffer_names() const override { return {"ax"}; }
  void check_options(size_t group) const override;
};

struct AdafactorOptions {
  double lr = 1e-2;
  double beta2_decay = -0.8;         ///< the second-moment weight of step t is t^beta2_decay
  std::optional<double> eps1 = std::nullopt;  ///< the variance floor's square root; default eps(dtype)
  double eps2 = 1e-3;                ///< the smallest relative step size
  double d = 1.0;                    ///< clipping threshold of the update's root mean square
  double weight_decay = 0.0;         ///< decoupled: p *= 1 - lr * wd
  bool maximize = false;  ///< ascend instead (the gradient negated; PyTorch's maximize)
};
/// torch.optim.Adafactor (Shazeer and Stern 2018, as PyTorch 2.5+ implements it): for a
/// parameter of two or more dims the second moment is factored over its last two dims into
/// a row variance R (.., m, 1) and a column variance C (.., 1, n), each a running mean of the
/// squared gradient's mean over the other dim with weight t^beta2_decay, and estimated as
/// R C / mean(R); vectors keep a full "variance". The update g / sqrt(max(v, eps1^2)) is
/// scaled down to an RMS of at most d, and the step is lr_t = min(lr, 1/sqrt(t)) times
/// max(eps2, RMS(p)). State: "step", "row_var" and "col_var" (or "variance"): for an (m, n)
/// weight m + n numbers instead of Adam's 2 m n.
class Adafactor : public OptimizerWith<AdafactorOptions> {
 public:
  using Options = AdafactorOptions;
  Adafactor(const std::vector<Tensor>& params, AdafactorOptions options = {});
  Adafactor(const std::vector<ParamGroup>& groups, AdafactorOptions options = {});

 protected:
  void update(size_t group, Tensor p, const Tensor& g, ParamState& st) override;
  std::map<std::string, double> group_hparams(size_t group) const override;
  void set_group_hparams(size_t group, const std::map<std::string, double>& h) override;
  std::vector<std::string> buffer_names() const override { return {"row_var", "col_var", "variance"}; }
  Shape buffer_shape(const std::string& name, const Tensor& p) const override;
  void check_options(size_t group) const override;
};

}  // namespace kiln::optim
