// Index math of the GPU elementwise ops: from the kernel arguments of the elementwise
// family (EwArgs / UnaryArgs, ops/kernels/elementwise.h) to the merged loop layout
// the generic loops run over (core/cuda/index_math.h has the offset calculator, the grid
// split and the loop choice). Host C++, no CUDA header; the CPU test uses it as is.
#pragma once
#include "kiln/core/cuda/index_math.h"
#include "kiln/ops/kernels/elementwise.h"

namespace kiln::cuda {

/// The merged layout of the first N operands of an elementwise call (operand 0 = output).
template <int N>
LoopLayout<N> layout_from_args(const EwArgs& a) {
  const int64_t* strides[N];
  for (int k = 0; k < N; ++k) strides[k] = a.strides[k];
  return merge_dims<N>(a.ndim, a.shape, strides);
}

}  // namespace kiln::cuda
