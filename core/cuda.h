// CUDA runtime API of kiln: devices, streams, events, synchronisation and pinned host
// memory. In a build without the CUDA backend the queries report no devices and the
// rest throws kiln::Error. No CUDA header is needed to use this file.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include "kiln/core/tensor.h"

namespace kiln::cuda {

// ---- devices ----

/// True when the build has the CUDA backend and at least one GPU answers.
bool is_available();
/// Number of visible GPUs (0 without the backend or without a driver).
int device_count();
/// Launches a one-thread kernel on device 0 that writes `value` and reads it back;
/// returns the value read. Throws kiln::Error when no GPU is usable.
int probe(int value);
/// "NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB)"; throws when the device does not exist.
std::string device_name(int device = -1);

/// Registers the CUDA allocator and the device copy with core (idempotent, thread-safe,
/// makes no CUDA call). kiln calls it by itself the first time a CUDA tensor is
/// allocated; nobody needs to call it by hand.
void init_backend();

/// Makes `device` the current device of the calling thread (where kernels run).
void set_device(int device);
/// The current device of the calling thread.
int current_device();
/// Waits until all work on the current device (device = -1) or on `device` is done.
void synchronize(int device = -1);

/// Sets the current device for a scope and restores the previous one on exit.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = -1;
};

// ---- streams ----

/// A CUDA stream of one device: a cheap value handle. The default stream of a device is
/// CUDA's legacy default stream (handle nullptr), which orders itself with every other
/// stream; streams from Stream::create() order themselves with the default stream too
/// (they are created blocking), and live until the process exits, so a handle never
/// dangles (the caching allocator keeps per-stream free lists keyed by it).
class Stream {
 public:
  /// The default stream of device 0.
  Stream() = default;
  /// Wraps an existing cudaStream_t of `device` (nullptr: its default stream).
  Stream(int device, void* handle) : device_(device), handle_(handle) {}
  /// A new stream on `device` (-1: the current device).
  static Stream create(int device = -1);
  /// The default stream of `device` (-1: the current device).
  static Stream default_stream(int device = -1);

  int device() const { return device_; }
  /// The cudaStream_t, as void* so that this header needs no CUDA include.
  void* handle() const { return handle_; }
  bool is_default() const { return handle_ == nullptr; }
  /// Blocks until all work queued on the stream is done.
  void synchronize() const;
  /// True when all work queued on the stream is done.
  bool query() const;
  bool operator==(const Stream&) const = default;

 private:
  int device_ = 0;
  void* handle_ = nullptr;
};

/// The stream kernels and copies of the calling thread go to on `device` (-1: current).
Stream current_stream(int device = -1);
/// Makes `s` the calling thread's current stream for s.device().
void set_current_stream(const Stream& s);

/// Makes a stream (and its device) current for a scope; restores both on exit.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& s);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream prev_stream_;
  int prev_device_ = 0;
};

// ---- events ----

/// A CUDA event: a marker in a stream to wait on or to time work between two markers.
///   cuda::Event start, stop; start.record(); ...; stop.record(); float ms = start.elapsed_ms(stop);
class Event {
 public:
  /// enable_timing = false makes a lighter event for synchronisation only.
  explicit Event(bool enable_timing = true) : timing_(enable_timing) {}
  ~Event();
  Event(Event&& o) noexcept;
  Event& operator=(Event&& o) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  /// Records the event on `s` (the event is created on s's device at its first record).
  void record(const Stream& s);
  /// Records on the current stream of the current device.
  void record();
  /// Blocks until the work before the recorded point is done.
  void synchronize() const;
  /// True when the work before the recorded point is done (or it was never recorded).
  bool query() const;
  /// Makes all later work on `s` wait for this event (no host blocking).
  void wait(const Stream& s) const;
  /// Milliseconds between this event and `end` (both recorded, timing enabled); waits
  /// for `end` to complete first.
  float elapsed_ms(const Event& end) const;
  bool recorded() const { return event_ != nullptr; }

 private:
  void* event_ = nullptr;  // cudaEvent_t
  int device_ = -1;
  bool timing_ = true;
};

// ---- host memory ----

/// An uninitialised CPU tensor in page-locked ("pinned") host memory: copies from it to
/// a GPU run asynchronously on the current stream and at full bus speed. For the batches
/// a DataLoader sends to the GPU. The memory is registered with the driver
/// (cudaHostRegister) and unregistered when the last view of it is gone (after any copy
/// still reading it has finished).
Tensor pinned_empty(const Shape& shape, DType dtype = DType::float32);
/// True when t's storage came from pinned_empty.
bool is_pinned(const Tensor& t);

// ---- checks on the device, and host synchronisations ----

/// The words of a device-side check's error, string literals:
/// "<op>: <value> 70000 is out of range for 65 <range> (...)".
struct ValueCheck {
  const char* op;     ///< "embedding"
  const char* value;  ///< "index"
  const char* range;  ///< "rows of the weight"
};

/// Checks the int64 values of a contiguous GPU tensor on the GPU, without waiting for it:
/// returns a copy in which every value outside [0, size), other than `allowed`, is
/// replaced by `replacement` (so the op reading the copy stays in bounds), and records the
/// first such value on the device. The next host read of that device (a copy to the CPU,
/// `item()`, `synchronize()`) throws kiln::Error naming the op and the value. Ops that
/// take indices or class targets use it so that a training step never waits for the GPU
/// just to validate its inputs; on the CPU they check on the spot instead.
Tensor checked_values(const Tensor& values, int64_t size, std::optional<int64_t> allowed, int64_t replacement,
                      const ValueCheck& what);

/// Throws the error of a device-side check that failed on `device` (-1: current) since
/// the last report. Reads the device only if a check ran since then (a 32-byte copy).
void raise_check_errors(int device = -1);

/// Host synchronisations with a GPU since the process started: copies into host memory
/// and the synchronize() calls of devices, streams and events. A training step that never
/// waits for the GPU leaves it unchanged (tests/cuda/test_cuda_host_sync.cpp).
uint64_t host_sync_count();

}  // namespace kiln::cuda
