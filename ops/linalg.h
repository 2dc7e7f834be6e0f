// Matrix products: matmul with batch broadcasting (Eigen GEMM on the CPU, transposes
// folded into the GEMM call) and linear (x W^T + b).
#pragma once
#include "core/tensor.h"

namespace kiln {

/// torch.matmul semantics: 1-D x 1-D dot, 2-D x 2-D, and batched with broadcast batch dims.
Tensor matmul(const Tensor& a, const Tensor& b);
/// y = x W^T + b for x (..., in), W (out, in), b (out) or undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace kiln
