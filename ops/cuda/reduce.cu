// CUDA kernels of the reduce family (sum, mean, var, std, logsumexp, max, min, argmax,
// argmin, the max/min backward scatter; integer and bool sum/max/min/arg*), cumsum and softmax /
// log_softmax, with the CPU's kernel types (ops/kernels/reduce.h). One block per
// output row of the (outer, reduce, inner) view; its threads stride over the reduced dim
// and combine with cub::BlockReduce. Sums and means with inner >= 32 read coalesced column
// tiles instead (column_sum). The max/min selection rules (NaN wins, ties keep the
// first) are ops/reduce_math.h's.
#include <cmath>
#include <limits>
#include "kiln/core/cuda/index_math.h"
#include "kiln/core/cuda/runtime.h"
#include "kiln/core/tensor.h"
#include "kiln/core/error.h"
#include "kiln/ops/kernels/reduce.h"
#include "kiln/ops/cuda/block_reduce.cuh"
#include "kiln/ops/cuda/reduce_index.h"
#include "kiln/ops/cuda/row_kernels.h"
#include "kiln/ops/cuda/register.h"
#include "kiln/ops/cuda/shape_cuda.h"

namespace kiln {
namespace {

using cuda::kReduceThreads;
using cuda::reduce_elem_offset;

using cuda::DeviceBlock;

// The row bodies are ops/cuda/row_kernels.h's (run on the CPU by test_cuda_block_rows).
// kind: 0 sum (times scale: mean), 1 var, 2 std, 3 logsumexp.
template <class T>
__global__ void reduce_sum_kernel(const T* x, T* out, int64_t rows, int64_t R, int64_t I, int kind, double scale,
                                  double denom) {
  for (int64_t k = blockIdx.x; k < rows; k += gridDim.x)
    cuda::rows::reduce_sum_row<T>(DeviceBlock{}, k, x, out, R, I, kind, scale, denom);
}

// Sums (kind 0) with inner >= 32: column tiles of 32 read row by row (coalesced), the
// reduced dim cut into sp.splits ranges for enough blocks; block item k = split * tiles +
// tile. One range: the totals go straight to out; several: to ws (splits, outer * I),
// added in split order by column_sum_finish_kernel (the same result on every run).
template <class T>
__global__ void column_sum_kernel(const T* x, T* out, T* ws, int64_t outer, int64_t R, int64_t I,
                                  cuda::rows::ColumnSplit sp, double scale) {
  __shared__ T part[kReduceThreads];
  const int64_t col_tiles = (I + 31) / 32;
  for (int64_t k = blockIdx.x; k < sp.tiles * sp.splits; k += gridDim.x) {
    const int64_t split = k / sp.tiles, tile = k - split * sp.tiles, o = tile / col_tiles;
    const int64_t r0 = split * sp.rows, r1 = r0 + sp.rows < R ? r0 + sp.rows : R;
    cuda::rows::column_sum_tile<T>(DeviceBlock{}, part, x, o, (tile - o * col_tiles) * 32, r0, r1, R, I,
                                   [&](int64_t c, T total) {
                                     if (sp.splits == 1) out[o * I + c] = T(double(total) * scale);
                                     else ws[(split * outer + o) * I + c] = total;
                                   });
  }
}

template <class T>
__global__ void column_sum_finish_kernel(const T* ws, T* out, int64_t n, int64_t splits, double scale) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    T s = 0;
    for (int64_t j = 0; j < splits; ++j) s += ws[j * n + i];
    out[i] = T(double(s) * scale);
  }
}

template <class T>
void column_sum(const T* x, T* out, int64_t outer, int64_t R, int64_t I, double scale, cudaStream_t s) {
  const cuda::rows::ColumnSplit sp = cuda::rows::column_split(outer, R, I, int64_t(cuda::multiprocessor_count(-1)) * 4);
  const int blocks = int(std::min<int64_t>(sp.tiles * sp.splits, 65535));
  Tensor ws;
  if (sp.splits > 1)
    ws = Tensor::empty({sp.splits * outer * I}, std::is_same_v<T, double> ? DType::float64 : DType::float32,
                       Device::cuda(cuda::resolve_device(-1)));
  T* w = sp.splits > 1 ? static_cast<T*>(ws.raw_data()) : nullptr;
  column_sum_kernel<T><<<blocks, kReduceThreads, 0, s>>>(x, out, w, outer, R, I, sp, scale);
  KILN_CUDA_CHECK_LAUNCH();
  if (sp.splits > 1) {
    column_sum_finish_kernel<T><<<cuda::grid_for(outer * I), cuda::kLoopBlock, 0, s>>>(w, out, outer * I, sp.splits,
                                                                                       scale);
    KILN_CUDA_CHECK_LAUNCH();
  }
}

