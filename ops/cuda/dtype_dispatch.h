// dtype -> C++ storage type for the GPU kernels: calls f.template operator()<T>() with
// T = float, double, Half, BFloat16 (FLOAT), plus int64_t, int32_t, uint8_t (NUMERIC),
// plus bool stored as uint8_t (ALL). A dtype outside the set is a kiln::Error naming
// the op. Host code of .cu files.
#pragma once
#include <cstdint>
#include "kiln/core/dtype.h"

namespace kiln::cuda {

template <class F>
void dispatch_float(DType d, const char* op, F&& f) {
  switch (d) {
    case DType::float32: return f.template operator()<float>();
    case DType::float64: return f.template operator()<double>();
    case DType::float16: return f.template operator()<Half>();
    case DType::bfloat16: return f.template operator()<BFloat16>();
    default:
      KILN_FAIL(op, ": no CUDA kernel for dtype ", dtype_name(d), " (expected float32, float64, float16 or bfloat16)");
  }
}

template <class F>
void dispatch_int(DType d, const char* op, F&& f) {
  switch (d) {
    case DType::int64: return f.template operator()<int64_t>();
    case DType::int32: return f.template operator()<int32_t>();
    case DType::uint8: return f.template operator()<uint8_t>();
    default: KILN_FAIL(op, ": no CUDA kernel for dtype ", dtype_name(d), " (expected int64, int32 or uint8)");
  }
}

template <class F>
void dispatch_numeric(DType d, const char* op, F&& f) {
  if (is_floating(d)) return dispatch_float(d, op, f);
  KILN_CHECK(d != DType::bool_, op, ": no CUDA kernel for dtype bool");
  dispatch_int(d, op, f);
}

template <class F>
void dispatch_all(DType d, const char* op, F&& f) {
  if (d == DType::bool_) return f.template operator()<uint8_t>();
  dispatch_numeric(d, op, f);
}

}  // namespace kiln::cuda
