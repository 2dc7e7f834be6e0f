// Overflow-checked size arithmetic: the one place kiln multiplies or adds element counts,
// strides, offsets and byte sizes that come from users or files. A result that does not
// fit in int64 is a kiln::Error naming the op and the shape, never a silent wrap-around.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>
#include "kiln/core/error.h"

namespace kiln {

/// v as an int64 when it is a whole number of magnitude at most 2^53 (a count read back
/// from a file, exactly representable in a double); else a kiln::Error "<who>: '<key>'
/// must be a whole number ...". Never an out-of-range float-to-integer conversion.
inline int64_t checked_whole(double v, const std::string& who, const std::string& key) {
  KILN_CHECK(std::isfinite(v) && v == std::floor(v) && std::fabs(v) <= 9007199254740992.0, who, ": '", key,
             "' must be a whole number (at most 2^53), got ", v);
  return int64_t(v);
}

namespace detail {
[[noreturn, gnu::cold]] inline void size_overflow(const char* op, const std::vector<int64_t>& shape, int64_t a,
                                                  const char* sym, int64_t b) {
  throw_error(op, ": shape ", shape_str(shape), " is too large: ", a, sym, b,
              " overflows int64 (expected element counts, strides and byte sizes below 2^63)");
}
}  // namespace detail

/// a * b; throws kiln::Error naming `op` and `shape` when the product overflows int64.
inline int64_t checked_mul(int64_t a, int64_t b, const char* op, const std::vector<int64_t>& shape) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) detail::size_overflow(op, shape, a, " * ", b);
  return r;
}

/// a + b; throws kiln::Error naming `op` and `shape` when the sum overflows int64.
inline int64_t checked_add(int64_t a, int64_t b, const char* op, const std::vector<int64_t>& shape) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) detail::size_overflow(op, shape, a, " + ", b);
  return r;
}

}  // namespace kiln
