// CUDA runtime API for a build without the CUDA backend: no devices; everything that
// needs one throws kiln::Error saying how to build with CUDA.
#ifndef KILN_WITH_CUDA
#include "kiln/core/cuda.h"
#include "kiln/core/cuda_memory.h"
#include "kiln/core/error.h"
#include "kiln/ops/cuda/ladder.h"

namespace kiln::cuda {
namespace {
[[noreturn]] void no_backend(const char* what) {
  KILN_FAIL("cuda::", what, ": this build of kiln has no CUDA backend (configure with -DKILN_CUDA=ON)");
}
}  // namespace

bool is_available() { return false; }
int device_count() { return 0; }
int probe(int) { no_backend("probe"); }
std::string device_name(int) { no_backend("device_name"); }
DeviceMemory memory_info(int) { no_backend("memory_info"); }
void init_backend() {}  // nothing to register: allocator_for(cuda) then reports the missing backend
void set_device(int) { no_backend("set_device"); }
int current_device() { no_backend("current_device"); }
void synchronize(int) { no_backend("synchronize"); }
DeviceGuard::DeviceGuard(int) { no_backend("DeviceGuard"); }
DeviceGuard::~DeviceGuard() = default;
Stream Stream::create(int) { no_backend("Stream::create"); }
Stream Stream::default_stream(int) { no_backend("Stream::default_stream"); }
void Stream::synchronize() const { no_backend("Stream::synchronize"); }
bool Stream::query() const { no_backend("Stream::query"); }
Stream current_stream(int) { no_backend("current_stream"); }
void set_current_stream(const Stream&) { no_backend("set_current_stream"); }
StreamGuard::StreamGuard(const Stream&) {
  (void)prev_device_;  // kept by the CUDA build's guard (clang: -Wunused-private-field here)
  no_backend("StreamGuard");
}
StreamGuard::~StreamGuard() = default;
Event::~Event() = default;
Event::Event(Event&& o) noexcept : event_(o.event_), device_(o.device_), timing_(o.timing_) {}
Event& Event::operator=(Event&& o) noexcept {
  event_ = o.event_;
  device_ = o.device_;
  timing_ = o.timing_;
  return *this;
}
void Event::record(const Stream&) { no_backend("Event::record"); }
void Event::record() { no_backend("Event::record"); }
void Event::synchronize() const { no_backend("Event::synchronize"); }
bool Event::query() const { no_backend("Event::query"); }
void Event::wait(const Stream&) const { no_backend("Event::wait"); }
float Event::elapsed_ms(const Event&) const { no_backend("Event::elapsed_ms"); }
Tensor pinned_empty(const Shape&, DType) { no_backend("pinned_empty"); }
bool is_pinned(const Tensor&) { return false; }
Tensor checked_values(const Tensor&, int64_t, std::optional<int64_t>, int64_t, const ValueCheck&) {
  no_backend("checked_values");
}
void raise_check_errors(int) {}  // no device, so no device-side check can have failed
uint64_t host_sync_count() { return 0; }
namespace ladder {  // ops/cuda/ladder.h
void gemm_naive(int64_t, int64_t, int64_t, const float*, const float*, float*) { no_backend("ladder::gemm_naive"); }
void gemm_tiled(int64_t, int64_t, int64_t, const float*, const float*, float*) { no_backend("ladder::gemm_tiled"); }
void conv2d_naive(const reference::Conv2dShape&, const float*, const float*, float*) {
  no_backend("ladder::conv2d_naive");
}
}  // namespace ladder
}  // namespace kiln::cuda
#endif
