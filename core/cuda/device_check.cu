// Checks of indices and class targets on the GPU (core/cuda.h: checked_values), and the
// count of host synchronisations.
//
// A check on the host would copy the values to the CPU and wait for the GPU on every
// training step. Here a kernel copies the values, replaces each bad one (so the op that
// reads the copy stays in bounds) and records the first bad one in a small per-device
// record; the host reads the record only at its next synchronisation with that device
// (a copy into host memory, synchronize()), and throws kiln::Error there with the op, the
// value and the range.
#include <cuda_runtime.h>
#include <atomic>
#include <mutex>
#include <string>
#include <vector>
#include "kiln/core/cuda.h"
#include "kiln/core/cuda/check.h"
#include "kiln/core/cuda/index_math.h"
#include "kiln/core/cuda/runtime.h"

namespace kiln::cuda {
namespace {

// The first bad value a check found on a device; site 0: none.
struct CheckRecord {
  int site;
  int unused;
  long long value, size, allowed;
  int has_allowed, unused2;
};

struct DeviceSlot {
  CheckRecord* dev = nullptr;   // device memory, zeroed
  CheckRecord* host = nullptr;  // pinned, the copy the host reads
  std::atomic<bool> pending{false};  // a check ran since the last read
};

DeviceSlot g_slots[kMaxDevices];
std::mutex g_mu;                   // guards the slots' allocation and the sites
std::vector<ValueCheck> g_sites;   // site s is g_sites[s - 1]
std::atomic<uint64_t> g_host_syncs{0};

int site_of(const ValueCheck& w) {
  std::lock_guard<std::mutex> l(g_mu);
  for (size_t i = 0; i < g_sites.size(); ++i)
    if (g_sites[i].op == w.op && g_sites[i].value == w.value && g_sites[i].range == w.range) return int(i) + 1;
  g_sites.push_back(w);
  return int(g_sites.size());
}

CheckRecord* record_on(int device) {
  std::lock_guard<std::mutex> l(g_mu);
  DeviceSlot& s = g_slots[device];
  if (!s.dev) {
    KILN_CUDA_CHECK(cudaMallocHost(&s.host, sizeof(CheckRecord)));
    *s.host = CheckRecord{};
    KILN_CUDA_CHECK(cudaMalloc(&s.dev, sizeof(CheckRecord)));
    KILN_CUDA_CHECK(cudaMemset(s.dev, 0, sizeof(CheckRecord)));
  }
  return s.dev;
}

__global__ void check_values_kernel(const int64_t* in, int64_t* out, int64_t n, int64_t size, int has_allowed,
                                    int64_t allowed, int64_t replacement, int site, CheckRecord* rec) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t v = in[i];
    const bool bad = (v < 0 || v >= size) && !(has_allowed && v == allowed);
    out[i] = bad ? replacement : v;
    if (bad && atomicCAS(&rec->site, 0, site) == 0) {  // the first bad value wins
      rec->value = v;
      rec->size = size;
      rec->allowed = allowed;
      rec->has_allowed = has_allowed;
    }
  }
}

}  // namespace

void note_host_sync() { g_host_syncs.fetch_add(1, std::memory_order_relaxed); }

uint64_t host_sync_count() { return g_host_syncs.load(std::memory_order_relaxed); }

Tensor checked_values(const Tensor& values, int64_t size, std::optional<int64_t> allowed, int64_t replacement,
                      const ValueCheck& what) {
  KILN_CHECK(values.device().is_cuda() && values.dtype() == DType::int64 && values.is_contiguous(), what.op,
             ": checked_values takes a contiguous int64 tensor on a GPU, got ",
             dtype_name(values.dtype()), " on ", values.device().str(), " with shape ", shape_str(values.shape()),
             values.is_contiguous() ? "" : " (not contiguous)");
  const int device = values.device().index;
  DeviceGuard g(device);
  Tensor out = Tensor::empty(values.shape(), DType::int64, values.device());
  const int64_t n = values.numel();
  if (n == 0) return out;
  const int site = site_of(what);
  CheckRecord* rec = record_on(device);
  const LaunchConfig lc = launch_config(n, int64_t(multiprocessor_count(-1)) * 8);
  check_values_kernel<<<lc.grid, lc.block, 0, current_raw_stream(-1)>>>(
      values.data<int64_t>(), out.data<int64_t>(), n, size, allowed.has_value() ? 1 : 0, allowed.value_or(0),
      replacement, site, rec);
  KILN_CUDA_CHECK_LAUNCH();
  g_slots[device].pending.store(true);
  return out;
}

void raise_check_errors(int device) {
  if (device_count() == 0) return;  // no device, so no check can have run
  device = resolve_device(device);
  DeviceSlot& s = g_slots[device];
  if (!s.pending.exchange(false)) return;
  DeviceGuard g(device);
  // cudaMemcpy on the legacy default stream waits for every (blocking) stream's checks
  KILN_CUDA_CHECK(cudaMemcpy(s.host, s.dev, sizeof(CheckRecord), cudaMemcpyDeviceToHost));
  const CheckRecord r = *s.host;
  if (r.site == 0) return;
  KILN_CUDA_CHECK(cudaMemset(s.dev, 0, sizeof(CheckRecord)));  // reported once
  s.host->site = 0;
  ValueCheck w;
  {
    std::lock_guard<std::mutex> l(g_mu);
    w = g_sites[size_t(r.site - 1)];
  }
  const std::string also = r.has_allowed ? ", or " + std::to_string(r.allowed) : std::string();
  KILN_FAIL(w.op, ": ", w.value, " ", r.value, " is out of range for ", r.size, " ", w.range, " (expected 0 <= ",
            w.value, " < ", r.size, also, "; found on cuda:", device,
            " by a device-side check and reported at the first host read after the op)");
}

}  // namespace kiln::cuda
