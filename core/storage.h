// Storage: one block of bytes on one device, owned through its device's allocator.
// Tensors share Storage through shared_ptr; views never copy it.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include "kiln/core/allocator.h"

namespace kiln {

class Storage {
 public:
  /// Allocates nbytes on device (uninitialised).
  Storage(size_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

  /// How many in-place changes were made to these bytes (PyTorch's `_version`). Storage
  /// is shared by a tensor, its views and its detach()es, so they share the counter.
  /// Autograd saves it with each tensor a backward reads and checks it before running.
  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> version_{0};
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
};

}  // namespace kiln
