// torch.finfo for kiln's floating dtypes: the machine epsilon, the smallest normal number and
// the most negative finite value, as doubles (float32 for any other dtype).
#pragma once
#include <limits>
#include "kiln/core/dtype.h"

namespace kiln {

/// torch.finfo(dt).eps: 2^-52, 2^-23, 2^-10 (float16), 2^-7 (bfloat16).
inline double finfo_eps(DType dt) {
  switch (dt) {
    case DType::float64: return std::numeric_limits<double>::epsilon();
    case DType::float16: return 0.0009765625;
    case DType::bfloat16: return 0.0078125;
    default: return double(std::numeric_limits<float>::epsilon());
  }
}
/// torch.finfo(dt).min.
inline double finfo_min(DType dt) {
  switch (dt) {
    case DType::float64: return std::numeric_limits<double>::lowest();
    case DType::float16: return -65504.0;
    case DType::bfloat16: return -3.3895313892515355e38;
    default: return double(std::numeric_limits<float>::lowest());
  }
}
/// torch.finfo(dt).tiny, the smallest normal number.
inline double finfo_tiny(DType dt) {
  switch (dt) {
    case DType::float64: return std::numeric_limits<double>::min();
    case DType::float16: return 6.103515625e-05;
    default: return double(std::numeric_limits<float>::min());  // float32 and bfloat16
  }
}

}  // namespace kiln
