// CPU allocator (64-byte aligned, caching large blocks, with byte counters) and the
// per-device-type allocator registry.
#include "kiln/core/allocator.h"
#include "kiln/core/storage.h"
#include "kiln/core/cuda.h"
#include "kiln/core/error.h"
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

namespace kiln {
namespace {

// Blocks of 64 KiB and more are rounded to one of four size classes per power of two and,
// when freed, kept on a free list for reuse (up to a cap): a training step frees and
// re-allocates the same large activation sizes every iteration, and going back to the OS
// each time costs a page fault per 4 KiB touched. Smaller blocks go straight to malloc.
class CpuAllocator final : public Allocator {
 public:
  static constexpr size_t kCacheMin = size_t(64) << 10;

  CpuAllocator() {
    const char* env = std::getenv("KILN_CPU_CACHE_MB");
    if (env) cap_ = size_t(std::strtoull(env, nullptr, 10)) << 20;
  }

  static size_t round_size(size_t nbytes) {
    size_t n = (nbytes + 63) / 64 * 64;
    if (n == 0) n = 64;
    if (n < kCacheMin) return n;
    size_t p = size_t(1) << (63 - __builtin_clzll(n));  // largest power of two <= n
    size_t step = p / 4;
    return (n + step - 1) / step * step;
  }

  void* allocate(size_t nbytes, Device) override {
    size_t n = round_size(nbytes);
    void* p = nullptr;
    if (n >= kCacheMin) {
      std::lock_guard<std::mutex> l(mu_);
      auto it = free_.find(n);
      if (it != free_.end() && !it->second.empty()) {
        p = it->second.back();
        it->second.pop_back();
        cached_ -= n;
      }
    }
    if (!p) {
      p = std::aligned_alloc(64, n);
      if (!p) {
        empty_cache();
        p = std::aligned_alloc(64, n);
      }
      if (!p) KILN_FAIL("cpu allocator: out of memory allocating ", nbytes, " bytes");
    }
    int64_t cur = current_.fetch_add(int64_t(nbytes)) + int64_t(nbytes);
    int64_t peak = peak_.load();
    while (cur > peak && !peak_.compare_exchange_weak(peak, cur)) {}
    allocs_.fetch_add(1);
    in_use_rounded_.fetch_add(int64_t(n));
    return p;
  }
  void deallocate(void* p, size_t nbytes, Device) override {
    size_t n = round_size(nbytes);
    current_.fetch_sub(int64_t(nbytes));
    in_use_rounded_.fetch_sub(int64_t(n));
    if (n >= kCacheMin) {
      std::lock_guard<std::mutex> l(mu_);
      if (cached_ + n <= cap_) {
        free_[n].push_back(p);
        cached_ += n;
        return;
      }
    }
    std::free(p);
  }
  MemoryStats stats(Device) const override {
    MemoryStats s;
    s.current_bytes = current_.load();
    s.peak_bytes = peak_.load();
    {
      std::lock_guard<std::mutex> l(mu_);
      s.reserved_bytes = in_use_rounded_.load() + int64_t(cached_);
    }
    s.num_allocs = allocs_.load();
    return s;
  }
  void reset_peak(Device) override { peak_.store(current_.load()); }
  void empty_cache() override {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [n, v] : free_)
      for (void* p : v) std::free(p);
    free_.clear();
    cached_ = 0;
  }

 private:
  std::atomic<int64_t> current_{0}, peak_{0}, allocs_{0}, in_use_rounded_{0};
  mutable std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  size_t cached_ = 0;
  size_t cap_ = size_t(2) << 30;  // 2 GiB unless KILN_CPU_CACHE_MB says otherwise
};

Allocator* g_allocators[kNumDeviceTypes] = {nullptr, nullptr};

}  // namespace

Allocator& allocator_for(DeviceType t) {
  static CpuAllocator* cpu = new CpuAllocator;  // never destroyed: tensors may outlive statics
  if (t == DeviceType::CPU) return *cpu;
  Allocator* a = g_allocators[int(t)];
  if (!a && t == DeviceType::CUDA) {  // the CUDA backend registers itself on first use
    cuda::init_backend();
    a = g_allocators[int(t)];
  }
  KILN_CHECK(a != nullptr, "no allocator for device type ", device_type_name(t),
             ": this build of kiln has no CUDA backend or no GPU was initialised");
  return *a;
}

void register_allocator(DeviceType t, Allocator* a) { g_allocators[int(t)] = a; }

MemoryStats memory_stats(Device device) { return allocator_for(device.type).stats(device); }
void reset_peak_memory_stats(Device device) { allocator_for(device.type).reset_peak(device); }
void empty_cache(Device device) { allocator_for(device.type).empty_cache(); }

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  data_ = allocator_for(device.type).allocate(nbytes, device);
}
Storage::~Storage() { allocator_for(device_.type).deallocate(data_, nbytes_, device_); }

}  // namespace kiln
