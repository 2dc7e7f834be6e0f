// DivergenceGuard (see divergence_guard.h).
#include "kiln/optim/divergence_guard.h"
#include <cmath>
#include "kiln/core/autograd.h"
#include "kiln/core/error.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/helpers.h"
#include "kiln/optim/grad_scaler.h"

namespace kiln::optim {

DivergenceGuard::DivergenceGuard(DivergenceGuardOptions options) : o_(options) {
  KILN_CHECK(o_.max_consecutive_skips >= 1, "DivergenceGuard: max_consecutive_skips must be >= 1, got ",
             o_.max_consecutive_skips);
}

bool DivergenceGuard::check(double loss, const std::vector<Tensor>& params) { return check(loss, params, nullptr); }
bool DivergenceGuard::check(double loss, const Optimizer& opt) { return check(loss, opt.all_params(), &opt); }

bool DivergenceGuard::check(double loss, const std::vector<Tensor>& params, const Optimizer* agree) {
  if (!std::isfinite(loss)) {
    record(true, "loss " + std::to_string(loss));
    return false;
  }
  // One fused pass over the gradients (GradScaler's inf check, multiplying by 1): a
  // gradient holds an inf or NaN exactly when their joint norm is not finite.
  std::vector<Tensor> grads;
  for (const Tensor& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  bool bad = found_inf_and_unscale_(grads, 1.0f);
  if (agree) bad = agree->agree_found_inf(bad);
  record(bad, bad ? "an inf/NaN gradient" : "");
  return !bad;
}

Tensor DivergenceGuard::check_on_device(const Tensor& loss, const Optimizer& opt) {
  KILN_CHECK(loss.defined() && loss.numel() == 1 && loss.device().is_cuda(), "DivergenceGuard.check_on_device: "
             "expected a one-element loss on a GPU, got ", loss.defined() ? describe(loss) : std::string("none"));
  NoGradGuard ng;
  const Device dev = loss.device();
  // 0 * loss is NaN exactly when the loss is inf or NaN
  Tensor found = ne(mul(loss.detach(), 0.0), 0.0).to(DType::float32).reshape({});
  std::vector<Tensor> grads;
  for (const Tensor& p : opt.all_params())
    if (p.grad().defined()) grads.push_back(p.grad());
  KILN_CHECK(found_inf_and_unscale_on_device_(grads, found, ones({}, {.dtype = DType::float32, .device = dev})),
             "DivergenceGuard.check_on_device: the gradients of ", opt.name(), " must be contiguous float32/float64 "
             "tensors on ", dev.str(), " (use check() otherwise)");
  opt.agree_found_inf(found);
  return found;
}

void DivergenceGuard::record(bool skipped, const std::string& reason) {
  if (!skipped) {
    consecutive_ = 0;
    return;
  }
  ++skipped_;
  ++consecutive_;
  last_reason_ = reason;
  KILN_CHECK(consecutive_ < o_.max_consecutive_skips, "training diverged: ", consecutive_,
             " steps in a row were skipped (the last for ", reason, "), ", skipped_,
             " in all; no step with a finite loss and gradients came back. Lower the learning rate, "
             "add warm-up or gradient clipping, or check the data");
}

}  // namespace kiln::optim
