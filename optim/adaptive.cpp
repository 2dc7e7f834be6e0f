// Adagrad, Adadelta, Adamax, NAdam and RAdam: options checks and updates from tensor ops,
// each following PyTorch 2.15's single-tensor step operation by operation (so float64
// trajectories agree with PyTorch's to a few ulps: its vectorised CPU kernels fuse some
// multiply-adds).
#include "kiln/optim/adaptive.h"
#include "kiln/core/finfo.h"
#include <cmath>
#include "kiln/ops/elementwise.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/reduce.h"

namespace kiln::optim {

namespace {
void check_common(const std::string& who, size_t group, double lr, double eps, double weight_decay) {
  KILN_CHECK(lr >= 0, who, ": invalid learning rate ", lr, " in group ", group, " (expected >= 0)");
  KILN_CHECK(eps >= 0, who, ": invalid eps ", eps, " in group ", group, " (expected >= 0)");
  KILN_CHECK(weight_decay >= 0, who, ": invalid weight_decay ", weight_decay, " in group ", group,
             " (expected >= 0)");
}
void check_betas(const std::string& who, size_t group, const std::pair<double, double>& b) {
  KILN_CHECK(b.first >= 0 && b.first < 1, who, ": invalid beta1 ", b.first, " in group ", group,
             " (expected 0 <= beta1 < 1)");
  KILN_CHECK(b.second >= 0 && b.second < 1, who, ": invalid beta2 ", b.second, " in group ", group,
             " (expected 0 <= beta2 < 1)");
}
// g + wd * p (PyTorch's grad.add(param, alpha=weight_decay)), or g itself.
Tensor with_l2(const Tensor& g, const Tensor& p, double wd) { return wd != 0 ? add(g, mul(p, wd)) : g; }
// v = v * beta + (1 - beta) * g * g (PyTorch's v.mul_(beta).addcmul_(g, g, value=1-beta)).
void average_square(Tensor& v, const Tensor& g, double beta) {
  v.mul_(beta);
  v.add_(mul(mul(g, 1.0 - beta), g));
}
}  // namespace

// ---------------------------------------------------------------- Adagrad

Adagrad::Adagrad(const std::vector<Tensor>& params, AdagradOptions o) : Adagrad(single_group(params), o) {}
Adagrad::Adagrad(const std::vector<ParamGroup>& groups, AdagradOptions o) : OptimizerWith("Adagrad", groups, o) {
  check_all_options();
}

void Adagrad::check_options(size_t group) const {
  const AdagradOptions& o = opts_.at(group);
  check_common(name_, group, o.lr, o.eps, o.weight_decay);
  KILN_CHECK(o.lr_decay >= 0, "Adagrad: invalid lr_decay ", o.lr_decay, " in group ", group, " (expected >= 0)");
  KILN_CHECK(o.initial_accumulator_value >= 0, "Adagrad: invalid initial_accumulator_value ",
             o.initial_accumulator_value, " in group ", group, " (expected >= 0)");
}

void Adagrad::update(size_t group, Tensor p, const Tensor& g, ParamState& st) {
  const AdagradOptions& o = opts_[group];
  bool created = false;
  Tensor& sum = buffer(st, "sum", p, &created);
  if (created && o.initial_accumulator_value != 0) sum.fill_(o.initial_accumulator_value);
  ++st.step;
  const Tensor d = with_l2(g, p, o.weight_decay);
  const double clr = o.lr / (1 + double(st.step - 1) * o.lr_decay);
  sum.add_(mul(d, d));
  p.add_(div(mul(d, -clr), add(sqrt(sum), o.eps)));
}

std::map<std::string, double> Adagrad::group_hparams(size_t group) const {
  const AdagradOptions& o = opts_.at(group);
  return {{"lr", o.lr}, {"lr_decay", o.lr_decay}, {"weight_decay", o.weight_decay},
          {"initial_accumulator_value", o.initial_accumulator_value}, {"eps", o.eps}};
}
void Adagrad::set_group_hparams(size_t group, const std::map<std::string, double>& h) {
  AdagradOptions o = opts_.at(group);
  assign_hparams(group, h, {{"lr", &o.lr}, {"lr_decay", &o.lr_decay}, {"weight_decay", &o.weight_decay},
                            {"initial_accumulator_value", &o.initial_accumulator_value}, {"eps", &o.eps}});
  opts_.at(group) = o;
}

// ---------------------------------------------------------------- Adadelta

Adadelta::Adadelta(const std::vector<Tensor>& params, AdadeltaOptions o) : Adadelta(single_group(params), o) {}
Adadelta::Adadelta(const std::vector<ParamGroup>& groups, AdadeltaOptions o) : OptimizerWith("Adadelta", groups, o) {
  check_all_options();
}

void Adadelta::check_options(size_t group) const {
  const AdadeltaOptions& o = opts_.at(group);
  check_common(name_, group, o.lr, o.eps, o.weight_decay);
  KILN_CHECK(o.rho >= 0 && o.rho <= 1, "Adadelta: invalid rho ", o.rho, " in group ", group, " (expected 0 <= rho <= 1)");
}

void Adadelta::update(size_t group, Tensor p, const Tensor& g, ParamState& st) {
  const AdadeltaOptions& o = opts_[group];
  Tensor& sq = buffer(st, "square_avg", p);
  Tensor& acc = buffer(st, "acc_delta", p);
  ++st.step;
  const Tensor d = with_l2(g, p, o.weight_decay);
  average_square(sq, d, o.rho);
  const Tensor std_ = sqrt(add(sq, o.eps));
  const Tensor delta = mul(div(sqrt(add(acc, o.eps)), std_), d);
  average_square(acc, delta, o.rho);
  p.add_(delta, -o.lr);
}

std::map<std::string, double> Adadelta::group_hparams(size_t group) const {
  const AdadeltaOptions& o = opts_.at(group);
  return {{"lr", o.lr}, {"rho", o.rho}, {"eps", o.eps}, {"weight_decay", o.weight_decay}};
}
void Adadelta::set_group_hparams(size_t group, const std::map<std::string, double>& h) {
  AdadeltaOptions o = opts_.at(group);
  assign_hparams(group, h, {{"lr", &o.lr}, {"rho", &o.rho}, {"eps", &o.eps}, {"weight_decay", &o.weight_decay}});
  opts_.at(group) = o;
}

// ---------------------------------------------------------------- Adamax

Adamax::Adamax(const std::vector<Tensor>& params, AdamaxOptions o) : Adamax(single_group(params), o) {}
Adamax::Adamax(const std::vector<ParamGroup>& groups, AdamaxOptions o) : OptimizerWithBetas("Adamax", groups, o) {
  check_all_options();
}

void Adamax::check_options(size_t group) const {
  const AdamaxOptions& o = opts_.at(group);
  check_common(name_, group, o.lr, o.eps, o.weight_decay);
  check_betas(name_, group, o.betas);
}

void Adamax::update(size_t group, Tensor p, const Tensor& g, ParamState& st) {
  const AdamaxOptions& o = opts_[group];
  Tensor& m = buffer(st, "exp_avg", p);
  Tensor& u = buffer(st, "exp_inf", p);
  ++st.step;
  const Tensor d = with_l2(g, p, o.weight_decay);
  m.copy_(lerp(m, d, 1.0 - o.betas.first));
  u.mul_(o.betas.second);
  u.copy_(maximum(u, add(abs(d), o.eps)));
  const double clr = o.lr / (1 - std::pow(o.betas.first, double(st.step)));
  p.add_(div(mul(m, -clr), u));
}

std::map<std::string, double> Adamax::group_hparams(size_t group) const {
  const AdamaxOptions& o = opts_.at(group);
  return {{"lr", o.lr}, {"beta1", o.betas.first}, {"beta2", o.betas.second}, {"eps", o.eps},
          {"weight_decay", o.weight_decay}};
}
void Adamax::set_group_hparams(size_t group, const std::map<std::string, double>& h) {
  AdamaxOptions o = opts_.at(group);
  assign_hparams(group, h, {{"lr", &o.lr}, {"beta1", &o.betas.first}, {"beta2", &o.betas.second}, {"eps", &o.eps},
                            {"weight_decay", &o.weight_decay}});
  opts_.at(group) = o;
}

// ---------------------------------------------------------------- NAdam

NAdam::NAdam(const std::vector<Tensor>& params, NAdamOptions o) : NAdam(single_group(params), o) {}
NAdam::NAdam(const std::vector<ParamGroup>& groups, NAdamOptions o) : OptimizerWithBetas("NAdam", groups, o) {
  check_all_options();
}

void NAdam::check_options(size_t group) const {
  const NAdamOptions& o = opts_.at(group);
  check_common(name_, group, o.lr, o.eps, o.weight_decay);
  check_betas(name_, group, o.betas);
  KILN_CHECK(o.momentum_decay >= 0, "NAdam: invalid momentum_decay ", o.momentum_decay, " in group ", group,
             " (expected >= 0)");
}

void NAdam::update(size_t group, Tensor p, const Tensor& g, ParamState& st) {
  const NAdamOptions& o = opts_[group];
  Tensor& m = buffer(st, "exp_avg", p);
  Tensor& v = buffer(st, "exp_avg_sq", p);
  auto mp = st.scalars.try_emplace("mu_product", 1.0).first;
  ++st.step;
  const double t = double(st.step), b1 = o.betas.first, b2 = o.betas.second;
  const double bias_correction2 = 1 - std::pow(b2, t);
  Tensor d = g;
  if (o.weight_decay != 0) {
    if (o.decoupled_weight_decay) p.mul_(1 - o.lr * o.weight_decay);
    else d = with_l2(g, p, o.weight_decay);
  }
  const double mu = b1 * (1.0 - 0.5 * std::pow(0.96, t * o.momentum_decay));
  const double mu_next = b1 * (1.0 - 0.5 * std::pow(0.96, (t + 1) * o.momentum_decay));
  mp->second *= mu;
  m.copy_(lerp(m, d, 1 - b1));
  average_square(v, d, b2);
  const Tensor denom = add(sqrt(div(v, bias_correction2)), o.eps);
  const double mu_product_next = mp->second * mu_next;
  p.add_(div(mul(d, -o.lr * (1.0 - mu) / (1.0 - mp->second)), denom));
  p.add_(div(mul(m, (-o.lr * mu_next) / (1.0 - mu_product_next)), denom));
}

std::map<std::string, double> NAdam::group_hparams(size_t group) const {
  const NAdamOptions& o = opts_.at(group);
  return {{"lr", o.lr}, {"beta1", o.betas.first}, {"beta2", o.betas.second}, {"eps", o.eps},
          {"weight_decay", o.weight_decay}, {"momentum_decay", o.momentum_decay},
          {"decoupled_weight_decay", o.decoupled_weight_decay ? 1.0 : 0.0}};
}
void NAdam::set_group_hparams(size_t group, const std::map<std::string, double>& h) {
  NAdamOptions o = opts_.at(group);
  double decoupled = 0;
  assign_hparams(group, h, {{"lr", &o.lr}, {"beta1", &o.betas.first}, {"beta2", &o.betas.second}, {"eps", &o.eps},
                            {"weight_decay", &o.weight_decay}, {"momentum_decay", &o.momentum_decay},
                            {"decoupled_weight_decay", &decoupled}});
  o.decoupled_weight_decay = decoupled != 0;
  opts_.at(group) = o;
}

// ---------------------------------------------------------------- RAdam

RAdam::RAdam(const std::vector<Tensor>& params, RAdamOptions o) : RAdam(single_group(params), o) {}
RAdam::RAdam(const std::vector<ParamGroup>& groups, RAdamOptions o) : OptimizerWithBetas("RAdam", groups, o) {
  check_all_options();
}

void RAdam::check_options(size_t group) const {
  const RAdamOptions& o = opts_.at(group);
  check_common(name_, group, o.lr, o.eps, o.weight_decay);
  check_betas(name_, group, o.betas);
}

void RAdam::update(size_t group, Tensor p, const Tensor& g, ParamState& st) {
  const RAdamOptions& o = opts_[group];
  Tensor& m = buffer(st, "exp_avg", p);
  Tensor& v = buffer(st, "exp_avg_sq", p);
  ++st.step;
  const double t = double(st.step), b1 = o.betas.first, b2 = o.betas.second;
  Tensor d = g;
  if (o.weight_decay != 0) {
    if (o.decoupled_weight_decay) p.mul_(1 - o.lr * o.weight_decay);
    else d = with_l2(g, p, o.weight_decay);
  }
  m.copy_(lerp(m, d, 1 - b1));
  average_square(v, d, b2);
  const double bias_correction1 = 1 - std::pow(b1, t), bias_correction2 = 1 - std::pow(b2, t);
  const Tensor corrected = div(m, bias_correction1);
  // the length of the approximated simple moving average; the variance is tractable above 4
  const double rho_inf = 2 / (1 - b2) - 1;
  const double rho_t = rho_inf - 2 * t * std::pow(b2, t) / bias_correction2;
  if (rho_t > 5.0) {
    const double rect =
        std::pow((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t), 0.5);
    const Tensor adaptive_lr = std::pow(bias_correction2, 0.5) / add(sqrt(v), o.eps);
    p.add_(mul(mul(mul(corrected, o.lr), adaptive_lr), rect), -1.0);
  } else {
    p.add_(mul(corrected, o.lr), -1.0);
  }
}

std::map<std::string, double> RAdam::group_hparams(size_t group) const {
  const RAdamOptions& o = opts_.at(group);
  return {{"lr", o.lr}, {"beta1", o.betas.first}, {"beta2", o.betas.second}, {"eps", o.eps},
          {"weight_decay", o.weight_decay}, {"decoupled_weight_decay", o.decoupled_weight_decay ? 1.0 : 0.0}};
}
void RAdam::set_group_hparams(size_t group, const std::map<std::string, double>& h) {
  RAdamOptions o = opts_.at(group);
  double decoupled = 0;
  assign_hparams(group, h, {{"lr", &o.lr}, {"beta1", &o.betas.first}, {"beta2", &o.betas.second}, {"eps", &o.eps},
                            {"weight_decay", &o.weight_decay}, {"decoupled_weight_decay", &decoupled}});
  o.decoupled_weight_decay = decoupled != 0;
  opts_.at(group) = o;
}

// ---------------------------------------------------------------- Rprop

Rprop::Rprop(const std::vector<Tensor>& params, RpropOptions o) : Rprop(single_group(params), o) {}
Rprop::Rprop(const std::vector<ParamGroup>& groups, RpropOptions o) : OptimizerWith("Rprop", groups, o) {
  check_all_options();
}

void Rprop::check_options(size_t group) const {
  const RpropOptions& o = opts_.at(group);
  KILN_CHECK(o.lr >= 0, "Rprop: invalid learning rate ", o.lr, " in group ", group, " (expected >= 0)");
  KILN_CHECK(0 < o.etas.first && o.etas.first < 1 && 1 < o.etas.second, "Rprop: invalid etas (", o.etas.first, ", ",
             o.etas.second, ") in group ", group, " (expected 0 < etaminus < 1 < etaplus)");
  KILN_CHECK(0 <= o.step_sizes.first && o.step_sizes.first <= o.step_sizes.second, "Rprop: invalid step_sizes (",
             o.step_sizes.first, ", ", o.step_sizes.second, ") in group ", group, " (expected 0 <= min <= max)");
}

void Rprop::update(size_t group, Tensor p, const Tensor& g, ParamState& st) {
  const RpropOptions& o = opts_[group];
  Tensor& prev = buffer(st, "prev", p);
  bool created = false;
  Tensor& step_size = buffer(st, "step_size", p, &created);
  if (created) step_size.fill_(o.lr);
  ++st.step;
  // the factor of each step size: etaplus where the gradient kept its sign, etaminus where
  // it flipped, 1 where either is 0
  const Tensor agree = sign(mul(g, prev));
  const Tensor factor = where(gt(agree, 0.0), o.etas.second, where(lt(agree, 0.0), o.etas.first, ones_like(g)));
  step_size.copy_(clamp(mul(step_size, factor), o.step_sizes.first, o.step_sizes.second));
  // where the sign flipped: no step, and the gradient is remembered as 0
  const Tensor d = where(lt(agree, 0.0), 0.0, g);
  p.add_(mul(sign(d), step_size), -1.0);
  prev.copy_(d);
}

std::map<std::string, double> Rprop::group_hparams(size_t group) const {
  const RpropOptions& o = opts_.at(group);
  return {{"lr", o.lr}, {"etaminus", o.etas.first}, {"etaplus", o.etas.second},
          {"step_size_min", o.step_sizes.first}, {"step_size_max", o.step_sizes.second}};
}
void Rprop::set_group_hparams(size_t group, const std::map<std::string, double>& h) {
  RpropOptions o = opts_.at(group);
  assign_hparams(group, h, {{"lr", &o.lr}, {"etaminus", &o.etas.first}, {"etaplus", &o.etas.second},
                            {"step_size_min", &o.step_sizes.first}, {"step_size_max", &o.step_sizes.second}});
  opts_.at(group) = o;
}

// ---------------------------------------------------------------- ASGD

ASGD::ASGD(const std::vector<Tensor>& params, ASGDOptions o) : ASGD(single_group(params), o) {}
ASGD::ASGD(const std::vector<ParamGroup>& groups, ASGDOptions o) : OptimizerWith("ASGD", groups, o) {
  check_all_options();
}

void ASGD::check_options(size_t group) const {
  const ASGDOptions& o = opts_.at(group);
  check_common(name_, group, o.lr, 0.0, o.weight_decay);
}

void ASGD::update(size_t group, Tensor p, const Tensor& g, ParamState& st) {
  const ASGDOptions& o = opts_[group];
  Tensor& ax = buffer(st, "ax", p);
  double& eta = st.scalars.try_emplace("eta", o.lr).first->second;
  double& mu = st.scalars.try_emplace("mu", 1.0).first->second;
  ++st.step;
  const double t = double(st.step);
  const Tensor d = with_l2(g, p, o.weight_decay);
  p.mul_(1 - o.lambd * eta);
  p.add_(mul(d, -eta));
  if (mu != 1) ax.add_(mul(sub(p, ax), mu));
  else ax.copy_(p);
  eta = o.lr / std::pow(1 + o.lambd * o.lr * t, o.alpha);
  mu = 1 / std::max(1.0, t - o.t0);
}

std::map<std::string, double> ASGD::group_hparams(size_t group) const {
  const ASGDOptions& o = opts_.at(group);
  return {{"lr", o.lr}, {"lambd", o.lambd}, {"alpha", o.alpha}, {"t0", o.t0}, {"weight_decay", o.weight_decay}};
}
void ASGD::set_group_hparams(size_t group, const std::map<std::string, double>& h) {
  ASGDOptions o = opts_.at(group);
  assign_hparams(group, h, {{"lr", &o.lr}, {"lambd", &o.lambd}, {"alpha", &o.alpha}, {"t0", &o.t0},
                            {"weight_decay", &o.weight_decay}});
  opts_.at(group) = o;
}

// ---------------------------------------------------------------- Adafactor

Adafactor::Adafactor(const std::vector<Tensor>& params, AdafactorOptions o) : Adafactor(single_group(params), o) {}
Adafactor::Adafactor(const std::vector<ParamGroup>& groups, AdafactorOptions o) : OptimizerWith("Adafactor", groups, o) {
  check_all_options();
}

void Adafactor::check_options(size_t group) const {
  const AdafactorOptions& o = opts_.at(group);
  KILN_CHECK(o.lr >= 0, "Adafactor: invalid learning rate ", o.lr, " in group ", group, " (expected >= 0)");
  KILN_CHECK(o.beta2_decay <= 0, "Adafactor: invalid beta2_decay ", o.beta2_decay, " in group ", group,
             " (expected <= 0)");
  KILN_CHECK(!o.eps1 || *o.eps1 >= 0, "Adafactor: invalid eps1 ", o.eps1.value_or(0), " in group ", group,
             " (expected >= 0, or none for the dtype's epsilon)");
  KILN_CHECK(o.eps2 >= 0, "Adafactor: invalid eps2 ", o.eps2, " in group ", group, " (expected >= 0)");
  KILN_CHECK(o.d >= 1, "Adafactor: invalid clipping threshold d ", o.d, " in group ", group, " (expected >= 1)");
  KILN_CHECK(o.weight_decay >= 0, "Adafactor: invalid weight_decay ", o.weight_decay, " in group ", group,
             " (expected >= 0)");
}

Shape Adafactor::buffer_shape(const std::string& name, const Tensor& p) const {
  Shape s = p.shape();
  if (name == "row_var" && s.size() > 1) s.back() = 1;
  if (name == "col_var" && s.size() > 1) s[s.size() - 2] = 1;
  return s;
}

void Adafactor::update(size_t group, Tensor p, const Tensor& g, ParamState& st) {
  // PyTorch 2.15's _single_tensor_adafactor, operation by operation
  const AdafactorOptions& o = opts_[group];
  ++st.step;
  const double t = double(st.step);
  const double one_minus_beta2 = std::pow(t, o.beta2_decay);
  const double rho = std::min(o.lr, 1 / std::sqrt(t));
  const double alpha = std::max(o.eps2, vector_norm(p).item() / std::sqrt(double(p.numel()))) * rho;
  if (o.weight_decay != 0) p.mul_(1 - o.lr * o.weight_decay);
  const double eps1 = o.eps1 ? *o.eps1 : finfo_eps(p.dtype());
  auto state = [&](const char* name) -> Tensor& {
    auto it = st.buffers.find(name);
    if (it == st.buffers.end())
      it = st.buffers.emplace(name, zeros(buffer_shape(name, p), {.dtype = p.dtype(), .device = p.device()})).first;
    return it->second;
  };
  Tensor var;
  if (g.dim() > 1) {
    Tensor& row = state("row_var");
    Tensor& col = state("col_var");
    row.copy_(lerp(row, div(square(vector_norm(g, 2.0, {-1}, true)), double(g.size(-1))), one_minus_beta2));
    col.copy_(lerp(col, div(square(vector_norm(g, 2.0, {-2}, true)), double(g.size(-2))), one_minus_beta2));
    var = div(matmul(row, col), clamp(mean(row, {-2}, true), eps1, std::nullopt));
  } else {
    Tensor& v = state("variance");
    v.copy_(lerp(v, mul(g, g), one_minus_beta2));
    var = v;
  }
  const Tensor u = mul(rsqrt(clamp(var, eps1 * eps1, std::nullopt)), g);
  const double denom = std::max(1.0, vector_norm(u).item() / (std::sqrt(double(u.numel())) * o.d));
  p.add_(u, -alpha / denom);
}

std::map<std::string, double> Adafactor::group_hparams(size_t group) const {
  const AdafactorOptions& o = opts_.at(group);
  // eps1 none (the dtype's epsilon) is kept as NaN
  return {{"lr", o.lr}, {"beta2_decay", o.beta2_decay}, {"eps1", o.eps1.value_or(std::nan(""))}, {"eps2", o.eps2},
          {"d", o.d}, {"weight_decay", o.weight_decay}};
}
void Adafactor::set_group_hparams(size_t group, const std::map<std::string, double>& h) {
  AdafactorOptions o = opts_.at(group);
  double eps1 = o.eps1.value_or(std::nan(""));
  assign_hparams(group, h, {{"lr", &o.lr}, {"beta2_decay", &o.beta2_decay}, {"eps1", &eps1}, {"eps2", &o.eps2},
                            {"d", &o.d}, {"weight_decay", &o.weight_decay}});
  o.eps1 = std::isnan(eps1) ? std::nullopt : std::optional<double>(eps1);
  opts_.at(group) = o;
}

}  // namespace kiln::optim
