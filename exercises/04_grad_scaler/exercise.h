// Exercise 4: the dynamic loss scale's update rule (mixed precision).
#pragma once
#include <cstdint>

struct ScalerState {
  double scale;            ///< what the loss is multiplied by before backward
  int64_t growth_tracker;  ///< steps in a row without an inf/NaN gradient
};

/// The state after one optimizer step whose gradients had (found_inf) or had no inf/NaN,
/// as torch.cuda.amp.GradScaler.update: an overflow multiplies the scale by backoff_factor
/// and restarts the count; growth_interval clean steps in a row multiply it by
/// growth_factor and restart the count.
ScalerState scaler_update(ScalerState s, bool found_inf, double growth_factor, double backoff_factor,
                          int64_t growth_interval);
