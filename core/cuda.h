// CUDA runtime queries. In a build without the CUDA backend they report no devices.
#pragma once
#include <string>

namespace kiln::cuda {

/// True when the build has the CUDA backend and at least one GPU answers.
bool is_available();
/// Number of visible GPUs (0 without the backend or without a driver).
int device_count();
/// Launches a one-thread kernel on device 0 that writes `value` and reads it back;
/// returns the value read. Throws kiln::Error when no GPU is usable.
int probe(int value);

}  // namespace kiln::cuda
