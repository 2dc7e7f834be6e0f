// CUDA runtime of kiln: device queries and selection, streams (one default per device
// plus user streams), events, synchronisation, and the backend's start-up registration.
#include <cuda_runtime.h>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <optional>
#include <vector>
#include "kiln/core/cuda.h"
#include "kiln/core/cuda_memory.h"
#include "kiln/core/cuda/runtime.h"
#include "kiln/core/error.h"

namespace kiln::cuda {

// Defined in core/cuda/allocator.cu and core/cuda/copy.cu.
void register_cuda_allocator();
void register_cuda_copy();

namespace {

// ---- kernels ----
__global__ void probe_kernel(int* out, int value) { *out = value; }

// Per-thread current stream of each device (nullptr: the default stream).
thread_local void* tl_stream[kMaxDevices] = {};

int g_device_count = -1;  // cached by device_count()
std::once_flag g_count_once;

}  // namespace

// ---- launchers and runtime calls ----

int device_count() {
  std::call_once(g_count_once, [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();  // clear the "no device" / "no driver" error
      n = 0;
    }
    g_device_count = n;
  });
  return g_device_count;
}

bool is_available() { return device_count() > 0; }

void init_backend() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_cuda_allocator();
    register_cuda_copy();
  });
}

int resolve_device(int device) {
  const int n = device_count();
  KILN_CHECK(n > 0, "CUDA: no CUDA device is available (device_count() is 0: no GPU or no driver)");
  if (device < 0) {
    KILN_CUDA_CHECK(cudaGetDevice(&device));
    return device;
  }
  KILN_CHECK(device < n && device < kMaxDevices, "CUDA: device cuda:", device, " does not exist (",
             n, " CUDA device", n == 1 ? "" : "s", " visible)");
  return device;
}

namespace {
/// A device attribute, read once per device (cache: one slot per device, 0 = not read).
int cached_attribute(std::atomic<int> (&cache)[kMaxDevices], cudaDeviceAttr attr, int device) {
  device = resolve_device(device);
  int v = cache[device].load(std::memory_order_relaxed);
  if (v == 0) {
    KILN_CUDA_CHECK(cudaDeviceGetAttribute(&v, attr, device));
    cache[device].store(v, std::memory_order_relaxed);
  }
  return v;
}
}  // namespace

int multiprocessor_count(int device) {
  static std::atomic<int> cache[kMaxDevices] = {};
  return cached_attribute(cache, cudaDevAttrMultiProcessorCount, device);
}

int max_shared_memory_optin(int device) {
  static std::atomic<int> cache[kMaxDevices] = {};
  return cached_attribute(cache, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
}

std::string device_name(int device) {
  device = resolve_device(device);
  cudaDeviceProp p;
  KILN_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  char buf[320];
  std::snprintf(buf, sizeof buf, "%s (sm_%d%d, %d SMs, %.1f GiB)", p.name, p.major, p.minor,
                p.multiProcessorCount, double(p.totalGlobalMem) / double(1ull << 30));
  return buf;
}

DeviceMemory memory_info(int device) {
  DeviceGuard guard(resolve_device(device));
  DeviceMemory m;
  KILN_CUDA_CHECK(cudaMemGetInfo(&m.free_bytes, &m.total_bytes));
  return m;
}

int probe(int value) {
  KILN_CHECK(is_available(), "cuda::probe: no CUDA device is available");
  int* d = nullptr;
  KILN_CUDA_CHECK(cudaMalloc(&d, sizeof(int)));
  probe_kernel<<<1, 1>>>(d, value);
  cudaError_t e = cudaGetLastError();
  int h = 0;
  if (e == cudaSuccess) e = cudaMemcpy(&h, d, sizeof(int), cudaMemcpyDeviceToHost);
  cudaFree(d);
  KILN_CUDA_CHECK(e);
  return h;
}

void set_device(int device) { KILN_CUDA_CHECK(cudaSetDevice(resolve_device(device))); }

int current_device() { return resolve_device(-1); }

void synchronize(int device) {
  std::optional<DeviceGuard> g;
  if (device >= 0) g.emplace(device);
  note_host_sync();
  KILN_CUDA_CHECK(cudaDeviceSynchronize());
  raise_check_errors(device);
}

DeviceGuard::DeviceGuard(int device) {
  device = resolve_device(device);
  KILN_CUDA_CHECK(cudaGetDevice(&prev_));
  if (prev_ != device) KILN_CUDA_CHECK(cudaSetDevice(device));
}
DeviceGuard::~DeviceGuard() {
  int cur = -1;
  if (prev_ >= 0 && cudaGetDevice(&cur) == cudaSuccess && cur != prev_) cudaSetDevice(prev_);
}

// ---- streams ----

Stream Stream::create(int device) {
  device = resolve_device(device);
  DeviceGuard g(device);
  cudaStream_t s = nullptr;
  KILN_CUDA_CHECK(cudaStreamCreate(&s));  // never destroyed: see core/cuda.h
  return Stream(device, s);
}

Stream Stream::default_stream(int device) { return Stream(resolve_device(device), nullptr); }

void Stream::synchronize() const {
  DeviceGuard g(device_);
  note_host_sync();
  KILN_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(handle_)));
  raise_check_errors(device_);
}

