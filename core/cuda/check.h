// Error checks for CUDA runtime, cuBLAS and cuDNN calls (CUDA sources only).
// A failing call throws kiln::Error naming the call, the library's error string, the
// file and the line:  KILN_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, kind, stream));
#pragma once
#include <cuda_runtime.h>
#include "kiln/core/cuda/lazy_library.h"
#include "kiln/core/error.h"

namespace kiln::cuda::detail {

/// Throws for a failed CUDA runtime call. The error is cleared first (cudaGetLastError)
/// so that a recoverable failure (out of memory, bad argument) does not stick to the
/// next call.
[[noreturn]] inline void throw_cuda_error(cudaError_t e, const char* call, const char* file, int line) {
  cudaGetLastError();
  ::kiln::detail::throw_error("CUDA error: ", call, " failed with ", cudaGetErrorName(e), " (",
                              cudaGetErrorString(e), ") at ", file, ":", line);
}

/// Throws for a failed cuBLAS / cuDNN call (library name, status code and its string).
[[noreturn]] inline void throw_library_error(const char* lib, int status, const char* what, const char* call,
                                             const char* file, int line) {
  ::kiln::detail::throw_error(lib, " error: ", call, " failed with status ", status, " (", what, ") at ",
                              file, ":", line);
}

}  // namespace kiln::cuda::detail

/// Checks a CUDA runtime call.
#define KILN_CUDA_CHECK(call)                                                        \
  do {                                                                               \
    const cudaError_t kiln_e_ = (call);                                              \
    if (kiln_e_ != cudaSuccess)                                                      \
      ::kiln::cuda::detail::throw_cuda_error(kiln_e_, #call, __FILE__, __LINE__);    \
  } while (0)

/// Checks the launch just made (put right after every <<<...>>>).
#define KILN_CUDA_CHECK_LAUNCH() KILN_CUDA_CHECK(cudaGetLastError())

/// Checks a cuBLAS / cuBLASLt call (include <cublas_v2.h> or <cublasLt.h> first).
#define KILN_CUBLAS_CHECK(call)                                                               \
  do {                                                                                        \
    const cublasStatus_t kiln_s_ = (call);                                                    \
    if (kiln_s_ != CUBLAS_STATUS_SUCCESS)                                                     \
      ::kiln::cuda::detail::throw_library_error("cuBLAS", int(kiln_s_),                      \
                                                KILN_LAZY(cublas, cublasGetStatusString)(kiln_s_), #call, \
                                                __FILE__, __LINE__);                          \
  } while (0)

/// Checks a cuDNN call (include <cudnn.h> first).
#define KILN_CUDNN_CHECK(call)                                                                \
  do {                                                                                        \
    const cudnnStatus_t kiln_s_ = (call);                                                     \
    if (kiln_s_ != CUDNN_STATUS_SUCCESS)                                                      \
      ::kiln::cuda::detail::throw_library_error("cuDNN", int(kiln_s_),                       \
                                                KILN_LAZY(cudnn, cudnnGetErrorString)(kiln_s_), #call, \
                                                __FILE__, __LINE__);                          \
  } while (0)
