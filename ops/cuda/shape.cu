// CUDA kernels of the shape op family (cat/stack copies, index_select and its index_add
// backward, gather and its scatter-add backward) with the CPU's kernel types
// (ops/kernels/shape.h). Copies move elements by size; the backward passes are
// deterministic (sorted runs / one thread per colliding row, no float atomics).
#include <cub/device/device_radix_sort.cuh>
#include <algorithm>
#include "kiln/core/cuda/check.h"
#include "kiln/core/cuda/index_math.h"
#include "kiln/core/cuda/runtime.h"
#include "kiln/core/error.h"
#include "kiln/core/tensor.h"
#include "kiln/ops/kernels/shape.h"
#include "kiln/ops/cuda/register.h"
#include "kiln/ops/cuda/dtype_dispatch.h"
#include "kiln/ops/cuda/shape_cuda.h"
#include "kiln/ops/cuda/shape_index.h"
#include "kiln/ops/dispatch.h"

namespace kiln {
namespace {

using cuda::CatChunk;
using cuda::GatherGeom;

// Calls f.template operator()<U>() with an unsigned type U of elem_size bytes.
template <class F>
void dispatch_bytes(size_t elem_size, const char* op, const F& f) {
  switch (elem_size) {
    case 1: f.template operator()<uint8_t>(); return;
    case 2: f.template operator()<uint16_t>(); return;
    case 4: f.template operator()<uint32_t>(); return;
    case 8: f.template operator()<uint64_t>(); return;
    default: KILN_FAIL(op, ": unsupported element size ", elem_size, " on CUDA");
  }
}

// ================================================================ kernels

template <class U>
__global__ void cat_kernel(const __grid_constant__ CatChunk ch, U* out, int64_t items) {
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < items; t += int64_t(gridDim.x) * blockDim.x) {
    const cuda::CatPos p = cuda::cat_pos(ch, t);
    out[p.dst] = static_cast<const U*>(ch.ptr[p.input])[p.src];
  }
}

template <class U>
__global__ void index_select_kernel(const U* x, const int64_t* idx, U* out, int64_t items, int64_t S, int64_t n,
                                    int64_t inner) {
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < items; t += int64_t(gridDim.x) * blockDim.x)
    out[t] = x[cuda::index_select_src(t, idx, S, n, inner)];
}

template <class U>
__global__ void gather_kernel(const __grid_constant__ GatherGeom g, const U* x, const int64_t* idx, U* out,
                              int64_t items) {
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < items; t += int64_t(gridDim.x) * blockDim.x)
    cuda::gather_one(g, t, x, idx, out);
}

template <class T>
__global__ void scatter_add_kernel(const __grid_constant__ GatherGeom g, const T* dout, const int64_t* idx, T* dx,
                                   int64_t rows) {
  using A = cuda::AccType<T>;
  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r < rows; r += int64_t(gridDim.x) * blockDim.x)
    cuda::scatter_add_row<T, A>(g, r, dout, idx, dx);
}

template <class U>
__global__ void scatter_copy_kernel(const __grid_constant__ GatherGeom g, const U* src, const int64_t* idx, U* dx,
                                    int64_t rows) {
  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r < rows; r += int64_t(gridDim.x) * blockDim.x)
    cuda::scatter_copy_row<U>(g, r, src, idx, dx);
}

// ================================================================ launchers

void cat_forward(size_t es, const void* const* ins, const int64_t* inner, int64_t n_in, void* out, int64_t outer) {
  int64_t total = 0;
  for (int64_t i = 0; i < n_in; ++i) total += inner[i];
  if (outer == 0 || total == 0) return;
  cudaStream_t s = cuda::current_raw_stream();
  dispatch_bytes(es, "cat", [&]<class U>() {
    int64_t col = 0;
    for (int64_t first = 0; first < n_in; first += cuda::kCatChunk) {  // up to kCatChunk inputs per launch
      CatChunk ch;
      ch.n = int(std::min<int64_t>(cuda::kCatChunk, n_in - first));
      ch.total = total;
      ch.col[0] = col;
      for (int i = 0; i < ch.n; ++i) {
        ch.ptr[i] = ins[first + i];
        col += inner[first + i];
        ch.col[i + 1] = col;
      }
      const int64_t items = outer * (ch.col[ch.n] - ch.col[0]);
      if (items == 0) continue;
      const int grid = cuda::grid_for(items);
      cat_kernel<U><<<grid, cuda::kLoopBlock, 0, s>>>(ch, static_cast<U*>(out), items);
      KILN_CUDA_CHECK_LAUNCH();
    }
  });
}

