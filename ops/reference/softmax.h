// The reference softmax and layer norm over the last dimension of row-major rows: the
// formulas, one row at a time, in double. kiln's CPU and CUDA kernels (ops/cpu/reduce.cpp,
// ops/cpu/norm.cpp, ops/cuda/reduce.cu, ops/cuda/norm.cu) fuse, vectorise and split these
// over threads; this is what they compute. Oracles of their tests.
#pragma once
#include <cmath>
#include <cstdint>

namespace kiln::reference {

/// y[r][j] = exp(x[r][j] - max_j x[r]) / sum_j exp(x[r][j] - max_j x[r]) for rows r < R of
/// length L (subtracting the row's maximum changes nothing mathematically and keeps exp
/// from overflowing). log_softmax when `log`: x - max - log(sum).
template <class T>
void softmax(int64_t R, int64_t L, const T* x, T* y, bool log = false) {
  for (int64_t r = 0; r < R; ++r) {
    const T* xr = x + r * L;
    double m = -INFINITY;
    for (int64_t j = 0; j < L; ++j) m = std::fmax(m, double(xr[j]));
    double s = 0;
    for (int64_t j = 0; j < L; ++j) s += std::exp(double(xr[j]) - m);
    for (int64_t j = 0; j < L; ++j)
      y[r * L + j] = T(log ? double(xr[j]) - m - std::log(s) : std::exp(double(xr[j]) - m) / s);
  }
}

/// y[r][j] = (x[r][j] - mean_r) / sqrt(var_r + eps) * weight[j] + bias[j] for rows of length
/// L, var the biased variance (divided by L, as PyTorch's layer_norm); weight and bias may
/// be null (1 and 0).
template <class T>
void layer_norm(int64_t R, int64_t L, const T* x, const T* weight, const T* bias, double eps, T* y) {
  for (int64_t r = 0; r < R; ++r) {
    const T* xr = x + r * L;
    double mean = 0, var = 0;
    for (int64_t j = 0; j < L; ++j) mean += double(xr[j]);
    mean /= double(L);
    for (int64_t j = 0; j < L; ++j) var += (double(xr[j]) - mean) * (double(xr[j]) - mean);
    var /= double(L);
    const double inv = 1.0 / std::sqrt(var + eps);
    for (int64_t j = 0; j < L; ++j)
      y[r * L + j] = T((double(xr[j]) - mean) * inv * (weight ? double(weight[j]) : 1.0) + (bias ? double(bias[j]) : 0.0));
  }
}

}  // namespace kiln::reference
