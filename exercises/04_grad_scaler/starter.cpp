// Exercise 4 (exercises/04_grad_scaler/README.md): write the update rule.
#include "exercise.h"

ScalerState scaler_update(ScalerState s, bool found_inf, double growth_factor, double backoff_factor,
                          int64_t growth_interval) {
  // Your task: back off on an overflow, grow after growth_interval clean steps in a row.
  (void)found_inf, (void)growth_factor, (void)backoff_factor, (void)growth_interval;
  return s;  // a fixed scale: fp16 gradients overflow (or underflow) and are never rescued
}
