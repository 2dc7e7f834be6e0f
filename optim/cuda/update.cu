// CUDA kernels of the optimizers: multi-tensor SGD / Adam / AdamW and GradScaler's
// unscale-and-check (one launch per call for all tensors, PyTorch's multi_tensor_apply),
// and the one-thread device scale update. The per-chunk bodies and per-element math are
// shared with the CPU (optim/multi_tensor_apply.h, optim/update_math.h).
#include <algorithm>
#include <memory>
#include "kiln/core/cuda/runtime.h"
#include "kiln/core/error.h"
#include "kiln/core/tensor.h"
#include "kiln/optim/update_kernels.h"

namespace kiln::optim {
namespace {

constexpr int kThreads = 256;

// ---------------------------------------------------------------- kernels

/// One launch's work list (optim/multi_tensor_apply.h's LaunchPlan), passed by value as
/// the kernel's parameter (CUDA 12.1+ allows up to 32764 bytes of parameters on sm_70 and
/// newer), so a launch needs no host-to-device copy: a copy from pageable memory would make
/// the host wait for the stream, and the optimizer step must not.
struct LaunchTable {
  TensorSlot slots[kLaunchSlots];
  ChunkRef chunks[kLaunchChunks];
  int32_t nchunks = 0;
};
static_assert(sizeof(LaunchTable) + 256 <= 32764, "the launch table must fit the kernel parameter space");

/// Grid-stride over the chunk list: block b runs chunks b, b + gridDim.x, ...
template <class Body>
__global__ void multi_tensor_kernel(const __grid_constant__ LaunchTable t, Body body) {
  for (int32_t c = blockIdx.x; c < t.nchunks; c += gridDim.x) {
    const ChunkRef ch = t.chunks[c];
    body(t.slots[ch.slot], ch, int(threadIdx.x), int(blockDim.x));
  }
}

template <class T>
struct SgdBody {
  SgdScalars s;
  const float* found_inf;
  const float* inv_scale;
  __device__ void operator()(const TensorSlot& slot, const ChunkRef& c, int t, int nt) const {
    sgd_chunk<T>(slot, c, t, nt, s, found_inf, inv_scale);
  }
};

template <class T>
struct AdamBody {
  AdamScalars s;
  const float* found_inf;
  const float* inv_scale;
  __device__ void operator()(const TensorSlot& slot, const ChunkRef& c, int t, int nt) const {
    adam_chunk<T>(slot, c, t, nt, s, found_inf, inv_scale);
  }
};

template <class T>
struct UnscaleBody {
  float* found_inf;
  const float* inv_scale;
  __device__ void operator()(const TensorSlot& slot, const ChunkRef& c, int t, int nt) const {
    unscale_chunk<T>(slot, c, t, nt, found_inf, inv_scale);
  }
};

__global__ void scale_update_kernel(float* scale, int32_t* growth_tracker, float* inv_scale, float* last_found_inf,
                                    const float* found_inf, double growth_factor, double backoff_factor,
                                    int64_t growth_interval) {
  amp_update_scale(scale, growth_tracker, inv_scale, last_found_inf, *found_inf, growth_factor, backoff_factor,
                   growth_interval);
}

// ---------------------------------------------------------------- launchers

/// Launches `body` over every chunk of the slots on the current stream, in as few launches
/// as the table's capacity allows.
template <class Body>
void launch_multi(const TensorSlot* slots, int64_t count, const Body& body) {
  const int dev = cuda::resolve_device(-1);
  const cudaStream_t stream = cuda::current_raw_stream(dev);
  const int max_blocks = cuda::multiprocessor_count(dev) * 8;
  auto table = std::make_unique<LaunchTable>();  // ~30 KB: not on the stack
  for (const LaunchPlan& plan : plan_launches(slots, count)) {
    std::copy(plan.slots.begin(), plan.slots.end(), table->slots);
    std::copy(plan.chunks.begin(), plan.chunks.end(), table->chunks);
    table->nchunks = int32_t(plan.chunks.size());
    multi_tensor_kernel<<<std::min(table->nchunks, max_blocks), kThreads, 0, stream>>>(*table, body);
    KILN_CUDA_CHECK_LAUNCH();
  }
}

void check_dtype(const char* what, DType dt) {
  KILN_CHECK(fused_dtype_ok(dt), what, ": the multi-tensor CUDA kernel takes float32 or float64, got ",
             dtype_name(dt));
}

void sgd_multi_cuda(DType dt, const TensorSlot* slots, int64_t count, const SgdScalars& s, const float* found_inf,
                    const float* inv_scale) {
  check_dtype("SGD", dt);
  if (dt == DType::float32) launch_multi(slots, count, SgdBody<float>{s, found_inf, inv_scale});
  else launch_multi(slots, count, SgdBody<double>{s, found_inf, inv_scale});
}

void adam_multi_cuda(DType dt, const TensorSlot* slots, int64_t count, const AdamScalars& s, const float* found_inf,
                     const float* inv_scale) {
  check_dtype("Adam", dt);
  for (int64_t i = 0; i < count; ++i)
    KILN_CHECK(!s.amsgrad || slots[i].b2, "Adam: amsgrad needs a max_exp_avg_sq buffer");
  if (dt == DType::float32) launch_multi(slots, count, AdamBody<float>{s, found_inf, inv_scale});
  else launch_multi(slots, count, AdamBody<double>{s, found_inf, inv_scale});
}

void unscale_multi_cuda(DType dt, const TensorSlot* slots, int64_t count, float* found_inf, const float* inv_scale) {
  check_dtype("GradScaler.unscale_", dt);
  KILN_CHECK(found_inf && inv_scale, "GradScaler.unscale_: the CUDA kernel needs found_inf and inv_scale");
  if (dt == DType::float32) launch_multi(slots, count, UnscaleBody<float>{found_inf, inv_scale});
  else launch_multi(slots, count, UnscaleBody<double>{found_inf, inv_scale});
}

void scale_update_cuda(float* scale, int32_t* growth_tracker, float* inv_scale, float* last_found_inf,
                       const float* found_inf, double growth_factor, double backoff_factor, int64_t growth_interval) {
  scale_update_kernel<<<1, 1, 0, cuda::current_raw_stream()>>>(scale, growth_tracker, inv_scale, last_found_inf,
                                                               found_inf, growth_factor, backoff_factor,
                                                               growth_interval);
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace

void* cuda_optim_kernel(FusedUpdate kind) {
  switch (kind) {
    case FusedUpdate::sgd_multi: return reinterpret_cast<void*>(&sgd_multi_cuda);
    case FusedUpdate::adam_multi: return reinterpret_cast<void*>(&adam_multi_cuda);
    case FusedUpdate::unscale_multi: return reinterpret_cast<void*>(&unscale_multi_cuda);
    case FusedUpdate::scale_update: return reinterpret_cast<void*>(&scale_update_cuda);
    default: return nullptr;
  }
}

}  // namespace kiln::optim
