// Host helpers shared by the CUDA shape and nn kernels (defined in ops/cuda/shape.cu):
// the grid size of kiln's 1-D grid-stride launches and the deterministic sorted-run
// index_add behind index_select's and embedding's backward. CUDA sources only.
#pragma once
#include <cstddef>
#include <cstdint>
#include "kiln/core/dtype.h"

namespace kiln::cuda {

/// Blocks of kLoopBlock threads for a grid-stride loop over `items` (at most 8 per SM).
int grid_for(int64_t items);

/// out (outer, n, inner) = x (outer, S, inner) rows idx (n), copied by element size.
void index_select_copy(size_t elem_size, const char* op, const void* x, const int64_t* idx, void* out, int64_t outer,
                       int64_t S, int64_t n, int64_t inner);

/// dst (outer, S, inner) += src (outer, n, inner) gathered by idx (n): dst[o, idx[k], :] +=
/// src[o, k, :], summed in k order per destination row (stable radix sort of idx, then one
/// thread per (run, column)). Rows with idx == skip_key are skipped (-1: none). dst zeroed
/// by the caller; `dt` a floating dtype, `op` names the op in errors.
void index_add_sorted(DType dt, const char* op, const void* src, const int64_t* idx, void* dst, int64_t outer,
                      int64_t S, int64_t n, int64_t inner, int64_t skip_key);

}  // namespace kiln::cuda