void index_select_forward(size_t es, const void* x, const int64_t* idx, void* out, int64_t outer, int64_t S,
                          int64_t n, int64_t inner) {
  cuda::index_select_copy(es, "index_select", x, idx, out, outer, S, n, inner);
}

void index_select_backward(DType dt, const void* g, const int64_t* idx, void* dx, int64_t outer, int64_t S,
                           int64_t n, int64_t inner) {
  cuda::index_add_sorted(dt, "index_add", g, idx, dx, outer, S, n, inner, -1);
}

GatherGeom gather_geom(int64_t ndim, const int64_t* shape, const int64_t* s0, const int64_t* s1, const int64_t* s2,
                       int64_t dim, const char* op) {
  KILN_CHECK(ndim >= 1 && ndim <= cuda::kGatherMaxDims, op, ": the CUDA kernel takes 1 to ", cuda::kGatherMaxDims,
             " dims, got ", ndim);
  GatherGeom g;
  g.ndim = int(ndim);
  g.dim = int(dim);
  for (int64_t d = 0; d < ndim; ++d) {
    g.shape[d] = shape[d];
    g.stride[0][d] = s0[d];
    g.stride[1][d] = s1[d];
    g.stride[2][d] = s2[d];
  }
  return g;
}

void gather_forward(size_t es, const void* x, const int64_t* idx, void* out, int64_t ndim, const int64_t* shape,
                    const int64_t* xs, const int64_t* is, const int64_t* os, int64_t dim) {
  const GatherGeom g = gather_geom(ndim, shape, os, is, xs, dim, "gather");
  int64_t items = 1;
  for (int64_t d = 0; d < ndim; ++d) items *= shape[d];
  if (items == 0) return;
  cudaStream_t s = cuda::current_raw_stream();
  dispatch_bytes(es, "gather", [&]<class U>() {
    gather_kernel<U><<<cuda::grid_for(items), cuda::kLoopBlock, 0, s>>>(g, static_cast<const U*>(x), idx,
                                                                         static_cast<U*>(out), items);
    KILN_CUDA_CHECK_LAUNCH();
  });
}

void gather_backward(DType dt, const void* dout, const int64_t* idx, void* dx, int64_t ndim, const int64_t* shape,
                     const int64_t* gs, const int64_t* is, const int64_t* dxs, int64_t dim) {
  const GatherGeom g = gather_geom(ndim, shape, gs, is, dxs, dim, "gather_backward");
  int64_t items = 1;
  for (int64_t d = 0; d < ndim; ++d) items *= shape[d];
  if (items == 0) return;
  const int64_t rows = cuda::scatter_rows(g);
  cudaStream_t s = cuda::current_raw_stream();
  cuda::dispatch_numeric(dt, "scatter_add", [&]<class T>() {
    scatter_add_kernel<T><<<cuda::grid_for(rows), cuda::kLoopBlock, 0, s>>>(g, static_cast<const T*>(dout), idx,
                                                                             static_cast<T*>(dx), rows);
    KILN_CUDA_CHECK_LAUNCH();
  });
}

void scatter_copy(size_t es, const void* src, const int64_t* idx, void* dx, int64_t ndim, const int64_t* shape,
                  const int64_t* ss, const int64_t* is, const int64_t* dxs, int64_t dim) {
  const GatherGeom g = gather_geom(ndim, shape, ss, is, dxs, dim, "scatter");
  int64_t items = 1;
  for (int64_t d = 0; d < ndim; ++d) items *= shape[d];
  if (items == 0) return;
  const int64_t rows = cuda::scatter_rows(g);
  cudaStream_t s = cuda::current_raw_stream();
  dispatch_bytes(es, "scatter", [&]<class U>() {
    scatter_copy_kernel<U><<<cuda::grid_for(rows), cuda::kLoopBlock, 0, s>>>(g, static_cast<const U*>(src), idx,
                                                                              static_cast<U*>(dx), rows);
    KILN_CUDA_CHECK_LAUNCH();
  });
}

