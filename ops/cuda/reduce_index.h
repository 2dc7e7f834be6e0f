// Index math of the GPU reduce and softmax kernels, shared with the CPU test that emulates
// their grids: a reduction sees x as (outer, reduce, inner); output k = o * inner + i is
// owned by one block, whose threads take the reduced positions r = t, t + B, t + 2B, ...
#pragma once
#include <cstdint>
#include "kiln/core/macros.h"

namespace kiln::cuda {

/// Threads per block of the reduce and softmax kernels.
constexpr int kReduceThreads = 256;

/// Offset in x (outer, reduce, inner) of position r of output row k (k = o * inner + i).
KILN_HD_INLINE int64_t reduce_elem_offset(int64_t k, int64_t r, int64_t reduce, int64_t inner) {
  const int64_t o = k / inner, i = k - o * inner;
  return (o * reduce + r) * inner + i;
}

/// Blocks launched for `rows` output rows (each block then strides over rows by gridDim).
inline int reduce_blocks(int64_t rows) { return int(rows < 65535 ? (rows > 0 ? rows : 1) : 65535); }

}  // namespace kiln::cuda
