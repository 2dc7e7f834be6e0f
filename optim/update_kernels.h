// Fused optimizer kernels: raw-pointer signatures and a small table keyed by
// (update kind, device type). The CPU entries (optim/update_cpu.cpp) are per tensor and
// always present; the CUDA backend (optim/cuda/update.cu) registers multi-tensor kernels
// (one launch per parameter group) and the GradScaler's device kernels. When a device has
// no entry, optimizers fall back to a generic path built from kiln tensor ops.
#pragma once
#include <cstdint>
#include "kiln/core/device.h"
#include "kiln/core/dtype.h"
#include "kiln/optim/multi_tensor_apply.h"
#include "kiln/optim/update_math.h"

namespace kiln::optim {

/// Per-tensor kernels (sgd .. unscale), multi-tensor kernels (*_multi) and the GradScaler's
/// one-thread scale update.
enum class FusedUpdate : uint8_t {
  sgd, adam, rmsprop, unscale, sgd_multi, adam_multi, unscale_multi, scale_update, kCount
};

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

// Multi-tensor kernels: `count` host slots (optim/multi_tensor_apply.h) whose buffers all
// have dtype `dt` (float32 or float64) on the current device; one launch for all of them.
// found_inf (device, may be null): when *found_inf != 0 the whole update is skipped and each
// slot's `skipped` counter (if any) grows by one. inv_scale (device, may be null): the
// gradients are multiplied by it first. Neither is read on the host.
/// SGD over the slots (b0 = momentum_buffer or null).
using SgdMultiKernelFn = void(DType dt, const TensorSlot* slots, int64_t count, const SgdScalars& s,
                              const float* found_inf, const float* inv_scale);
/// Adam/AdamW over the slots (b0 = exp_avg, b1 = exp_avg_sq, b2 = max_exp_avg_sq or null);
/// the bias corrections come from each slot's step (the scalars' step_size is ignored).
using AdamMultiKernelFn = void(DType dt, const TensorSlot* slots, int64_t count, const AdamScalars& s,
                               const float* found_inf, const float* inv_scale);
/// Every slot's g *= *inv_scale; sets *found_inf = 1 when an original value was inf/NaN
/// (never clears it).
using UnscaleMultiKernelFn = void(DType dt, const TensorSlot* slots, int64_t count, float* found_inf,
                                  const float* inv_scale);
/// One thread running amp_update_scale() on device scalars (optim/multi_tensor_apply.h).
using ScaleUpdateKernelFn = void(float* scale, int32_t* growth_tracker, float* inv_scale, float* last_found_inf,
                                 const float* found_inf, double growth_factor, double backoff_factor,
                                 int64_t growth_interval);

/// Stores a fused kernel for (kind, device type).
void register_fused_update(FusedUpdate kind, DeviceType dev, void* fn);
/// The kernel, or nullptr when the device type has none (callers then use tensor ops).
void* fused_update_kernel(FusedUpdate kind, Device dev);
/// Whether the dtype is one the fused kernels handle (float32, float64).
inline bool fused_dtype_ok(DType dt) { return dt == DType::float32 || dt == DType::float64; }

#if defined(KILN_WITH_CUDA)
/// The CUDA kernel of a kind, or nullptr (optim/cuda/update.cu); read once by the table.
void* cuda_optim_kernel(FusedUpdate kind);
#endif

}  // namespace kiln::optim
