// CUDA kernels of the reduce family (sum, mean, var, std, logsumexp, max, min, argmax,
// argmin, the max/min backward scatter; integer and bool sum/max/min/arg*) and softmax /
// log_softmax, with the CPU's kernel types (ops/kernels/reduce.h). One block per
// output row of the (outer, reduce, inner) view; its threads stride over the reduced dim
// and combine with cub::BlockReduce. The max/min selection rules (NaN wins, ties keep the
// first) are ops/reduce_math.h's.
#include <cmath>
#include <limits>
#include "core/cuda/runtime.h"
#include "core/error.h"
#include "ops/kernels/reduce.h"
#include "ops/cuda/block_reduce.cuh"
#include "ops/cuda/reduce_index.h"
#include "ops/cuda/register.h"

namespace kiln {
namespace {

using cuda::kReduceThreads;
using cuda::reduce_elem_offset;

using cuda::BlockReduce;
using cuda::block_max;
using cuda::block_sum;

template <class T>
struct Best {
  T v;
  int64_t i;  // -1: none yet
};

// The winner of two candidates: the later one (larger index) wins only when it is better.
template <bool IsMax, class T>
struct PickBest {
  __device__ Best<T> operator()(const Best<T>& a, const Best<T>& b) const {
    if (a.i < 0) return b;
    if (b.i < 0) return a;
    const Best<T>& first = a.i < b.i ? a : b;
    const Best<T>& second = a.i < b.i ? b : a;
    return math::reduce_better<IsMax>(second.v, first.v) ? second : first;
  }
};

template <bool IsMax, class T>
__device__ Best<T> block_best(Best<T> v) {
  __shared__ typename BlockReduce<Best<T>>::TempStorage tmp;
  __shared__ Best<T> result;
  Best<T> b = BlockReduce<Best<T>>(tmp).Reduce(v, PickBest<IsMax, T>());
  if (threadIdx.x == 0) result = b;
  __syncthreads();
  Best<T> r = result;
  __syncthreads();
  return r;
}

// kind: 0 sum (times scale: mean), 1 var, 2 std, 3 logsumexp.
template <class T>
__global__ void reduce_sum_kernel(const T* x, T* out, int64_t rows, int64_t R, int64_t I, int kind, double scale,
                                  double denom) {
  for (int64_t k = blockIdx.x; k < rows; k += gridDim.x) {
    if (kind == 3) {  // logsumexp: max, then sum of exp(x - max)
      T m = -std::numeric_limits<T>::infinity();
      for (int64_t r = threadIdx.x; r < R; r += blockDim.x) m = fmax(m, x[reduce_elem_offset(k, r, R, I)]);
      m = block_max(m);
      T s = 0;
      if (isfinite(m))
        for (int64_t r = threadIdx.x; r < R; r += blockDim.x) s += math::fast_exp(x[reduce_elem_offset(k, r, R, I)] - m);
      s = block_sum(s);
      if (threadIdx.x == 0) out[k] = math::logsumexp_finish(m, s);
      continue;
    }
    T s = 0;
    for (int64_t r = threadIdx.x; r < R; r += blockDim.x) s += x[reduce_elem_offset(k, r, R, I)];
    s = block_sum(s);
    if (kind == 0) {
      if (threadIdx.x == 0) out[k] = T(double(s) * scale);
      continue;
    }
    const T mean = T(double(s) / double(R));
    T ss = 0;
    for (int64_t r = threadIdx.x; r < R; r += blockDim.x) {
      const T d = x[reduce_elem_offset(k, r, R, I)] - mean;
      ss += d * d;
    }
    ss = block_sum(ss);
    if (threadIdx.x == 0) {
      const double v = R == 0 ? std::numeric_limits<double>::quiet_NaN() : double(ss) / denom;
      out[k] = T(kind == 2 ? sqrt(v) : v);
    }
  }
}

template <bool IsMax, class T>
__global__ void reduce_best_kernel(const T* x, T* values, int64_t* indices, int64_t rows, int64_t R, int64_t I) {
  for (int64_t k = blockIdx.x; k < rows; k += gridDim.x) {
    Best<T> b{T(0), -1};
    for (int64_t r = threadIdx.x; r < R; r += blockDim.x) {  // r increases: later ones win only when better
      const T v = x[reduce_elem_offset(k, r, R, I)];
      if (b.i < 0 || math::reduce_better<IsMax>(v, b.v)) b = {v, r};
    }
    b = block_best<IsMax>(b);
    if (threadIdx.x == 0) {
      if (values) values[k] = b.v;
      if (indices) indices[k] = b.i;
    }
  }
}

// dx (outer, reduce, inner) = 0 except dx[o, idx[k], i] = g[k].
template <class T>
__global__ void reduce_best_backward_kernel(const T* g, const int64_t* idx, T* dx, int64_t rows, int64_t R,
                                            int64_t I) {
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < rows; k += int64_t(gridDim.x) * blockDim.x)
    dx[reduce_elem_offset(k, idx[k], R, I)] = g[k];
}

template <class T>
void reduce_t(Op op, const ReduceArgs& a) {
  const int64_t rows = a.outer * a.inner, R = a.reduce, I = a.inner;
  cudaStream_t s = cuda::current_raw_stream();
  const int blocks = cuda::reduce_blocks(rows);
  if (rows == 0) return;
  const T* x = static_cast<const T*>(a.x);
  switch (op) {
    case Op::sum:
    case Op::mean:
    case Op::var:
    case Op::std:
    case Op::logsumexp: {
      const int kind = op == Op::logsumexp ? 3 : op == Op::var ? 1 : op == Op::std ? 2 : 0;
      reduce_sum_kernel<T><<<blocks, kReduceThreads, 0, s>>>(x, static_cast<T*>(a.out), rows, R, I, kind,
                                                             op == Op::mean ? 1.0 / double(R) : 1.0,
                                                             double(R) - a.correction);
      break;
    }
    case Op::max:
    case Op::min:
    case Op::argmax:
    case Op::argmin: {
      const bool is_max = op == Op::max || op == Op::argmax;
      if (a.backward) {
        KILN_CUDA_CHECK(cudaMemsetAsync(a.dx, 0, size_t(rows * R) * sizeof(T), s));
        const int b = int(std::min<int64_t>((rows + 255) / 256, 65535));
        reduce_best_backward_kernel<T><<<b, 256, 0, s>>>(static_cast<const T*>(a.g), a.indices,
                                                         static_cast<T*>(a.dx), rows, R, I);
        break;
      }
      KILN_CHECK(R > 0, op_name(op), ": cannot reduce an empty dimension");
      T* values = (op == Op::max || op == Op::min) ? static_cast<T*>(a.out) : nullptr;
      if (is_max) reduce_best_kernel<true, T><<<blocks, kReduceThreads, 0, s>>>(x, values, a.indices, rows, R, I);
      else reduce_best_kernel<false, T><<<blocks, kReduceThreads, 0, s>>>(x, values, a.indices, rows, R, I);
      break;
    }
    default: KILN_CHECK(false, op_name(op), ": not a reduction of the CUDA reduce kernel");
  }
  KILN_CUDA_CHECK_LAUNCH();
}

// Integer sum: int64 accumulator and output (as the CPU).
template <class T>
__global__ void reduce_sum_int_kernel(const T* x, int64_t* out, int64_t rows, int64_t R, int64_t I) {
  for (int64_t k = blockIdx.x; k < rows; k += gridDim.x) {
    int64_t s = 0;
    for (int64_t r = threadIdx.x; r < R; r += blockDim.x) s += int64_t(x[reduce_elem_offset(k, r, R, I)]);
    s = block_sum(s);
    if (threadIdx.x == 0) out[k] = s;
  }
}

// Integer and bool (read as uint8) inputs: sum (int64 out), max/min (values in x's dtype),
// argmax/argmin - the reductions the CPU kernel accepts for them. No backward.
template <class T>
void reduce_int_t(Op op, const ReduceArgs& a) {
  const int64_t rows = a.outer * a.inner, R = a.reduce, I = a.inner;
  if (rows == 0) return;
  cudaStream_t s = cuda::current_raw_stream();
  const int blocks = cuda::reduce_blocks(rows);
  const T* x = static_cast<const T*>(a.x);
  switch (op) {
    case Op::sum:
      reduce_sum_int_kernel<T><<<blocks, kReduceThreads, 0, s>>>(x, static_cast<int64_t*>(a.out), rows, R, I);
      break;
    case Op::max:
    case Op::min:
    case Op::argmax:
    case Op::argmin: {
      KILN_CHECK(R > 0, op_name(op), ": cannot reduce an empty dimension");
      T* values = (op == Op::max || op == Op::min) ? static_cast<T*>(a.out) : nullptr;
      if (op == Op::max || op == Op::argmax)
        reduce_best_kernel<true, T><<<blocks, kReduceThreads, 0, s>>>(x, values, a.indices, rows, R, I);
      else
        reduce_best_kernel<false, T><<<blocks, kReduceThreads, 0, s>>>(x, values, a.indices, rows, R, I);
      break;
    }
    default: KILN_FAIL(op_name(op), ": no CUDA kernel for integer inputs (floating dtypes only)");
  }
  KILN_CUDA_CHECK_LAUNCH();
}

void reduce_cuda(Op op, DType dt, const ReduceArgs& a) {
  switch (dt) {
    case DType::float32: return reduce_t<float>(op, a);
    case DType::float64: return reduce_t<double>(op, a);
    case DType::int64:
    case DType::int32:
    case DType::uint8:
    case DType::bool_:
      KILN_CHECK(!a.backward, op_name(op), ": no backward for integer dtype ", dtype_name(dt));
      if (dt == DType::int64) return reduce_int_t<int64_t>(op, a);
      if (dt == DType::int32) return reduce_int_t<int32_t>(op, a);
      return reduce_int_t<uint8_t>(op, a);  // uint8, and bool read as uint8
    default:
      KILN_FAIL(op_name(op), ": the CUDA kernel takes float32, float64, int64, int32, uint8 or bool, got ",
                dtype_name(dt));
  }
}

// ---- softmax / log_softmax over the middle dim, one block per (outer, inner) row ----

template <class T>
__global__ void softmax_kernel(bool is_log, const T* x, T* y, int64_t rows, int64_t D, int64_t I) {
  for (int64_t k = blockIdx.x; k < rows; k += gridDim.x) {
    T m = -std::numeric_limits<T>::infinity();
    for (int64_t r = threadIdx.x; r < D; r += blockDim.x) m = fmax(m, x[reduce_elem_offset(k, r, D, I)]);
    m = block_max(m);
    T s = 0;
    for (int64_t r = threadIdx.x; r < D; r += blockDim.x) s += math::fast_exp(x[reduce_elem_offset(k, r, D, I)] - m);
    s = block_sum(s);
    const T log_s = log(s);  // log_softmax = (x - m) - log(s): m + log(s) would round log(s) away
    for (int64_t r = threadIdx.x; r < D; r += blockDim.x) {
      const int64_t off = reduce_elem_offset(k, r, D, I);
      y[off] = is_log ? (x[off] - m) - log_s : math::fast_exp(x[off] - m) / s;
    }
  }
}

template <class T>
__global__ void softmax_backward_kernel(bool is_log, const T* y, const T* g, T* dx, int64_t rows, int64_t D, int64_t I) {
  for (int64_t k = blockIdx.x; k < rows; k += gridDim.x) {
    T s = 0;  // softmax: sum(g * y); log_softmax: sum(g)
    for (int64_t r = threadIdx.x; r < D; r += blockDim.x) {
      const int64_t off = reduce_elem_offset(k, r, D, I);
      s += is_log ? g[off] : g[off] * y[off];
    }
    s = block_sum(s);
    for (int64_t r = threadIdx.x; r < D; r += blockDim.x) {
      const int64_t off = reduce_elem_offset(k, r, D, I);
      dx[off] = is_log ? g[off] - math::fast_exp(y[off]) * s : y[off] * (g[off] - s);
    }
  }
}

void softmax_cuda(Op op, DType dt, const SoftmaxArgs& a) {
  KILN_CHECK(dt == DType::float32 || dt == DType::float64, op_name(op), ": the CUDA kernel takes float32 or "
             "float64, got ", dtype_name(dt));
  const int64_t rows = a.outer * a.inner;
  if (rows == 0 || a.dim == 0) return;
  const bool is_log = op == Op::log_softmax;
  cudaStream_t s = cuda::current_raw_stream();
  const int blocks = cuda::reduce_blocks(rows);
  auto run = [&]<class T>() {
    if (a.backward)
      softmax_backward_kernel<T><<<blocks, kReduceThreads, 0, s>>>(is_log, static_cast<const T*>(a.y),
                                                                   static_cast<const T*>(a.g),
                                                                   static_cast<T*>(a.out), rows, a.dim, a.inner);
    else
      softmax_kernel<T><<<blocks, kReduceThreads, 0, s>>>(is_log, static_cast<const T*>(a.x), static_cast<T*>(a.out),
                                                          rows, a.dim, a.inner);
  };
  if (dt == DType::float32) run.template operator()<float>();
  else run.template operator()<double>();
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace

void register_cuda_reduce() {
  for (Op op : {Op::sum, Op::mean, Op::var, Op::std, Op::logsumexp, Op::max, Op::min, Op::argmax, Op::argmin})
    register_kernel(op, DeviceType::CUDA, &reduce_cuda);
  register_kernel(Op::softmax, DeviceType::CUDA, &softmax_cuda);
  register_kernel(Op::log_softmax, DeviceType::CUDA, &softmax_cuda);
}

}  // namespace kiln
