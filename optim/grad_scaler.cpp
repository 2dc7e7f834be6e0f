// GradScaler (dynamic loss scaling) and the unscale + inf/NaN check over gradients.
#include "optim/grad_scaler.h"
#include <cfloat>
#include <cmath>
#include "core/autograd.h"
#include "ops/elementwise.h"
#include "ops/helpers.h"
#include "ops/reduce.h"
#include "optim/update_kernels.h"

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

Tensor GradScaler::scale(const Tensor& loss) const {
  if (!enabled_) return loss;
  KILN_CHECK(loss.defined() && loss.is_floating_point(), "GradScaler.scale: expected a floating-point loss, got ",
             loss.defined() ? describe(loss) : std::string("an undefined tensor"));
  // a 16-bit loss is scaled in float32 (2^16 alone overflows float16)
  const bool half = loss.dtype() == DType::float16 || loss.dtype() == DType::bfloat16;
  return mul(half ? loss.to(DType::float32) : loss, scale_);
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
  const float inv = float(1.0 / scale_);
  st.found_inf = found_inf_and_unscale_(grads, inv);
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
  if (!st.found_inf) {
    opt.step();
    ran = true;
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
  sd["scale"] = scalar_tensor(scale_, f64);
  sd["growth_factor"] = scalar_tensor(growth_factor_, f64);
  sd["backoff_factor"] = scalar_tensor(backoff_factor_, f64);
  sd["growth_interval"] = scalar_tensor(double(growth_interval_), {.dtype = DType::int64});
  sd["growth_tracker"] = scalar_tensor(double(growth_tracker_), {.dtype = DType::int64});
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
  KILN_CHECK(std::isfinite(s) && s > 0 && gf > 1 && bf > 0 && bf < 1 && gi > 0 && gt >= 0,
             "GradScaler.load_state_dict: invalid values (scale ", s, ", growth_factor ", gf, ", backoff_factor ", bf,
             ", growth_interval ", gi, ", growth_tracker ", gt, ")");
  scale_ = clamp_scale(s);
  growth_factor_ = gf;
  backoff_factor_ = bf;
  growth_interval_ = int64_t(gi);
  growth_tracker_ = int64_t(gt);
  per_opt_.clear();
}

}  // namespace kiln::optim
