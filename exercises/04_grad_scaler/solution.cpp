// Exercise 4, a solution.
#include "exercise.h"

ScalerState scaler_update(ScalerState s, bool found_inf, double growth_factor, double backoff_factor,
                          int64_t growth_interval) {
  if (found_inf) return {s.scale * backoff_factor, 0};  // the step was skipped: scale down
  if (s.growth_tracker + 1 == growth_interval) return {s.scale * growth_factor, 0};
  return {s.scale, s.growth_tracker + 1};
}
