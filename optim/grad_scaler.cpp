// GradScaler (dynamic loss scaling) and the unscale + inf/NaN check over gradients.
#include "kiln/optim/grad_scaler.h"
#include <cfloat>
#include <cmath>
#include "kiln/core/autograd.h"
#include "kiln/core/checked_math.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/helpers.h"
#include "kiln/ops/reduce.h"
#include "kiln/optim/update_kernels.h"

namespace kiln::optim {

bool found_inf_and_unscale_(std::vector<Tensor>& grads, float inv_scale) {
  NoGradGuard ng;
  bool found = false;
  for (auto& g : grads) {
    if (!g.defined() || g.numel() == 0) continue;
    KILN_CHECK(g.is_floating_point(), "found_inf_and_unscale_: expected floating-point gradients, got ", describe(g));
    auto* k = reinterpret_cast<UnscaleKernelFn*>(fused_update_kernel(FusedUpdate::unscale, g.device()));
    if (k && fused_dtype_ok(g.dtype()) && g.is_contiguous()) {
      found = k(g.dtype(), g.raw_data(), g.numel(), double(inv_scale)) || found;
      continue;
    }
    // generic path: 0 * x is NaN exactly when x is inf or NaN, so one sum detects both
    Tensor g32 = g.dtype() == DType::float64 ? g : g.to(DType::float32);
    if (!std::isfinite(sum(mul(g32, 0.0)).item())) found = true;
    g.mul_(double(inv_scale));
  }
  return found;
}

GradScaler::GradScaler(GradScalerOptions o)
    : scale_(o.init_scale), growth_factor_(o.growth_factor), backoff_factor_(o.backoff_factor),
      growth_interval_(o.growth_interval), enabled_(o.enabled) {
  KILN_CHECK(std::isfinite(o.init_scale) && o.init_scale > 0, "GradScaler: init_scale must be positive and finite, got ",
             o.init_scale);
  KILN_CHECK(o.growth_factor > 1.0, "GradScaler: growth_factor must be > 1, got ", o.growth_factor);
  KILN_CHECK(o.backoff_factor > 0 && o.backoff_factor < 1.0, "GradScaler: backoff_factor must be in (0, 1), got ",
             o.backoff_factor);
  KILN_CHECK(o.growth_interval > 0, "GradScaler: growth_interval must be > 0, got ", o.growth_interval);
  scale_ = clamp_scale(scale_);
}

double GradScaler::clamp_scale(double s) const {
  // the scale is used as a float32 value: keep it a normal, finite float
  if (!(s >= double(FLT_MIN))) return double(FLT_MIN);
  if (s >= double(FLT_MAX)) return double(FLT_MAX);
  return double(float(s));
}

void GradScaler::ensure_device(Device dev) const {
  if (on_device()) {
    KILN_CHECK(scale_dev_.device() == dev, "GradScaler: the scale lives on ", scale_dev_.device().str(),
               " but this loss/gradient is on ", dev.str(), " (one GradScaler per device)");
    return;
  }
  NoGradGuard ng;
  const TensorOptions f32{.dtype = DType::float32, .device = dev};
  scale_dev_ = full({}, scale_, f32);  // scale_ is already a float value
  tracker_dev_ = full({}, double(growth_tracker_), {.dtype = DType::int32, .device = dev});
  inv_scale_dev_ = full({}, double(float(1.0 / scale_)), f32);
  last_found_dev_ = full({}, last_found_inf_ ? 1.0 : 0.0, f32);
}

bool found_inf_and_unscale_on_device_(const std::vector<Tensor>& grads, const Tensor& found_inf,
                                      const Tensor& inv_scale) {
  const Device dev = found_inf.device();
  auto* k = reinterpret_cast<UnscaleMultiKernelFn*>(fused_update_kernel(FusedUpdate::unscale_multi, dev));
  if (!dev.is_cuda() || !k) return false;
  for (const auto& g : grads)
    if (!(g.device() == dev) || !fused_dtype_ok(g.dtype()) || !g.is_contiguous()) return false;
  for (DType dt : {DType::float32, DType::float64}) {
    std::vector<TensorSlot> slots;
    for (const auto& g : grads) {
      if (g.dtype() != dt || g.numel() == 0) continue;
      TensorSlot sl;
      sl.g = g.raw_data();
      sl.n = g.numel();
      slots.push_back(sl);
    }
    if (!slots.empty())
      k(dt, slots.data(), int64_t(slots.size()), static_cast<float*>(found_inf.raw_data()),
        static_cast<const float*>(inv_scale.raw_data()));
  }
  return true;
}

bool GradScaler::device_unscale_ok(const std::vector<Tensor>& grads) const {
  if (grads.empty() || !grads[0].device().is_cuda()) return false;
  const Device dev = grads[0].device();
  if (!fused_update_kernel(FusedUpdate::unscale_multi, dev) || !fused_update_kernel(FusedUpdate::scale_update, dev))
    return false;
  if (on_device() && !(scale_dev_.device() == dev)) return false;
  for (const auto& g : grads)
    if (!(g.device() == dev) || !fused_dtype_ok(g.dtype()) || !g.is_contiguous()) return false;
  return true;
}

double GradScaler::get_scale() const {
  if (!enabled_) return 1.0;
  return on_device() ? scale_dev_.item() : scale_;
}

int64_t GradScaler::growth_tracker() const {
  return on_device() ? int64_t(tracker_dev_.item()) : growth_tracker_;
}

bool GradScaler::last_step_skipped() const { return on_device() ? last_found_dev_.item() != 0 : last_found_inf_; }

Tensor GradScaler::last_step_skipped_flag() const {
  if (on_device()) return last_found_dev_.clone();  // update() overwrites it in place next step
  return full({}, last_found_inf_ ? 1.0 : 0.0, {.dtype = DType::float32});
}

Tensor GradScaler::scale(const Tensor& loss) const {
  if (!enabled_) return loss;
  KILN_CHECK(loss.defined() && loss.is_floating_point(), "GradScaler.scale: expected a floating-point loss, got ",
             loss.defined() ? describe(loss) : std::string("an undefined tensor"));
  // a 16-bit loss is scaled in float32 (2^16 alone overflows float16)
  const bool half = is_half(loss.dtype());
  Tensor l = half ? loss.to(DType::float32) : loss;
  if (l.device().is_cuda() && fused_update_kernel(FusedUpdate::scale_update, l.device())) {
    ensure_device(l.device());
    return mul(l, l.dtype() == DType::float32 ? scale_dev_ : scale_dev_.to(l.dtype()));
  }
  return mul(l, get_scale());
}

void GradScaler::unscale_(Optimizer& opt) {
  if (!enabled_) return;
  PerOpt& st = per_opt_[&opt];
  KILN_CHECK(st.stage != Stage::unscaled, "GradScaler.unscale_: already called on this ", opt.name(),
             " optimizer since the last update()");
  KILN_CHECK(st.stage != Stage::stepped, "GradScaler.unscale_: called after step() for this ", opt.name(),
             " optimizer; call update() first");
  std::vector<Tensor> grads;
  for (const auto& p : opt.all_params()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    KILN_CHECK(g.dtype() != DType::float16, "GradScaler.unscale_: attempting to unscale float16 gradients (",
               describe(g), "); keep float32 master parameters and autocast instead");
    grads.push_back(g);
  }
  if (device_unscale_ok(grads)) {
    // device path: one multi-tensor launch per dtype, found_inf stays on the device
    NoGradGuard ng;
    const Device dev = grads[0].device();
    ensure_device(dev);
    Tensor found = zeros({}, {.dtype = DType::float32, .device = dev});
    found_inf_and_unscale_on_device_(grads, found, inv_scale_dev_);  // device_unscale_ok: it runs
    opt.agree_found_inf(found);
    st.found_inf = false;
    st.found_inf_dev = found;
  } else {
    const float inv = float(1.0 / get_scale());
    st.found_inf = opt.agree_found_inf(found_inf_and_unscale_(grads, inv));
    st.found_inf_dev = Tensor();
  }
  st.stage = Stage::unscaled;
}

bool GradScaler::step(Optimizer& opt) {
  if (!enabled_) {
    opt.step();
    return true;
  }
  KILN_CHECK(per_opt_[&opt].stage != Stage::stepped, "GradScaler.step: already called on this ", opt.name(),
             " optimizer since the last update()");
  if (per_opt_[&opt].stage == Stage::ready) unscale_(opt);
  PerOpt& st = per_opt_[&opt];
  bool ran = false;
  if (st.found_inf_dev.defined() && opt.can_skip_on_device() &&
      opt.all_params().front().device() == st.found_inf_dev.device()) {
    opt.step_unless(st.found_inf_dev);  // skipped (or not) on the device
    ran = true;
  } else {
    const bool found = st.found_inf_dev.defined() ? st.found_inf_dev.item() != 0 : st.found_inf;  // a sync
    if (!found) {
      opt.step();
      ran = true;
    }
  }
  st.stage = Stage::stepped;
  return ran;
}

void GradScaler::update(std::optional<double> new_scale) {
  if (!enabled_) return;
  if (new_scale) {
    KILN_CHECK(std::isfinite(*new_scale) && *new_scale > 0, "GradScaler.update: new_scale must be positive and "
               "finite, got ", *new_scale);
    scale_ = clamp_scale(*new_scale);
    if (on_device()) {
      scale_dev_.fill_(scale_);
      inv_scale_dev_.fill_(double(float(1.0 / scale_)));
    }
  } else if (on_device()) {
    // device path: combine the optimizers' flags, then one thread updates the scale
    NoGradGuard ng;
    const Device dev = scale_dev_.device();
    Tensor found;
    for (const auto& [o, st] : per_opt_) {
      (void)o;
      if (st.stage == Stage::ready) continue;
      Tensor f = st.found_inf_dev.defined() ? st.found_inf_dev
                                            : full({}, st.found_inf ? 1.0 : 0.0, {.dtype = DType::float32, .device = dev});
      found = found.defined() ? add(found, f) : f;
    }
    KILN_CHECK(found.defined(), "GradScaler.update: no inf checks were recorded; call step() (or unscale_()) on an "
               "optimizer before update()");
    auto* k = reinterpret_cast<ScaleUpdateKernelFn*>(fused_update_kernel(FusedUpdate::scale_update, dev));
    k(static_cast<float*>(scale_dev_.raw_data()), static_cast<int32_t*>(tracker_dev_.raw_data()),
      static_cast<float*>(inv_scale_dev_.raw_data()), static_cast<float*>(last_found_dev_.raw_data()),
      static_cast<const float*>(found.raw_data()), growth_factor_, backoff_factor_, growth_interval_);
  } else {
    bool any = false, found = false;
    for (const auto& [o, st] : per_opt_) {
      (void)o;
      if (st.stage == Stage::ready) continue;
      any = true;
      found = found || st.found_inf;
    }
    KILN_CHECK(any, "GradScaler.update: no inf checks were recorded; call step() (or unscale_()) on an optimizer "
               "before update()");
    last_found_inf_ = found;
    if (found) {
      scale_ = clamp_scale(scale_ * backoff_factor_);
      growth_tracker_ = 0;
    } else if (growth_tracker_ + 1 >= growth_interval_) {
      double grown = scale_ * growth_factor_;
      if (grown <= double(FLT_MAX)) scale_ = clamp_scale(grown);  // never inf
      growth_tracker_ = 0;
    } else {
      ++growth_tracker_;
    }
  }
  per_opt_.clear();
}

StateDict GradScaler::state_dict() const {
  const TensorOptions f64{.dtype = DType::float64};
  StateDict sd;
  sd["scale"] = scalar_tensor(on_device() ? scale_dev_.item() : scale_, f64);
  sd["growth_factor"] = scalar_tensor(growth_factor_, f64);
  sd["backoff_factor"] = scalar_tensor(backoff_factor_, f64);
  sd["growth_interval"] = scalar_tensor(double(growth_interval_), {.dtype = DType::int64});
  sd["growth_tracker"] = scalar_tensor(double(growth_tracker()), {.dtype = DType::int64});
  return sd;
}

void GradScaler::load_state_dict(const StateDict& sd) {
  auto get = [&](const char* k) {
    auto it = sd.find(k);
    KILN_CHECK(it != sd.end() && it->second.defined() && it->second.numel() == 1,
               "GradScaler.load_state_dict: missing or non-scalar key '", k, "'");
    return it->second.item();
  };
  for (const auto& [k, v] : sd) {
    (void)v;
    KILN_CHECK(k == "scale" || k == "growth_factor" || k == "backoff_factor" || k == "growth_interval" ||
               k == "growth_tracker", "GradScaler.load_state_dict: unexpected key '", k, "'");
  }
  const double s = get("scale"), gf = get("growth_factor"), bf = get("backoff_factor");
  const double gi = get("growth_interval"), gt = get("growth_tracker");
  KILN_CHECK(std::isfinite(s) && s > 0 && std::isfinite(gf) && gf > 1 && bf > 0 && bf < 1 && gi > 0 && gt >= 0,
             "GradScaler.load_state_dict: invalid values (scale ", s, ", growth_factor ", gf, ", backoff_factor ", bf,
             ", growth_interval ", gi, ", growth_tracker ", gt, ")");
  scale_ = clamp_scale(s);
  growth_factor_ = gf;
  backoff_factor_ = bf;
  growth_interval_ = checked_whole(gi, "GradScaler.load_state_dict", "growth_interval");
  growth_tracker_ = checked_whole(gt, "GradScaler.load_state_dict", "growth_tracker");
  per_opt_.clear();
  if (on_device()) {  // the device state is re-created from the loaded values when next used
    last_found_inf_ = last_step_skipped();
    scale_dev_ = tracker_dev_ = inv_scale_dev_ = last_found_dev_ = Tensor();
  }
}

}  // namespace kiln::optim
