// Kernel types of the shape/indexing family (cat, stack, index_select, gather). One table
// entry per op holds a struct of kernel pointers, registered per device type:
//   kernel<CatKernels>(Op::cat, out.device())->forward(...)
// Copy kernels move elements of any dtype by size (elem_size bytes); the scatter-add
// backward kernels (also index_add and scatter_add themselves) compute in `dt` (float32,
// float64 or an integer type on the CPU; 16-bit floats too on CUDA). Indices are int64 and
// already checked to be in range.
#pragma once
#include <cstddef>
#include <cstdint>
#include "kiln/core/dtype.h"

namespace kiln {

struct CatKernels {
  /// out (outer, sum_i inner[i]) from contiguous inputs ins[i] (outer, inner[i]).
  /// Registered for Op::cat and Op::stack (stack = cat of unsqueezed inputs).
  void (*forward)(size_t elem_size, const void* const* ins, const int64_t* inner, int64_t n_inputs, void* out,
                  int64_t outer);
};

struct IndexSelectKernels {
  /// out[o, k, :] = x[o, idx[k], :].
  void (*forward)(size_t elem_size, const void* x /* (outer, S, inner) */, const int64_t* idx /* (n) */,
                  void* out /* (outer, n, inner) */, int64_t outer, int64_t S, int64_t n, int64_t inner);
  /// index_add: dx[o, idx[k], :] += dout[o, k, :] in k order (deterministic), added to
  /// what dx holds.
  void (*backward)(DType dt, const void* dout /* (outer, n, inner) */, const int64_t* idx /* (n) */,
                   void* dx /* (outer, S, inner) */, int64_t outer, int64_t S, int64_t n, int64_t inner);
};

struct GatherKernels {
  /// For every position p of the index shape (ndim dims): out[p] = x[p with p[dim] =
  /// idx[p]]. Each operand has its own element strides (any layout).
  void (*forward)(size_t elem_size, const void* x, const int64_t* idx, void* out, int64_t ndim,
                  const int64_t* shape /* index shape */, const int64_t* x_strides, const int64_t* idx_strides,
                  const int64_t* out_strides, int64_t dim);
  /// scatter_add: dx[p with p[dim] = idx[p]] += dout[p]; positions that may collide (same
  /// coordinates except along dim) are summed by one thread in order (deterministic),
  /// added to what dx holds.
  void (*backward)(DType dt, const void* dout, const int64_t* idx, void* dx, int64_t ndim,
                   const int64_t* shape /* index shape */, const int64_t* dout_strides, const int64_t* idx_strides,
                   const int64_t* dx_strides, int64_t dim);
  /// scatter (torch.scatter): dx[p with p[dim] = idx[p]] = src[p], copied by size. Each
  /// row along dim is written by one thread in order, so of colliding positions the last
  /// one wins (deterministic; PyTorch leaves it unspecified).
  void (*scatter)(size_t elem_size, const void* src, const int64_t* idx, void* dx, int64_t ndim,
                  const int64_t* shape /* index shape */, const int64_t* src_strides, const int64_t* idx_strides,
                  const int64_t* dx_strides, int64_t dim);
};

}  // namespace kiln
