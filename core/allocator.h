// Allocators and memory statistics. Every Storage gets its bytes from the allocator
// registered for its device type; the CPU one hands out 64-byte-aligned blocks.
#pragma once
#include <cstddef>
#include <cstdint>
#include "kiln/core/device.h"

namespace kiln {

/// Current and peak bytes handed out on one device; reserved_bytes also counts the
/// allocator's rounding and the free blocks it caches for reuse.
struct MemoryStats {
  int64_t current_bytes = 0;
  int64_t peak_bytes = 0;
  int64_t reserved_bytes = 0;
  int64_t num_allocs = 0;   ///< allocations made since start
};

/// Interface a device backend implements. allocate/free must be thread-safe.
class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes, Device device) = 0;
  virtual void deallocate(void* ptr, size_t nbytes, Device device) = 0;
  virtual MemoryStats stats(Device device) const = 0;
  virtual void reset_peak(Device device) = 0;
  /// Releases cached blocks (no-op for uncached allocators).
  virtual void empty_cache() {}
};

/// The allocator for a device type; throws kiln::Error when none is registered
/// (e.g. cuda in a build without the CUDA backend).
Allocator& allocator_for(DeviceType t);
/// Installs the allocator for a device type (the CUDA backend calls this at start-up).
void register_allocator(DeviceType t, Allocator* a);

/// Memory statistics of one device.
MemoryStats memory_stats(Device device = Device::cpu());
/// Sets peak_bytes back to current_bytes.
void reset_peak_memory_stats(Device device = Device::cpu());
/// Returns cached free blocks of the device's allocator to the system.
void empty_cache(Device device = Device::cpu());

}  // namespace kiln
