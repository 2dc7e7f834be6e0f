// Storage: one block of bytes on one device, owned through its device's allocator.
// Tensors share Storage through shared_ptr; views never copy it.
#pragma once
#include <cstddef>
#include <memory>
#include "core/allocator.h"

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

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
};

}  // namespace kiln
