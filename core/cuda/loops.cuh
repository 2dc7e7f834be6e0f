// The __global__ wrappers of the generic elementwise loops (core/cuda/loops.h) and their
// host launcher: merge dims, choose the vectorised or strided loop, launch on the current
// stream, check the launch. CUDA sources only.
//   launch_elementwise<float, float, float>(layout, ptrs, AddF<float>{});
#pragma once
#include <cuda_runtime.h>
#include "kiln/core/cuda/check.h"
#include "kiln/core/cuda/index_math.h"
#include "kiln/core/cuda/loops.h"
#include "kiln/core/cuda/runtime.h"

namespace kiln::cuda {

// ---- kernels ----

template <class Loop, class IdxT, class F>
__global__ void __launch_bounds__(kLoopBlock)
    strided_loop_kernel(OffsetCalculator<Loop::N, IdxT> calc, IdxT n, LoopPtrs<Loop::N> p, F f) {
  Loop::template strided<PlainStore>(calc, n, p, f, GridPos{blockIdx.x, threadIdx.x, blockDim.x, gridDim.x});
}

template <class Loop, class F>
__global__ void __launch_bounds__(kLoopBlock)
    contiguous_loop_kernel(int64_t n, bool aligned, LoopPtrs<Loop::N> p, F f) {
  Loop::template contiguous<PlainStore>(n, aligned, p, f, GridPos{blockIdx.x, threadIdx.x, blockDim.x, gridDim.x});
}

// ---- launchers ----

/// Blocks per launch of a grid-stride loop on the current device: 8 per multiprocessor
/// (2048 threads each at 256 per block), enough to fill it.
inline int64_t loop_max_blocks() { return int64_t(multiprocessor_count(-1)) * 8; }

/// out = f(in...) over a merged layout with operand pointers ptrs[0] = out, ptrs[1..].
/// TO and TI... are the element types as stored.
template <class TO, class... TI, class F>
void launch_elementwise(const LoopLayout<1 + int(sizeof...(TI))>& L, void* const* ptrs, const F& f) {
  using Loop = ElementwiseLoop<TO, TI...>;
  constexpr int N = Loop::N;
  if (L.numel == 0) return;
  LoopPtrs<N> p;
  for (int k = 0; k < N; ++k) p.p[k] = ptrs[k];
  const size_t elem_sizes[N] = {sizeof(TO), sizeof(TI)...};
  const cudaStream_t stream = current_raw_stream(-1);
  const int64_t max_blocks = loop_max_blocks();
  switch (choose_loop(L, ptrs, elem_sizes, Loop::kVec)) {
    case LoopKind::Vectorized: {
      const LaunchConfig c = launch_config((L.numel + Loop::kVec - 1) / Loop::kVec, max_blocks);
      contiguous_loop_kernel<Loop><<<c.grid, c.block, 0, stream>>>(L.numel, true, p, f);
      break;
    }
    case LoopKind::Strided32: {
      const LaunchConfig c = launch_config(L.numel, max_blocks);
      strided_loop_kernel<Loop, uint32_t>
          <<<c.grid, c.block, 0, stream>>>(OffsetCalculator<N, uint32_t>(L), uint32_t(L.numel), p, f);
      break;
    }
    case LoopKind::Strided64: {
      const LaunchConfig c = launch_config(L.numel, max_blocks);
      strided_loop_kernel<Loop, uint64_t>
          <<<c.grid, c.block, 0, stream>>>(OffsetCalculator<N, uint64_t>(L), uint64_t(L.numel), p, f);
      break;
    }
  }
  KILN_CUDA_CHECK_LAUNCH();
}

/// out = f(in...) over n contiguous elements of every operand (ptrs[0] = out): one kernel,
/// vectorised when every pointer is aligned to the vector width, element by element if not.
template <class TO, class... TI, class F>
void launch_contiguous(int64_t n, void* const* ptrs, const F& f) {
  using Loop = ElementwiseLoop<TO, TI...>;
  constexpr int N = Loop::N;
  if (n == 0) return;
  LoopPtrs<N> p;
  for (int k = 0; k < N; ++k) p.p[k] = ptrs[k];
  const size_t elem_sizes[N] = {sizeof(TO), sizeof(TI)...};
  const bool aligned = all_aligned<N>(ptrs, elem_sizes, Loop::kVec);
  const LaunchConfig c = launch_config(aligned ? (n + Loop::kVec - 1) / Loop::kVec : n, loop_max_blocks());
  contiguous_loop_kernel<Loop><<<c.grid, c.block, 0, current_raw_stream(-1)>>>(n, aligned, p, f);
  KILN_CUDA_CHECK_LAUNCH();
}

/// The same over an unmerged shape with per-operand strides (strides[k] has ndim entries).
template <class TO, class... TI, class F>
void launch_elementwise(int ndim, const int64_t* shape, const int64_t* const* strides, void* const* ptrs,
                        const F& f) {
  launch_elementwise<TO, TI...>(merge_dims<1 + int(sizeof...(TI))>(ndim, shape, strides), ptrs, f);
}

}  // namespace kiln::cuda
