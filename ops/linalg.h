// Matrix products: matmul with batch broadcasting (Eigen GEMM on the CPU, transposes
// folded into the GEMM call) and linear (x W^T + b), and the float32 matmul precision
// switch (TF32 on CUDA).
#pragma once
#include <string>
#include "kiln/core/tensor.h"

namespace kiln {

/// torch.matmul semantics: 1-D x 1-D dot, 2-D x 2-D, and batched with broadcast batch dims.
/// Integer tensors (int64, int32, uint8) multiply on the CPU, wrapping on overflow, as
/// PyTorch's do; bool and integer CUDA tensors are refused (PyTorch has no kernel either).
Tensor matmul(const Tensor& a, const Tensor& b);
/// y = x W^T + b for x (..., in), W (out, in), b (out) or undefined. Integer tensors on the
/// CPU as matmul's.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

/// How float32 matmul/linear may compute on CUDA (torch.set_float32_matmul_precision):
///   "highest": strict float32 GEMMs (the default);
///   "high":    cuBLAS may use TF32 tensor cores (10-bit mantissa inputs, float32
///              accumulation; about 1e-3 relative error);
///   "medium":  accepted for PyTorch compatibility and treated like "high" (kiln has no
///              bfloat16-internal float32 GEMM).
/// Anything else throws kiln::Error listing the valid values. Process-wide; the CPU
/// (Eigen) ignores it. Present in CPU-only builds too.
void set_float32_matmul_precision(const std::string& precision);
/// The current setting: "highest", "high" or "medium".
std::string float32_matmul_precision();
/// True when float32 GEMMs may use TF32 ("high" or "medium"); what the CUDA kernels read.
bool float32_matmul_allows_tf32();

}  // namespace kiln
