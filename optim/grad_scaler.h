// GradScaler: dynamic loss scaling for mixed-precision training (PyTorch's rules: scale
// 2^16, x2 after growth_interval clean steps, x0.5 and a skipped step on inf/NaN grads),
// and found_inf_and_unscale_, the one-pass unscale + inf/NaN check over gradients. On CUDA
// the scale, growth tracker and inf flags stay on the device (no host sync per step).
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <vector>
#include "kiln/core/autocast.h"
#include "kiln/optim/optimizer.h"

namespace kiln::optim {

/// Multiplies every gradient by inv_scale in place and returns true when any of them held
/// an inf or NaN before unscaling. One pass per gradient (the fused "unscale" kernel of the
/// gradient's device, else tensor ops).
bool found_inf_and_unscale_(std::vector<Tensor>& grads, float inv_scale);

/// The device form, with no host synchronisation: one multi-tensor launch per dtype
/// multiplies the gradients by the one-element float32 device tensor inv_scale and sets
/// the one-element float32 device tensor found_inf to 1 when one held an inf or NaN.
/// Returns false (and does nothing) unless every gradient is a contiguous float32/float64
/// tensor on found_inf's CUDA device with the fused kernel there.
bool found_inf_and_unscale_on_device_(const std::vector<Tensor>& grads, const Tensor& found_inf,
                                      const Tensor& inv_scale);

struct GradScalerOptions {
  double init_scale = 65536.0;  ///< 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled = true;
};

/// Dynamic loss scaling (torch.amp.GradScaler):
///   scaler.scale(loss).backward();
///   scaler.unscale_(opt);                  // optional, e.g. before clip_grad_norm_
///   scaler.step(opt);                      // skipped when a gradient is inf/NaN
///   scaler.update();                       // backoff on inf, growth after clean steps
/// The scale stays a positive, finite float32 value (clamped to [FLT_MIN, FLT_MAX]).
/// When disabled every call is a pass-through (scale() returns the loss, step() steps).
///
/// CUDA: from the first scale() of a CUDA loss (or unscale_ of CUDA gradients) the scale
/// and growth tracker live in one-element device tensors. unscale_ is one multi-tensor
/// "check for inf/NaN and multiply by 1/scale" kernel writing a device found_inf; step()
/// hands found_inf to the optimizer's fused kernels (SGD, Adam, AdamW: the update is
/// skipped on the device), and update() is a one-thread kernel. Nothing is read back per
/// step; get_scale(), growth_tracker(), last_step_skipped() and state_dict() read the
/// device values (a synchronisation, only when called). Optimizers without a multi-tensor
/// kernel (RMSprop) and non-contiguous or 16-bit gradients take the host path (a sync).
class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  /// loss * scale (the loss itself when disabled); a float16/bfloat16 loss is scaled in float32.
  Tensor scale(const Tensor& loss) const;
  /// Divides the optimizer's gradients by the scale (once per step) and records whether
  /// any was inf/NaN. Throws if called twice for one optimizer before update().
  void unscale_(Optimizer& opt);
  /// Unscales (if not done yet) and runs opt.step() unless an inf/NaN was found; returns
  /// whether the step ran. On the CUDA device path the step is queued with the skip decided
  /// on the device, and this returns true (last_step_skipped() after update() tells).
  /// Throws if called twice for one optimizer before update().
  bool step(Optimizer& opt);
  /// Adjusts the scale from the inf checks since the last update (or sets new_scale).
  void update(std::optional<double> new_scale = std::nullopt);

  /// Current scale (1 when disabled; reads the device value on the CUDA path).
  double get_scale() const;
  /// Clean steps since the last growth or backoff.
  int64_t growth_tracker() const;
  bool is_enabled() const { return enabled_; }
  double growth_factor() const { return growth_factor_; }
  double backoff_factor() const { return backoff_factor_; }
  int64_t growth_interval() const { return growth_interval_; }
  /// Whether the last update() saw an inf/NaN (its step was skipped).
  bool last_step_skipped() const;
  /// The same without reading it: a one-element float32 tensor, 1 for a skipped step (on
  /// the device path a copy on the GPU, for reading later; else on the CPU).
  Tensor last_step_skipped_flag() const;
  /// True once the scale lives on a CUDA device.
  bool on_device() const { return scale_dev_.defined(); }

  /// "scale", "growth_factor", "backoff_factor", "growth_interval", "growth_tracker" (0-dim).
  StateDict state_dict() const;
  void load_state_dict(const StateDict& sd);

 private:
  enum class Stage { ready, unscaled, stepped };
  struct PerOpt {
    Stage stage = Stage::ready;
    bool found_inf = false;
    Tensor found_inf_dev;  ///< float32 one-element device flag (device path), else undefined
  };
  double clamp_scale(double s) const;
  /// Creates the device state on `dev` from the host values (once); throws when it lives
  /// on another device.
  void ensure_device(Device dev) const;
  /// Whether the device path can unscale these gradients (all contiguous float32/float64
  /// on one CUDA device with the kernels registered).
  bool device_unscale_ok(const std::vector<Tensor>& grads) const;
  double scale_;
  double growth_factor_, backoff_factor_;
  int64_t growth_interval_;
  bool enabled_;
  int64_t growth_tracker_ = 0;
  bool last_found_inf_ = false;
  std::map<const Optimizer*, PerOpt> per_opt_;
  // CUDA path: 0-dim device tensors (float32 scale, int32 tracker, float32 1/scale and
  // last found_inf); undefined until the first CUDA loss or gradients.
  mutable Tensor scale_dev_, tracker_dev_, inv_scale_dev_, last_found_dev_;
};

}  // namespace kiln::optim

namespace kiln::amp {
using ::kiln::optim::GradScaler;
using ::kiln::optim::GradScalerOptions;
}  // namespace kiln::amp
