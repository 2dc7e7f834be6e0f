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

/// The C functions behind two cuBLAS names that its header also overloads in C++ (for
/// KILN_LAZY_AS, core/cuda/lazy_library.h).
using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                  const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                                  cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
using GemmStridedBatchedEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                                const void*, const void*, cudaDataType, int, long long, const void*,
                                                cudaDataType, int, long long, const void*, void*, cudaDataType, int,
                                                long long, int, cublasComputeType_t, cublasGemmAlgo_t);

}  // namespace kiln::cuda
