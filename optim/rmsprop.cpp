// RMSprop: options checks, the fused-kernel call and the generic tensor-op fallback.
#include "kiln/optim/rmsprop.h"
#include <cmath>
#include "kiln/ops/elementwise.h"
#include "kiln/optim/update_kernels.h"

namespace kiln::optim {

RMSprop::RMSprop(const std::vector<Tensor>& params, RMSpropOptions o) : RMSprop(single_group(params), o) {}

RMSprop::RMSprop(const std::vector<ParamGroup>& groups, RMSpropOptions o) : OptimizerWith("RMSprop", groups, o) {
  check_all_options();
}

void RMSprop::check_options(size_t group) const {
  const RMSpropOptions& o = opts_.at(group);
  KILN_CHECK(o.lr >= 0, "RMSprop: invalid learning rate ", o.lr, " in group ", group, " (expected >= 0)");
  KILN_CHECK(o.eps >= 0, "RMSprop: invalid eps ", o.eps, " in group ", group, " (expected >= 0)");
  KILN_CHECK(o.alpha >= 0, "RMSprop: invalid alpha ", o.alpha, " in group ", group, " (expected >= 0)");
  KILN_CHECK(o.momentum >= 0, "RMSprop: invalid momentum ", o.momentum, " in group ", group, " (expected >= 0)");
  KILN_CHECK(o.weight_decay >= 0, "RMSprop: invalid weight_decay ", o.weight_decay, " in group ", group,
             " (expected >= 0)");
}

void RMSprop::update(size_t group, Tensor p, const Tensor& g, ParamState& st) {
  const RMSpropOptions& o = opts_[group];
  Tensor& sq = buffer(st, "square_avg", p);
  Tensor* ga = o.centered ? &buffer(st, "grad_avg", p) : nullptr;
  Tensor* buf = o.momentum > 0 ? &buffer(st, "momentum_buffer", p) : nullptr;
  ++st.step;
  RmspropScalars s{.lr = o.lr, .alpha = o.alpha, .eps = o.eps, .weight_decay = o.weight_decay,
                   .momentum = o.momentum, .centered = o.centered};
  auto* k = reinterpret_cast<RmspropKernelFn*>(fused_update_kernel(FusedUpdate::rmsprop, p.device()));
  if (k && fused_ok(p, {&sq, ga, buf})) {
    Tensor gc = g.contiguous();
    k(p.dtype(), p.raw_data(), gc.raw_data(), sq.raw_data(), ga ? ga->raw_data() : nullptr,
      buf ? buf->raw_data() : nullptr, p.numel(), s);
    return;
  }
  // generic path from tensor ops (any device with elementwise kernels)
  Tensor d = g;
  if (o.weight_decay != 0) d = add(d, mul(p, o.weight_decay));
  sq.mul_(o.alpha);
  sq.add_(mul(d, d), 1.0 - o.alpha);
  Tensor avg;
  if (ga) {
    ga->mul_(o.alpha);
    ga->add_(d, 1.0 - o.alpha);
    avg = add(sqrt(sub(sq, mul(*ga, *ga))), o.eps);
  } else {
    avg = add(sqrt(sq), o.eps);
  }
  if (buf) {
    buf->mul_(o.momentum);
    buf->add_(div(d, avg));
    p.add_(*buf, -o.lr);
  } else {
    p.add_(div(d, avg), -o.lr);
  }
}

std::map<std::string, double> RMSprop::group_hparams(size_t group) const {
  const RMSpropOptions& o = opts_.at(group);
  return {{"lr", o.lr}, {"alpha", o.alpha}, {"eps", o.eps}, {"weight_decay", o.weight_decay},
          {"momentum", o.momentum}, {"centered", o.centered ? 1.0 : 0.0}};
}

void RMSprop::set_group_hparams(size_t group, const std::map<std::string, double>& h) {
  RMSpropOptions o = opts_.at(group);
  double centered = 0;
  assign_hparams(group, h, {{"lr", &o.lr}, {"alpha", &o.alpha}, {"eps", &o.eps},
                            {"weight_decay", &o.weight_decay}, {"momentum", &o.momentum},
                            {"centered", &centered}});
  o.centered = centered != 0;
  opts_.at(group) = o;
}

}  // namespace kiln::optim
