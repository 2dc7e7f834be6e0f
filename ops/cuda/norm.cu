// CUDA kernels of layer_norm (forward and backward) with the CPU's kernel struct
// (ops/cpu/norm_kernels.h): one block per row for the row statistics and dx, one thread per
// feature for dweight / dbias (sums over the rows). batch_norm goes to cuDNN later.
#include <cmath>
#include "core/cuda/runtime.h"
#include "core/error.h"
#include "ops/cpu/norm_kernels.h"
#include "ops/cuda/block_reduce.cuh"
#include "ops/cuda/register.h"
#include "ops/dispatch.h"

namespace kiln {
namespace {

using cuda::block_sum;
using cuda::kReduceThreads;

template <class T>
__global__ void layer_norm_forward_kernel(const T* x, const T* w, const T* b, T* out, T* save_mean, T* save_rstd,
                                          int64_t R, int64_t D, double eps) {
  for (int64_t row = blockIdx.x; row < R; row += gridDim.x) {
    const T* xr = x + row * D;
    T s = 0;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) s += xr[d];
    const T mean = block_sum(s) / T(D);
    T ss = 0;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) ss += (xr[d] - mean) * (xr[d] - mean);
    const T rstd = T(1.0 / sqrt(double(block_sum(ss)) / double(D) + eps));
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x)
      out[row * D + d] = (xr[d] - mean) * rstd * (w ? w[d] : T(1)) + (b ? b[d] : T(0));
    if (threadIdx.x == 0) {
      save_mean[row] = mean;
      save_rstd[row] = rstd;
    }
  }
}

// dx = rstd (gw - mean(gw) - xhat mean(gw xhat)), gw = g * w, per row.
template <class T>
__global__ void layer_norm_dx_kernel(const T* g, const T* x, const T* w, const T* mean, const T* rstd, T* dx,
                                     int64_t R, int64_t D) {
  for (int64_t row = blockIdx.x; row < R; row += gridDim.x) {
    const T m = mean[row], r = rstd[row];
    T a = 0, c = 0;  // sums of gw and gw * xhat
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
      const T gw = g[row * D + d] * (w ? w[d] : T(1));
      a += gw;
      c += gw * (x[row * D + d] - m) * r;
    }
    a = block_sum(a) / T(D);
    c = block_sum(c) / T(D);
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
      const T gw = g[row * D + d] * (w ? w[d] : T(1));
      dx[row * D + d] = r * (gw - a - (x[row * D + d] - m) * r * c);
    }
  }
}

// dweight[d] = sum_rows g xhat, dbias[d] = sum_rows g: one thread per feature.
template <class T>
__global__ void layer_norm_dwb_kernel(const T* g, const T* x, const T* mean, const T* rstd, T* dw, T* db, int64_t R,
                                      int64_t D) {
  for (int64_t d = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; d < D; d += int64_t(gridDim.x) * blockDim.x) {
    T sw = 0, sb = 0;
    for (int64_t row = 0; row < R; ++row) {
      const T gv = g[row * D + d];
      sw += gv * (x[row * D + d] - mean[row]) * rstd[row];
      sb += gv;
    }
    if (dw) dw[d] = sw;
    if (db) db[d] = sb;
  }
}

void check_dtype(DType dt) {
  KILN_CHECK(dt == DType::float32 || dt == DType::float64, "layer_norm: the CUDA kernel takes float32 or float64, "
             "got ", dtype_name(dt));
}

void layer_norm_forward_cuda(DType dt, const void* x, const void* w, const void* b, void* out, void* save_mean,
                             void* save_rstd, int64_t R, int64_t D, double eps) {
  check_dtype(dt);
  if (R == 0) return;
  cudaStream_t s = cuda::current_raw_stream();
  const int blocks = cuda::reduce_blocks(R);
  auto run = [&]<class T>() {
    layer_norm_forward_kernel<T><<<blocks, kReduceThreads, 0, s>>>(
        static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(b), static_cast<T*>(out),
        static_cast<T*>(save_mean), static_cast<T*>(save_rstd), R, D, eps);
  };
  if (dt == DType::float32) run.template operator()<float>();
  else run.template operator()<double>();
  KILN_CUDA_CHECK_LAUNCH();
}

void layer_norm_backward_cuda(DType dt, const void* g, const void* x, const void* w, const void* mean,
                              const void* rstd, void* dx, void* dw, void* db, int64_t R, int64_t D) {
  check_dtype(dt);
  cudaStream_t s = cuda::current_raw_stream();
  auto run = [&]<class T>() {
    const T *gt = static_cast<const T*>(g), *xt = static_cast<const T*>(x), *mt = static_cast<const T*>(mean),
            *rt = static_cast<const T*>(rstd);
    if (dx && R > 0)
      layer_norm_dx_kernel<T><<<cuda::reduce_blocks(R), kReduceThreads, 0, s>>>(
          gt, xt, static_cast<const T*>(w), mt, rt, static_cast<T*>(dx), R, D);
    if ((dw || db) && D > 0)
      layer_norm_dwb_kernel<T><<<int(std::min<int64_t>((D + 255) / 256, 65535)), 256, 0, s>>>(
          gt, xt, mt, rt, static_cast<T*>(dw), static_cast<T*>(db), R, D);
  };
  if (dt == DType::float32) run.template operator()<float>();
  else run.template operator()<double>();
  KILN_CUDA_CHECK_LAUNCH();
}

const LayerNormKernels kLayerNormCuda{&layer_norm_forward_cuda, &layer_norm_backward_cuda};

}  // namespace

void register_cuda_norm() {
  register_kernel(Op::layer_norm, DeviceType::CUDA, const_cast<LayerNormKernels*>(&kLayerNormCuda));
}

}  // namespace kiln
