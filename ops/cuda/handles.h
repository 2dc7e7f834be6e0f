// The per-device cuBLAS and cuDNN handles shared by the CUDA kernels that call those
// libraries (linalg and the attention GEMMs; conv2d and batch norm). CUDA sources only.
#pragma once
#include <cublas_v2.h>
#include <cudnn.h>

namespace kiln::cuda {

/// The current device's cuBLAS handle (created on first use, kept for the process), bound
/// to the calling thread's current stream.
cublasHandle_t cublas_handle();
/// The current device's cuDNN handle, likewise.
cudnnHandle_t cudnn_handle();

}  // namespace kiln::cuda
