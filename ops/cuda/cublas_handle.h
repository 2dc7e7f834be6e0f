// The per-device cuBLAS handle shared by the CUDA kernels that call cuBLAS (linalg, the
// attention GEMMs of nn.cu). CUDA sources only.
#pragma once
#include <cublas_v2.h>

namespace kiln::cuda {

/// The current device's cuBLAS handle (created on first use, kept for the process), bound
/// to the calling thread's current stream.
cublasHandle_t cublas_handle();

}  // namespace kiln::cuda
