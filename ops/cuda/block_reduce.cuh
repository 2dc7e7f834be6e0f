// Block-wide reductions shared by the row kernels (reduce, softmax, layer_norm): one block
// of kReduceThreads threads per row, partials combined with cub::BlockReduce.
#pragma once
#include <cub/block/block_reduce.cuh>
#include "ops/cuda/reduce_index.h"

namespace kiln::cuda {

template <class T>
using BlockReduce = cub::BlockReduce<T, kReduceThreads>;

/// Sum of every thread's partial, returned to all threads of the block.
template <class A>
__device__ __forceinline__ A block_sum(A v) {
  __shared__ typename BlockReduce<A>::TempStorage tmp;
  __shared__ A result;
  A s = BlockReduce<A>(tmp).Sum(v);
  if (threadIdx.x == 0) result = s;
  __syncthreads();
  A r = result;
  __syncthreads();  // tmp and result are reused by the next call
  return r;
}

}  // namespace kiln::cuda