const CatKernels kCatCuda{&cat_forward};
const IndexSelectKernels kIndexSelectCuda{&index_select_forward, &index_select_backward};
const GatherKernels kGatherCuda{&gather_forward, &gather_backward, &scatter_copy};

}  // namespace

// ================================================================ shared with nn.cu

namespace cuda {

template <class T>
__global__ void index_add_run_kernel(const int64_t* keys, const int64_t* pos, const T* src, T* dst, int64_t items,
                                     int64_t S, int64_t n, int64_t inner, int64_t skip_key) {
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < items; t += int64_t(gridDim.x) * blockDim.x)
    index_add_run<T, AccType<T>>(t, keys, pos, src, dst, S, n, inner, skip_key);
}

__global__ void iota_kernel(int64_t* p, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = i;
}

void index_select_copy(size_t es, const char* op, const void* x, const int64_t* idx, void* out, int64_t outer,
                       int64_t S, int64_t n, int64_t inner) {
  const int64_t items = outer * n * inner;
  if (items == 0) return;
  cudaStream_t s = current_raw_stream();
  dispatch_bytes(es, op, [&]<class U>() {
    index_select_kernel<U><<<grid_for(items), kLoopBlock, 0, s>>>(static_cast<const U*>(x), idx,
                                                                   static_cast<U*>(out), items, S, n, inner);
    KILN_CUDA_CHECK_LAUNCH();
  });
}

int grid_for(int64_t items) {
  const int64_t max_blocks = int64_t(multiprocessor_count(-1)) * 8;
  return int(launch_config(items, max_blocks).grid);
}

void index_add_sorted(DType dt, const char* op, const void* src, const int64_t* idx, void* dst, int64_t outer,
                      int64_t S, int64_t n, int64_t inner, int64_t skip_key) {
  if (outer * n * inner == 0) return;
  KILN_CHECK(n <= kMax32BitIndex, op, ": the CUDA kernel sorts at most 2^31 - 1 indices, got ", n);
  cudaStream_t s = current_raw_stream();
  const Device dev = Device::cuda(resolve_device(-1));
  // keys_out, pos_in, pos_out (n each) in one int64 buffer
  Tensor buf = Tensor::empty({3 * n}, DType::int64, dev);
  int64_t* keys = static_cast<int64_t*>(buf.raw_data());
  int64_t* pos_in = keys + n;
  int64_t* pos = keys + 2 * n;
  iota_kernel<<<grid_for(n), kLoopBlock, 0, s>>>(pos_in, n);
  KILN_CUDA_CHECK_LAUNCH();
  int end_bit = 1;  // keys lie in [0, S): sort only the bits they use
  while (end_bit < 63 && (int64_t(1) << end_bit) < S) ++end_bit;
  size_t temp_bytes = 0;
  KILN_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, idx, keys, pos_in, pos, int(n), 0, end_bit, s));
  Tensor temp = Tensor::empty({int64_t(std::max<size_t>(temp_bytes, 1))}, DType::uint8, dev);
  KILN_CUDA_CHECK(
      cub::DeviceRadixSort::SortPairs(temp.raw_data(), temp_bytes, idx, keys, pos_in, pos, int(n), 0, end_bit, s));
  const int64_t items = outer * n * inner;
  dispatch_numeric(dt, op, [&]<class T>() {
    index_add_run_kernel<T><<<grid_for(items), kLoopBlock, 0, s>>>(keys, pos, static_cast<const T*>(src),
                                                                   static_cast<T*>(dst), items, S, n, inner, skip_key);
    KILN_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace cuda

void register_cuda_shape() {
  register_kernel(Op::cat, DeviceType::CUDA, &kCatCuda);
  register_kernel(Op::stack, DeviceType::CUDA, &kCatCuda);
  register_kernel(Op::index_select, DeviceType::CUDA, &kIndexSelectCuda);
  register_kernel(Op::gather, DeviceType::CUDA, &kGatherCuda);
}

}  // namespace kiln
