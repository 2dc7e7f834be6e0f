// Shared helpers of the CUDA parity tests: whether a GPU is there (test cases take
// `* doctest::skip(kNoGpu)`), and the comparison of a CUDA result with the CPU reference.
#pragma once
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>
#include "kiln/kiln.h"

namespace kiln::test {

inline const bool kNoGpu = !cuda::is_available();
inline const Device kGpu = Device::cuda(0);

/// How compare() scales its tolerance: per element (rtol * (1 + |ref|)), or by the largest
/// finite |ref| (rtol * max|ref|: for sums of many terms, whose small elements carry the
/// absolute error of the large ones).
enum class Scale { element, max };

/// "" when `got` (on the GPU) matches `ref` (CPU) within rtol, else what differs first:
/// definedness, shape, dtype, device, or the first element out of tolerance. NaN equals NaN.
inline std::string compare(const Tensor& got, const Tensor& ref, double rtol, Scale scale_by = Scale::element) {
  if (!got.defined() || !ref.defined()) return got.defined() == ref.defined() ? "" : "one side is undefined";
  if (got.shape() != ref.shape()) return "shape " + shape_str(got.shape()) + " vs " + shape_str(ref.shape());
  if (got.dtype() != ref.dtype()) return std::string("dtype ") + dtype_name(got.dtype()) + " vs " + dtype_name(ref.dtype());
  if (!got.device().is_cuda()) return "the result is not on the GPU";
  const std::vector<double> g = got.to_vector<double>(), r = ref.to_vector<double>();
  double scale = 1e-6;
  if (scale_by == Scale::max)
    for (double v : r)
      if (std::isfinite(v)) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < r.size(); ++i) {
    if (std::isnan(g[i]) && std::isnan(r[i])) continue;
    const double tol = scale_by == Scale::max ? rtol * scale : rtol * (1.0 + std::fabs(r[i]));
    if (!(std::fabs(g[i] - r[i]) <= tol))
      return "element " + std::to_string(i) + ": cuda " + std::to_string(g[i]) + " vs cpu " + std::to_string(r[i]) +
             " (tolerance " + std::to_string(tol) + ")";
  }
  return "";
}

}  // namespace kiln::test
