// One cuBLAS handle per device, created on first use and bound to the current stream on
// every call (ops/cuda/cublas_handle.h).
#include <mutex>
#include "core/cuda/check.h"
#include "core/cuda/runtime.h"
#include "ops/cuda/cublas_handle.h"

namespace kiln::cuda {

cublasHandle_t cublas_handle() {
  static cublasHandle_t handles[kMaxDevices] = {};
  static std::mutex mu;
  const int dev = resolve_device(-1);
  cublasHandle_t h;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!handles[dev]) KILN_CUBLAS_CHECK(cublasCreate(&handles[dev]));
    h = handles[dev];
  }
  KILN_CUBLAS_CHECK(cublasSetStream(h, current_raw_stream(dev)));
  return h;
}

}  // namespace kiln::cuda
