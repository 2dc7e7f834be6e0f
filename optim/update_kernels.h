// Fused optimizer kernels: raw-pointer signatures and a small table keyed by
// (update kind, device type). The CPU entries (optim/update_cpu.cpp) are always present;
// a CUDA backend registers its own with register_fused_update(). When a device has no
// entry, optimizers fall back to a generic path built from kiln tensor ops.
#pragma once
#include <cstdint>
#include "core/device.h"
#include "core/dtype.h"
#include "optim/update_math.h"

namespace kiln::optim {

enum class FusedUpdate : uint8_t { sgd, adam, rmsprop, unscale, kCount };

// All buffers are contiguous, `n` elements of dtype `dt` (float32 or float64 on the CPU).
/// p (n), g (n), buf (n, unused when momentum == 0)
using SgdKernelFn = void(DType dt, void* p, const void* g, void* buf, int64_t n, const SgdScalars& s);
/// p, g, m, v (n); vmax (n) or null when !amsgrad
using AdamKernelFn = void(DType dt, void* p, const void* g, void* m, void* v, void* vmax, int64_t n,
                          const AdamScalars& s);
/// p, g, square_avg (n); grad_avg (n) or null when !centered; buf (n) or null when momentum == 0
using RmspropKernelFn = void(DType dt, void* p, const void* g, void* square_avg, void* grad_avg,
                             void* buf, int64_t n, const RmspropScalars& s);
/// g (n) *= inv_scale in place; returns true when any original element was inf/NaN.
using UnscaleKernelFn = bool(DType dt, void* g, int64_t n, double inv_scale);

/// Stores a fused kernel for (kind, device type).
void register_fused_update(FusedUpdate kind, DeviceType dev, void* fn);
/// The kernel, or nullptr when the device type has none (callers then use tensor ops).
void* fused_update_kernel(FusedUpdate kind, Device dev);
/// Whether the dtype is one the fused kernels handle (float32, float64).
inline bool fused_dtype_ok(DType dt) { return dt == DType::float32 || dt == DType::float64; }

}  // namespace kiln::optim
