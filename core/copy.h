// Copies between tensors of any dtype, layout and (through a registered hook) device.
#pragma once
#include "core/tensor.h"

namespace kiln {

/// dst <- src converted to dst's dtype. Shapes must be equal (broadcast src first).
/// CPU<->CPU is done here; any CUDA side goes through the hook the CUDA backend registers.
void copy_tensor(const Tensor& dst, const Tensor& src);

/// Signature of the CUDA backend's copy (host<->device, device<->device, with casts).
using DeviceCopyFn = void (*)(const Tensor& dst, const Tensor& src);
void register_device_copy(DeviceCopyFn fn);

}  // namespace kiln
