// SGD: options checks, the fused-kernel call and the generic tensor-op fallback.
#include "kiln/optim/sgd.h"
#include <cmath>
#include "kiln/ops/elementwise.h"
#include "kiln/optim/update_kernels.h"

namespace kiln::optim {

SGD::SGD(const std::vector<Tensor>& params, SGDOptions o) : SGD(single_group(params), o) {}

SGD::SGD(const std::vector<ParamGroup>& groups, SGDOptions o) : OptimizerWith("SGD", groups, o) {
  check_all_options();
}

void SGD::check_options(size_t group) const {
  const SGDOptions& o = opts_.at(group);
  KILN_CHECK(o.lr >= 0, "SGD: invalid learning rate ", o.lr, " in group ", group, " (expected >= 0)");
  KILN_CHECK(o.momentum >= 0, "SGD: invalid momentum ", o.momentum, " in group ", group, " (expected >= 0)");
  KILN_CHECK(o.weight_decay >= 0, "SGD: invalid weight_decay ", o.weight_decay, " in group ", group,
             " (expected >= 0)");
  KILN_CHECK(std::isfinite(o.dampening), "SGD: invalid dampening ", o.dampening, " in group ", group);
  KILN_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0), "SGD: nesterov momentum requires momentum > 0 "
             "and dampening == 0 (group ", group, " has momentum ", o.momentum, ", dampening ", o.dampening, ")");
}

void SGD::update(size_t group, Tensor p, const Tensor& g, ParamState& st) {
  const SGDOptions& o = opts_[group];
  SgdScalars s{.lr = o.lr, .momentum = o.momentum, .dampening = o.dampening, .weight_decay = o.weight_decay,
               .nesterov = o.nesterov, .first = false};
  Tensor* buf = nullptr;
  if (o.momentum != 0) buf = &buffer(st, "momentum_buffer", p, &s.first);
  ++st.step;
  auto* k = reinterpret_cast<SgdKernelFn*>(fused_update_kernel(FusedUpdate::sgd, p.device()));
  if (k && fused_ok(p, {buf})) {
    Tensor gc = g.contiguous();
    k(p.dtype(), p.raw_data(), gc.raw_data(), buf ? buf->raw_data() : nullptr, p.numel(), s);
    return;
  }
  // generic path from tensor ops (any device with elementwise kernels)
  Tensor d = g;
  if (o.weight_decay != 0) d = add(d, mul(p, o.weight_decay));
  if (buf) {
    if (s.first) {
      buf->copy_(d);
    } else {
      buf->mul_(o.momentum);
      buf->add_(d, 1.0 - o.dampening);
    }
    d = o.nesterov ? add(d, mul(*buf, o.momentum)) : *buf;
  }
  p.add_(d, -o.lr);
}

bool SGD::step_group_multi(size_t group, const std::vector<size_t>& idx, const std::vector<Tensor>& grads,
                           const float* found_inf) {
  auto* k = reinterpret_cast<SgdMultiKernelFn*>(multi_kernel_for(group, idx));
  if (!k) return false;
  const SGDOptions& o = opts_[group];
  const SgdScalars s{.lr = o.lr, .momentum = o.momentum, .dampening = o.dampening, .weight_decay = o.weight_decay,
                     .nesterov = o.nesterov, .first = false};
  launch_group_slots(
      group, idx, grads, found_inf,
      [&](const Tensor& p, ParamState& st, TensorSlot& sl) {
        bool first = false;
        if (o.momentum != 0) sl.b0 = buffer(st, "momentum_buffer", p, &first).raw_data();
        sl.first = first ? 1 : 0;
      },
      [&](DType dt, const std::vector<TensorSlot>& slots) {
        k(dt, slots.data(), int64_t(slots.size()), s, found_inf, nullptr);
      });
  return true;
}

std::map<std::string, double> SGD::group_hparams(size_t group) const {
  const SGDOptions& o = opts_.at(group);
  return {{"lr", o.lr}, {"momentum", o.momentum}, {"dampening", o.dampening},
          {"weight_decay", o.weight_decay}, {"nesterov", o.nesterov ? 1.0 : 0.0}};
}

void SGD::set_group_hparams(size_t group, const std::map<std::string, double>& h) {
  SGDOptions o = opts_.at(group);
  double nesterov = 0;
  assign_hparams(group, h, {{"lr", &o.lr}, {"momentum", &o.momentum}, {"dampening", &o.dampening},
                            {"weight_decay", &o.weight_decay}, {"nesterov", &nesterov}});
  o.nesterov = nesterov != 0;
  opts_.at(group) = o;
}

}  // namespace kiln::optim
