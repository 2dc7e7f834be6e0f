// One cuBLAS and one cuDNN handle per device, created on first use and bound to the
// current stream on every call (ops/cuda/handles.h).
#include <mutex>
#include "kiln/core/cuda/lazy_library.h"
#include "kiln/core/cuda/check.h"
#include "kiln/core/cuda/runtime.h"
#include "kiln/ops/cuda/handles.h"

namespace kiln::cuda {
namespace {

// handles[device] of one library, created by `create` under a lock, then bound to the stream.
template <class H, class Create, class SetStream>
H handle_for(H (&handles)[kMaxDevices], std::mutex& mu, Create create, SetStream set_stream) {
  const int dev = resolve_device(-1);
  H h;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!handles[dev]) create(&handles[dev]);
    h = handles[dev];
  }
  set_stream(h, current_raw_stream(dev));
  return h;
}

}  // namespace

cublasHandle_t cublas_handle() {
  static cublasHandle_t handles[kMaxDevices] = {};
  static std::mutex mu;
  return handle_for(
      handles, mu, [](cublasHandle_t* h) { KILN_CUBLAS_CHECK(KILN_LAZY(cublas, cublasCreate)(h)); },
      [](cublasHandle_t h, cudaStream_t s) { KILN_CUBLAS_CHECK(KILN_LAZY(cublas, cublasSetStream)(h, s)); });
}

cudnnHandle_t cudnn_handle() {
  static cudnnHandle_t handles[kMaxDevices] = {};
  static std::mutex mu;
  return handle_for(
      handles, mu, [](cudnnHandle_t* h) { KILN_CUDNN_CHECK(KILN_LAZY(cudnn, cudnnCreate)(h)); },
      [](cudnnHandle_t h, cudaStream_t s) { KILN_CUDNN_CHECK(KILN_LAZY(cudnn, cudnnSetStream)(h, s)); });
}

}  // namespace kiln::cuda