bool Stream::query() const {
  DeviceGuard g(device_);
  cudaError_t e = cudaStreamQuery(static_cast<cudaStream_t>(handle_));
  if (e == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  KILN_CUDA_CHECK(e);
  return true;
}

cudaStream_t current_raw_stream(int device) {
  return static_cast<cudaStream_t>(tl_stream[resolve_device(device)]);
}

Stream current_stream(int device) {
  device = resolve_device(device);
  return Stream(device, tl_stream[device]);
}

void set_current_stream(const Stream& s) { tl_stream[resolve_device(s.device())] = s.handle(); }

StreamGuard::StreamGuard(const Stream& s) {
  prev_device_ = current_device();
  prev_stream_ = current_stream(s.device());
  set_current_stream(s);
  if (s.device() != prev_device_) set_device(s.device());
}
StreamGuard::~StreamGuard() {
  tl_stream[prev_stream_.device()] = prev_stream_.handle();
  int cur = -1;
  if (cudaGetDevice(&cur) == cudaSuccess && cur != prev_device_) cudaSetDevice(prev_device_);
}

// ---- events ----

Event::~Event() {
  if (event_) cudaEventDestroy(static_cast<cudaEvent_t>(event_));  // errors ignored (may run at exit)
}
Event::Event(Event&& o) noexcept : event_(o.event_), device_(o.device_), timing_(o.timing_) { o.event_ = nullptr; }
Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    if (event_) cudaEventDestroy(static_cast<cudaEvent_t>(event_));
    event_ = o.event_;
    device_ = o.device_;
    timing_ = o.timing_;
    o.event_ = nullptr;
  }
  return *this;
}

void Event::record(const Stream& s) {
  DeviceGuard g(s.device());
  if (!event_) {
    cudaEvent_t e = nullptr;
    KILN_CUDA_CHECK(cudaEventCreateWithFlags(&e, timing_ ? cudaEventDefault : cudaEventDisableTiming));
    event_ = e;
    device_ = s.device();
  }
  KILN_CHECK(device_ == s.device(), "cuda::Event::record: the event belongs to cuda:", device_,
             " but the stream to cuda:", s.device());
  KILN_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event_), static_cast<cudaStream_t>(s.handle())));
}
void Event::record() { record(current_stream()); }

void Event::synchronize() const {
  if (!event_) return;
  note_host_sync();
  KILN_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event_)));
}

bool Event::query() const {
  if (!event_) return true;
  cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(event_));
  if (e == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  KILN_CUDA_CHECK(e);
  return true;
}

void Event::wait(const Stream& s) const {
  if (!event_) return;
  DeviceGuard g(s.device());
  KILN_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(s.handle()), static_cast<cudaEvent_t>(event_), 0));
}

float Event::elapsed_ms(const Event& end) const {
  KILN_CHECK(event_ && end.event_, "cuda::Event::elapsed_ms: both events must have been recorded");
  KILN_CHECK(timing_ && end.timing_, "cuda::Event::elapsed_ms: both events need enable_timing = true");
  end.synchronize();
  float ms = 0;
  KILN_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(event_), static_cast<cudaEvent_t>(end.event_)));
  return ms;
}

}  // namespace kiln::cuda
