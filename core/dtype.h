// DType: the element types a tensor can hold, and one table of name, size and C++ type.
// float64 is for CPU gradient checks; float16/bfloat16 are 16-bit storage (core/half.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include "kiln/core/half.h"
#include "kiln/core/error.h"

namespace kiln {

// X(enum name, C++ type, printable name)
#define KILN_FORALL_DTYPES(X)         \
  X(float32, float, "float32")        \
  X(float64, double, "float64")       \
  X(float16, Half, "float16")         \
  X(bfloat16, BFloat16, "bfloat16")   \
  X(int64, int64_t, "int64")          \
  X(int32, int32_t, "int32")          \
  X(uint8, uint8_t, "uint8")          \
  X(bool_, bool, "bool")

enum class DType : uint8_t {
#define KILN_X(e, T, n) e,
  KILN_FORALL_DTYPES(KILN_X)
#undef KILN_X
};

/// Element size in bytes.
size_t dtype_size(DType d);
/// "float32", "bfloat16", ...
const char* dtype_name(DType d);
inline std::ostream& operator<<(std::ostream& os, DType d) { return os << dtype_name(d); }
/// True for float32/float64/float16/bfloat16.
inline bool is_floating(DType d) {
  return d == DType::float32 || d == DType::float64 || d == DType::float16 || d == DType::bfloat16;
}
/// True for the 16-bit floats, float16 and bfloat16.
inline bool is_half(DType d) { return d == DType::float16 || d == DType::bfloat16; }
/// The dtype two operands are promoted to (PyTorch-like: float beats int, wider beats narrower).
DType promote_types(DType a, DType b);

/// C++ type -> DType.
template <class T> struct dtype_of;
#define KILN_X(e, T, n) template <> struct dtype_of<T> { static constexpr DType value = DType::e; };
KILN_FORALL_DTYPES(KILN_X)
#undef KILN_X
template <class T> inline constexpr DType dtype_v = dtype_of<T>::value;

}  // namespace kiln

// Calls a templated lambda `f.template operator()<T>()` with the C++ type T of dtype d.
//   KILN_DISPATCH_FLOATING(d, "relu", [&]<class T>() { relu_kernel<T>(...); });
// FLOATING: float32/float64 (compute types on CPU; 16-bit floats are upcast by the op).
// ALL: every dtype.
#define KILN_DISPATCH_CASE(e, T, n) \
  case ::kiln::DType::e: return f_.template operator()<T>();
namespace kiln::detail {
template <class F>
decltype(auto) dispatch_floating(DType d, const char* op, F&& f_) {
  switch (d) {
    case DType::float32: return f_.template operator()<float>();
    case DType::float64: return f_.template operator()<double>();
    default: KILN_FAIL(op, ": no CPU kernel for dtype ", dtype_name(d), " (expected float32 or float64)");
  }
}
template <class F>
decltype(auto) dispatch_all(DType d, const char* op, F&& f_) {
  switch (d) {
    KILN_FORALL_DTYPES(KILN_DISPATCH_CASE)
  }
  KILN_FAIL(op, ": unknown dtype");
}
template <class F>
decltype(auto) dispatch_numeric(DType d, const char* op, F&& f_) {
  switch (d) {
    case DType::float32: return f_.template operator()<float>();
    case DType::float64: return f_.template operator()<double>();
    case DType::int64: return f_.template operator()<int64_t>();
    case DType::int32: return f_.template operator()<int32_t>();
    case DType::uint8: return f_.template operator()<uint8_t>();
    default: KILN_FAIL(op, ": no CPU kernel for dtype ", dtype_name(d),
                       " (expected float32, float64, int64, int32 or uint8)");
  }
}
}  // namespace kiln::detail
#define KILN_DISPATCH_FLOATING(d, op, ...) ::kiln::detail::dispatch_floating(d, op, __VA_ARGS__)
#define KILN_DISPATCH_ALL(d, op, ...) ::kiln::detail::dispatch_all(d, op, __VA_ARGS__)
#define KILN_DISPATCH_NUMERIC(d, op, ...) ::kiln::detail::dispatch_numeric(d, op, __VA_ARGS__)
