// The CUDA device allocator: one BlockAllocator (core/cuda/caching_allocator.h) per GPU
// over cudaMalloc/cudaFree, keyed by the calling thread's current stream; registered with
// core as the allocator of DeviceType::CUDA.
#include <cuda_runtime.h>
#include <memory>
#include <mutex>
#include "kiln/core/allocator.h"
#include "kiln/core/cuda/caching_allocator.h"
#include "kiln/core/cuda/check.h"
#include "kiln/core/cuda/runtime.h"

namespace kiln::cuda {
namespace {

struct DeviceCtx {
  int device = 0;
};

void* raw_alloc(void* ctx, size_t nbytes) {
  DeviceGuard g(static_cast<DeviceCtx*>(ctx)->device);
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, nbytes);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // not sticky; clear it
    return nullptr;
  }
  KILN_CUDA_CHECK(e);
  return p;
}

void raw_free(void* ctx, void* p) {
  DeviceGuard g(static_cast<DeviceCtx*>(ctx)->device);
  KILN_CUDA_CHECK(cudaFree(p));
}

void raw_mem_info(void* ctx, size_t* free_b, size_t* total_b) {
  DeviceGuard g(static_cast<DeviceCtx*>(ctx)->device);
  if (cudaMemGetInfo(free_b, total_b) != cudaSuccess) {
    cudaGetLastError();
    *free_b = *total_b = 0;
  }
}

class CudaAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes, Device device) override {
    BlockAllocator& a = pool(device);
    return a.allocate(nbytes, current_raw_stream(device.index));
  }
  void deallocate(void* ptr, size_t, Device device) override {
    // never throws: runs in Storage's destructor, possibly at exit
    if (device.index >= 0 && device.index < kMaxDevices && pools_[device.index]) pools_[device.index]->deallocate(ptr);
  }
  MemoryStats stats(Device device) const override {
    if (device.index < 0 || device.index >= kMaxDevices || !pools_[device.index]) return {};
    return pools_[device.index]->stats();
  }
  void reset_peak(Device device) override {
    if (device.index >= 0 && device.index < kMaxDevices && pools_[device.index]) pools_[device.index]->reset_peak();
  }
  void empty_cache() override {
    for (auto& p : pools_)
      if (p) p->empty_cache();
  }

 private:
  BlockAllocator& pool(Device device) {
    const int n = device_count();
    KILN_CHECK(device.index >= 0 && device.index < n && device.index < kMaxDevices, "cannot allocate on ",
               device.str(), ": ", n == 0 ? "no CUDA device is visible (no GPU or no driver)"
                                          : "this machine has " + std::to_string(n) + " CUDA device(s)");
    std::call_once(once_[device.index], [&] {
      ctx_[device.index].device = device.index;
      RawMemory raw{&raw_alloc, &raw_free, &raw_mem_info, &ctx_[device.index]};
      pools_[device.index] = std::make_unique<BlockAllocator>(raw, device.str());
    });
    return *pools_[device.index];
  }

  std::once_flag once_[kMaxDevices];
  DeviceCtx ctx_[kMaxDevices];
  std::unique_ptr<BlockAllocator> pools_[kMaxDevices];
};

}  // namespace

void register_cuda_allocator() {
  static CudaAllocator* a = new CudaAllocator;  // never destroyed: tensors may outlive statics
  register_allocator(DeviceType::CUDA, a);
}

}  // namespace kiln::cuda