template <bool IsMax, class T>
__global__ void reduce_best_kernel(const T* x, T* values, int64_t* indices, int64_t rows, int64_t R, int64_t I) {
  for (int64_t k = blockIdx.x; k < rows; k += gridDim.x)
    cuda::rows::reduce_best_row<IsMax, T>(DeviceBlock{}, k, x, values, indices, R, I);
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
      if (kind == 0 && I >= 32) {  // coalesced column sums (a bias gradient: sum over dim 0)
        column_sum<T>(x, static_cast<T*>(a.out), a.outer, R, I, op == Op::mean ? 1.0 / double(R) : 1.0, s);
        return;
      }
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
  for (int64_t k = blockIdx.x; k < rows; k += gridDim.x)
    cuda::rows::reduce_sum_int_row<T>(DeviceBlock{}, k, x, out, R, I);
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

// ---- cumsum: one thread per (outer, inner) line, in order along reduce (math::cumsum_line,
// the CPU's sequence of additions); neighbouring threads read neighbouring columns. ----

template <class A, class T, class U>
__global__ void cumsum_kernel(const T* x, U* out, int64_t lines, int64_t R, int64_t I, bool reverse) {
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < lines; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = k / I, i = k - o * I;
    math::cumsum_line<A>(x + o * R * I + i, out + o * R * I + i, R, I, reverse);
  }
}

void cumsum_cuda(Op op, DType dt, const ReduceArgs& a) {
  KILN_CHECK(op == Op::cumsum, "cumsum kernel: unsupported op ", op_name(op));
  const int64_t lines = a.outer * a.inner;
  if (lines == 0 || a.reduce == 0) return;
  cudaStream_t s = cuda::current_raw_stream();
  const int blocks = cuda::grid_for(lines);
  auto run = [&]<class A, class T, class U>() {
    cumsum_kernel<A, T, U><<<blocks, cuda::kLoopBlock, 0, s>>>(static_cast<const T*>(a.x), static_cast<U*>(a.out),
                                                               lines, a.reduce, a.inner, a.backward);
  };
  KILN_CHECK(!a.backward || dt == DType::float32 || dt == DType::float64, "cumsum: no CUDA kernel for ",
             dtype_name(dt), " gradients");
  switch (dt) {
    case DType::float32: run.template operator()<double, float, float>(); break;
    case DType::float64: run.template operator()<double, double, double>(); break;
    case DType::int64: run.template operator()<int64_t, int64_t, int64_t>(); break;
    case DType::int32: run.template operator()<int64_t, int32_t, int64_t>(); break;
    case DType::uint8:
    case DType::bool_: run.template operator()<int64_t, uint8_t, int64_t>(); break;
    default:
      KILN_FAIL("cumsum: the CUDA kernel takes float32, float64, int64, int32, uint8 or bool, got ", dtype_name(dt));
  }
  KILN_CUDA_CHECK_LAUNCH();
}

// ---- softmax / log_softmax over the middle dim, one block per (outer, inner) row ----

template <class T>
__global__ void softmax_kernel(bool is_log, const T* x, T* y, int64_t rows, int64_t D, int64_t I) {
  for (int64_t k = blockIdx.x; k < rows; k += gridDim.x) cuda::rows::softmax_row<T>(DeviceBlock{}, k, is_log, x, y, D, I);
}

template <class T>
__global__ void softmax_backward_kernel(bool is_log, const T* y, const T* g, T* dx, int64_t rows, int64_t D, int64_t I) {
  for (int64_t k = blockIdx.x; k < rows; k += gridDim.x)
    cuda::rows::softmax_backward_row<T>(DeviceBlock{}, k, is_log, y, g, dx, D, I);
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
  register_kernel(Op::cumsum, DeviceType::CUDA, &cumsum_cuda);
  register_kernel(Op::softmax, DeviceType::CUDA, &softmax_cuda);
  register_kernel(Op::log_softmax, DeviceType::CUDA, &softmax_cuda);
}

}  // namespace kiln
