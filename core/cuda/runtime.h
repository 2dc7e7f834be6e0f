// Internal helpers of the CUDA backend for .cu files: the raw current stream, device
// properties cached per device. Users go through core/cuda.h.
#pragma once
#include <cuda_runtime.h>
#include "kiln/core/cuda.h"
#include "kiln/core/cuda/check.h"

namespace kiln::cuda {

/// Most devices kiln keeps per-device state for.
constexpr int kMaxDevices = 64;

/// `device` itself, or the current device when it is -1; throws kiln::Error naming the
/// device count when it is out of range.
int resolve_device(int device);
/// The calling thread's current stream on `device` (-1: current) as a cudaStream_t.
cudaStream_t current_raw_stream(int device = -1);
/// Number of streaming multiprocessors of `device` (cached).
int multiprocessor_count(int device);
/// Shared memory one block of a kernel on `device` may use once it asks for it with
/// cudaFuncSetAttribute (cudaDevAttrMaxSharedMemoryPerBlockOptin, cached).
int max_shared_memory_optin(int device);
/// Counts one host synchronisation (cuda::host_sync_count; core/cuda/device_check.cu).
void note_host_sync();

}  // namespace kiln::cuda
