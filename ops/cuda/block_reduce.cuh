// Block-wide reductions shared by the row kernels (reduce, softmax, layer_norm, losses,
// attention, conv's bias gradient): one block of kReduceThreads threads per row, partials
// combined with cub::BlockReduce; and DeviceBlock, the block the row bodies of
// ops/cuda/row_kernels.h run in on the GPU.
#pragma once
#include <cub/block/block_reduce.cuh>
#include "kiln/ops/cuda/reduce_index.h"

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

/// fmax of every thread's partial, returned to all threads. fmax ignores NaN: the row
/// kernels subtract this maximum before exp, and a NaN still reaches their result there.
template <class T>
__device__ __forceinline__ T block_max(T v) {
  struct MaxOp {
    __device__ T operator()(T a, T b) const { return fmax(a, b); }
  };
  __shared__ typename BlockReduce<T>::TempStorage tmp;
  __shared__ T result;
  T m = BlockReduce<T>(tmp).Reduce(v, MaxOp());
  if (threadIdx.x == 0) result = m;
  __syncthreads();
  T r = result;
  __syncthreads();
  return r;
}

/// `op` (associative) over every thread's partial, returned to all threads.
template <class V, class Op>
__device__ __forceinline__ V block_reduce(V v, Op op) {
  __shared__ typename BlockReduce<V>::TempStorage tmp;
  __shared__ V result;
  V r = BlockReduce<V>(tmp).Reduce(v, op);
  if (threadIdx.x == 0) result = r;
  __syncthreads();
  r = result;
  __syncthreads();
  return r;
}

/// The real block, for the bodies of ops/cuda/row_kernels.h (launched with kReduceThreads
/// threads per block: cub's reductions are sized for it) and of flash_attention.h (any
/// size: they only use thread(), size() and sync()).
struct DeviceBlock {
  __device__ int thread() const { return int(threadIdx.x); }
  __device__ int size() const { return int(blockDim.x); }
  __device__ void sync() const { __syncthreads(); }
  template <class A>
  __device__ A sum(A v) const { return block_sum(v); }
  template <class T>
  __device__ T max(T v) const { return block_max(v); }
  template <class V, class Op>
  __device__ V reduce(V v, Op op) const { return block_reduce(v, op); }
};

}  // namespace kiln::cuda
