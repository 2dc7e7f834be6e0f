// Adam and AdamW: options checks, bias corrections, the fused-kernel call and the
// generic tensor-op fallback.
#include "kiln/optim/adam.h"
#include <cmath>
#include "kiln/ops/elementwise.h"
#include "kiln/optim/update_kernels.h"

namespace kiln::optim {

namespace {
AdamOptions from_adamw(const AdamWOptions& o) {
  return {.lr = o.lr, .betas = o.betas, .eps = o.eps, .weight_decay = o.weight_decay, .amsgrad = o.amsgrad,
          .maximize = o.maximize};
}
}  // namespace

AdamBase::AdamBase(std::string name, bool decoupled, const std::vector<ParamGroup>& groups, const AdamOptions& o)
    : OptimizerWithBetas(std::move(name), groups, o), decoupled_(decoupled) {
  check_all_options();
}

Adam::Adam(const std::vector<Tensor>& params, AdamOptions o) : Adam(single_group(params), o) {}
Adam::Adam(const std::vector<ParamGroup>& groups, AdamOptions o) : AdamBase("Adam", false, groups, o) {}
AdamW::AdamW(const std::vector<Tensor>& params, AdamWOptions o) : AdamW(single_group(params), o) {}
AdamW::AdamW(const std::vector<ParamGroup>& groups, AdamWOptions o)
    : AdamBase("AdamW", true, groups, from_adamw(o)) {}

void AdamBase::check_options(size_t group) const {
  const AdamOptions& o = opts_.at(group);
  KILN_CHECK(o.lr >= 0, name_, ": invalid learning rate ", o.lr, " in group ", group, " (expected >= 0)");
  KILN_CHECK(o.eps >= 0, name_, ": invalid eps ", o.eps, " in group ", group, " (expected >= 0)");
  KILN_CHECK(o.betas.first >= 0 && o.betas.first < 1, name_, ": invalid beta1 ", o.betas.first, " in group ",
             group, " (expected 0 <= beta1 < 1)");
  KILN_CHECK(o.betas.second >= 0 && o.betas.second < 1, name_, ": invalid beta2 ", o.betas.second, " in group ",
             group, " (expected 0 <= beta2 < 1)");
  KILN_CHECK(o.weight_decay >= 0, name_, ": invalid weight_decay ", o.weight_decay, " in group ", group,
             " (expected >= 0)");
}

void AdamBase::update(size_t group, Tensor p, const Tensor& g, ParamState& st) {
  const AdamOptions& o = opts_[group];
  Tensor& m = buffer(st, "exp_avg", p);
  Tensor& v = buffer(st, "exp_avg_sq", p);
  Tensor* vmax = o.amsgrad ? &buffer(st, "max_exp_avg_sq", p) : nullptr;
  ++st.step;
  const double t = double(st.step);
  const double bc1 = 1.0 - std::pow(o.betas.first, t);
  const double bc2 = 1.0 - std::pow(o.betas.second, t);
  AdamScalars s{.lr = o.lr, .beta1 = o.betas.first, .beta2 = o.betas.second, .eps = o.eps,
                .weight_decay = o.weight_decay, .step_size = o.lr / bc1,
                .bias_correction2_sqrt = std::sqrt(bc2), .decoupled = decoupled_, .amsgrad = o.amsgrad};
  auto* k = reinterpret_cast<AdamKernelFn*>(fused_update_kernel(FusedUpdate::adam, p.device()));
  if (k && fused_ok(p, {&m, &v, vmax})) {
    Tensor gc = g.contiguous();
    k(p.dtype(), p.raw_data(), gc.raw_data(), m.raw_data(), v.raw_data(), vmax ? vmax->raw_data() : nullptr,
      p.numel(), s);
    return;
  }
  // generic path from tensor ops (any device with elementwise kernels)
  Tensor d = g;
  if (o.weight_decay != 0) {
    if (decoupled_) p.mul_(1.0 - o.lr * o.weight_decay);
    else d = add(d, mul(p, o.weight_decay));
  }
  m.mul_(o.betas.first);
  m.add_(d, 1.0 - o.betas.first);
  v.mul_(o.betas.second);
  v.add_(mul(d, d), 1.0 - o.betas.second);
  Tensor vv = v;
  if (vmax) {
    vmax->copy_(maximum(*vmax, v));
    vv = *vmax;
  }
  Tensor denom = add(div(sqrt(vv), s.bias_correction2_sqrt), o.eps);
  p.add_(div(m, denom), -s.step_size);
}

bool AdamBase::step_group_multi(size_t group, const std::vector<size_t>& idx, const std::vector<Tensor>& grads,
                                const float* found_inf) {
  auto* k = reinterpret_cast<AdamMultiKernelFn*>(multi_kernel_for(group, idx));
  if (!k) return false;
  const AdamOptions& o = opts_[group];
  // the kernel takes the bias corrections from each slot's step
  const AdamScalars s{.lr = o.lr, .beta1 = o.betas.first, .beta2 = o.betas.second, .eps = o.eps,
                      .weight_decay = o.weight_decay, .step_size = 0, .bias_correction2_sqrt = 1,
                      .decoupled = decoupled_, .amsgrad = o.amsgrad};
  launch_group_slots(
      group, idx, grads, found_inf,
      [&](const Tensor& p, ParamState& st, TensorSlot& sl) {
        sl.b0 = buffer(st, "exp_avg", p).raw_data();
        sl.b1 = buffer(st, "exp_avg_sq", p).raw_data();
        sl.b2 = o.amsgrad ? buffer(st, "max_exp_avg_sq", p).raw_data() : nullptr;
      },
      [&](DType dt, const std::vector<TensorSlot>& slots) {
        k(dt, slots.data(), int64_t(slots.size()), s, found_inf, nullptr);
      });
  return true;
}

std::map<std::string, double> AdamBase::group_hparams(size_t group) const {
  const AdamOptions& o = opts_.at(group);
  return {{"lr", o.lr}, {"beta1", o.betas.first}, {"beta2", o.betas.second}, {"eps", o.eps},
          {"weight_decay", o.weight_decay}, {"amsgrad", o.amsgrad ? 1.0 : 0.0}};
}

void AdamBase::set_group_hparams(size_t group, const std::map<std::string, double>& h) {
  AdamOptions o = opts_.at(group);
  double amsgrad = 0;
  assign_hparams(group, h, {{"lr", &o.lr}, {"beta1", &o.betas.first}, {"beta2", &o.betas.second},
                            {"eps", &o.eps}, {"weight_decay", &o.weight_decay}, {"amsgrad", &amsgrad}});
  o.amsgrad = amsgrad != 0;
  opts_.at(group) = o;
}

}  // namespace kiln::optim
