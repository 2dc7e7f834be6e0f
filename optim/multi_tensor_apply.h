// Multi-tensor optimizer launches (PyTorch's multi_tensor_apply): the tensor slots and
// chunk list of one launch, and the per-chunk bodies the CUDA kernels (optim/cuda/update.cu)
// run for each block. __host__ __device__ so tests/cuda/test_cuda_multi_tensor_index.cpp
// drives the same code over an emulated grid of (block, thread) indices on the CPU.
#pragma once
#include <cfloat>
#include <cstdint>
#include <vector>
#include "kiln/core/macros.h"
#include "kiln/optim/update_math.h"

namespace kiln::optim {

/// One tensor of a multi-tensor launch: contiguous buffers of `n` elements of the launch's
/// dtype (null where the update does not use them) and its update counter.
struct TensorSlot {
  void* p = nullptr;     ///< parameter (n); unused by unscale
  void* g = nullptr;     ///< gradient (n)
  void* b0 = nullptr;    ///< SGD momentum_buffer | Adam exp_avg
  void* b1 = nullptr;    ///< Adam exp_avg_sq
  void* b2 = nullptr;    ///< Adam max_exp_avg_sq (amsgrad)
  int64_t n = 0;
  int64_t step = 0;      ///< the host's update count of this parameter, this step included
  int32_t first = 0;     ///< SGD: the momentum buffer was created for this step
  float* skipped = nullptr;  ///< device counter of this parameter's skipped steps, or null
};

/// A block's unit of work: elements [begin, begin + chunk) of slot `slot` (clipped to n).
struct ChunkRef {
  int64_t slot = 0;
  int64_t begin = 0;
};

/// Elements per chunk (256 threads x 128 elements).
constexpr int64_t kMultiTensorChunk = 32768;

/// Capacity of one launch's table (optim/cuda/update.cu passes it by value as the kernel's
/// parameter, at most 32764 bytes): 64 slots and 1600 chunks (52 M elements).
constexpr int kLaunchSlots = 64, kLaunchChunks = 1600;

/// One launch: its slots, and its chunks (`slot` indexes this launch's slots).
struct LaunchPlan {
  std::vector<TensorSlot> slots;
  std::vector<ChunkRef> chunks;
};

/// Splits the slots into ceil(n / chunk) chunks each, in order, packed into as few
/// launches as the capacities allow. A slot whose chunks do not all fit continues in the
/// next launch (its chunk with begin 0, which counts a skipped step, appears exactly once).
inline std::vector<LaunchPlan> plan_launches(const TensorSlot* slots, int64_t count, int max_slots = kLaunchSlots,
                                             int max_chunks = kLaunchChunks, int64_t chunk = kMultiTensorChunk) {
  std::vector<LaunchPlan> plans(1);
  for (int64_t s = 0; s < count; ++s)
    for (int64_t begin = 0; begin < slots[s].n; begin += chunk) {
      LaunchPlan* p = &plans.back();
      if (int(p->chunks.size()) == max_chunks || (begin == 0 && int(p->slots.size()) == max_slots))
        p = &plans.emplace_back();
      if (p->chunks.empty() || begin == 0) p->slots.push_back(slots[s]);  // the slot is not in this launch yet
      p->chunks.push_back(ChunkRef{int64_t(p->slots.size()) - 1, begin});
    }
  if (plans.back().chunks.empty()) plans.pop_back();
  return plans;
}

/// End (exclusive) of a chunk's element range.
KILN_HD_INLINE int64_t chunk_end(const ChunkRef& c, const TensorSlot& s, int64_t chunk) {
  return c.begin + chunk < s.n ? c.begin + chunk : s.n;
}

/// The update count with the skipped steps taken out (what the CPU path would have counted).
KILN_HD_INLINE int64_t effective_step(const TensorSlot& s) {
  return s.skipped ? s.step - int64_t(*s.skipped) : s.step;
}

/// Shared prologue of every update chunk: true when the launch's found_inf is set, in which
/// case the update is skipped and the chunk holding element 0 counts the skip (thread 0).
KILN_HD_INLINE bool skip_chunk(const TensorSlot& s, const ChunkRef& c, const float* found_inf, int thread) {
  if (!found_inf || *found_inf == 0.0f) return false;
  if (c.begin == 0 && thread == 0 && s.skipped) *s.skipped += 1.0f;
  return true;
}

/// Gradient value with the optional device inv_scale applied.
template <class T>
KILN_HD_INLINE T scaled_grad(const T* g, int64_t i, const float* inv_scale) {
  return inv_scale ? g[i] * T(*inv_scale) : g[i];
}

/// One thread's share of an SGD chunk (elements begin + thread, + nthreads, ...).
template <class T>
KILN_HD void sgd_chunk(const TensorSlot& s, const ChunkRef& c, int thread, int nthreads, const SgdScalars& sc,
                       const float* found_inf, const float* inv_scale) {
  if (skip_chunk(s, c, found_inf, thread)) return;
  SgdScalars local = sc;
  // first update of the buffer: created now, or created on a step that was skipped
  local.first = s.first != 0 || (s.skipped && effective_step(s) == 1);
  const SgdCoeffs<T> k(local);
  T* p = static_cast<T*>(s.p);
  const T* g = static_cast<const T*>(s.g);
  T* buf = static_cast<T*>(s.b0);
  const int64_t e = chunk_end(c, s, kMultiTensorChunk);
  for (int64_t i = c.begin + thread; i < e; i += nthreads) {
    T dummy = T(0);
    sgd_update(p[i], scaled_grad(g, i, inv_scale), buf ? buf[i] : dummy, k);
  }
}

/// The Adam scalars of one parameter: bias corrections from its effective step.
KILN_HD_INLINE AdamScalars adam_scalars_at(const AdamScalars& sc, int64_t step) {
  AdamScalars a = sc;
  const double t = double(step);
  a.step_size = sc.lr / (1.0 - opt_pow(sc.beta1, t));
  a.bias_correction2_sqrt = opt_sqrt(1.0 - opt_pow(sc.beta2, t));
  return a;
}

/// One thread's share of an Adam/AdamW chunk.
template <class T>
KILN_HD void adam_chunk(const TensorSlot& s, const ChunkRef& c, int thread, int nthreads, const AdamScalars& sc,
                        const float* found_inf, const float* inv_scale) {
  if (skip_chunk(s, c, found_inf, thread)) return;
  const AdamCoeffs<T> k(adam_scalars_at(sc, effective_step(s)));
  T* p = static_cast<T*>(s.p);
  const T* g = static_cast<const T*>(s.g);
  T* m = static_cast<T*>(s.b0);
  T* v = static_cast<T*>(s.b1);
  T* vmax = static_cast<T*>(s.b2);
  const int64_t e = chunk_end(c, s, kMultiTensorChunk);
  for (int64_t i = c.begin + thread; i < e; i += nthreads) {
    T dummy = T(0);
    adam_update(p[i], scaled_grad(g, i, inv_scale), m[i], v[i], vmax ? vmax[i] : dummy, k);
  }
}

/// One thread's share of an unscale chunk: g *= inv_scale; sets *found_inf = 1 when an
/// original value was inf/NaN (every writer writes the same value).
template <class T>
KILN_HD void unscale_chunk(const TensorSlot& s, const ChunkRef& c, int thread, int nthreads, float* found_inf,
                           const float* inv_scale) {
  T* g = static_cast<T*>(s.g);
  const T inv = T(*inv_scale);
  bool bad = false;
  const int64_t e = chunk_end(c, s, kMultiTensorChunk);
  for (int64_t i = c.begin + thread; i < e; i += nthreads) bad = unscale_check(g[i], inv) || bad;
  if (bad) *found_inf = 1.0f;
}

/// PyTorch's _amp_update_scale_ with kiln's float rules (the CPU GradScaler's arithmetic):
/// on inf/NaN scale *= backoff and the tracker resets; after growth_interval clean steps
/// scale *= growth unless that leaves float range; the scale stays in [FLT_MIN, FLT_MAX].
/// Also writes inv_scale = 1/scale (float of the double reciprocal) and last_found_inf.
KILN_HD_INLINE void amp_update_scale(float* scale, int32_t* growth_tracker, float* inv_scale, float* last_found_inf,
                                     float found_inf, double growth_factor, double backoff_factor,
                                     int64_t growth_interval) {
  double s = double(*scale);
  if (found_inf != 0.0f) {
    s *= backoff_factor;
    *growth_tracker = 0;
  } else if (int64_t(*growth_tracker) + 1 >= growth_interval) {
    const double grown = s * growth_factor;
    if (grown <= double(FLT_MAX)) s = grown;
    *growth_tracker = 0;
  } else {
    *growth_tracker += 1;
  }
  if (!(s >= double(FLT_MIN))) s = double(FLT_MIN);
  if (s >= double(FLT_MAX)) s = double(FLT_MAX);
  *scale = float(s);
  *inv_scale = float(1.0 / double(*scale));
  *last_found_inf = found_inf != 0.0f ? 1.0f : 0.0f;
}

}  // namespace kiln::optim
