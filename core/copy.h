// Copies between tensors of any dtype, layout and (through a registered hook) device.
#pragma once
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>
#include "kiln/core/tensor.h"

namespace kiln {

/// dst <- src converted to dst's dtype. Shapes must be equal (broadcast src first).
/// CPU<->CPU is done here; any CUDA side goes through the hook the CUDA backend registers.
void copy_tensor(const Tensor& dst, const Tensor& src);
/// Refuses an in-place write (op: copy_, add_, mul_) to a tensor whose elements share memory
/// (Tensor::has_internal_overlap, an expanded tensor), naming op, shape and strides.
void check_no_internal_overlap(const Tensor& t, const char* op);

/// True for the 16-bit float storage types (Half, BFloat16).
template <class T>
inline constexpr bool kIs16 = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

/// Magnitude bits (bits & 0x7fff) of +inf in a 16-bit type: a value is finite below them.
template <class T>
inline constexpr uint16_t kInfBits16 = std::is_same_v<T, Half> ? 0x7c00 : 0x7f80;

/// True when the n 16-bit values at p are all finite (a max over their magnitude bits, which
/// vectorises). Kernels that only select values (ReLU, max pooling's gradient) work on the
/// bits of finite chunks and take the float32 path, with its NaN rules, for the others.
template <class T>
bool all_finite16(const T* p, int64_t n) {
  uint16_t m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max<uint16_t>(m, p[i].bits & 0x7fff);
  return m < kInfBits16<T>;
}

/// dst[0, n) = src[0, n) converted between float32 and float16 / bfloat16 on the CPU: the
/// bits of Tensor::to (16 values per step where the build has AVX-512, 8 with AVX2). For
/// kernels that keep 16-bit storage and compute in float32 a chunk at a time.
void convert_floats(const float* src, Half* dst, int64_t n);
void convert_floats(const float* src, BFloat16* dst, int64_t n);
void convert_floats(const Half* src, float* dst, int64_t n);
void convert_floats(const BFloat16* src, float* dst, int64_t n);

/// The n values at src as T: src itself when X is T, else (a 16-bit X, T float) widened
/// into buf, which grows as needed (a kernel's per-thread row buffer).
template <class T, class X>
const T* widened(const X* src, int64_t n, std::vector<T>& buf) {
  if constexpr (std::is_same_v<X, T>) {
    return src;
  } else {
    if (int64_t(buf.size()) < n) buf.resize(size_t(n));
    convert_floats(src, buf.data(), n);
    return buf.data();
  }
}

/// Signature of the CUDA backend's copy (host<->device, device<->device, with casts).
using DeviceCopyFn = void (*)(const Tensor& dst, const Tensor& src);
void register_device_copy(DeviceCopyFn fn);

/// Signature of the CUDA backend's range fill: dst[i] = start + i * step, computed in
/// float64 and converted to dst's dtype (dst contiguous). fill (step 0) and arange use it,
/// so a device tensor is filled by a kernel with nothing uploaded.
using DeviceRangeFn = void (*)(const Tensor& dst, double start, double step);
void register_device_range(DeviceRangeFn fn);

/// Fills a contiguous device tensor through the registered range fill; false when no
/// backend registered one (the caller then fills another way).
bool fill_range_on_device(const Tensor& dst, double start, double step);

}  // namespace kiln
