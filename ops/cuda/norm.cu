// CUDA kernels of the norm family with the CPU's kernel structs (ops/kernels/norm.h).
// batch_norm: training forward / backward and inference forward through cuDNN (spatial
// mode), the eval-mode backward as small own kernels. layer_norm: one block per row for
// the row statistics and dx; dweight / dbias as a two-stage column reduction (blocks over
// chunks of rows write partial sums, a second pass adds them in chunk order: deterministic).
#include <cudnn.h>
#include <algorithm>
#include <climits>
#include <cmath>
#include "kiln/core/cuda/lazy_library.h"
#include "kiln/core/cuda/runtime.h"
#include "kiln/core/error.h"
#include "kiln/core/tensor.h"
#include "kiln/ops/kernels/norm.h"
#include "kiln/ops/cuda/cudnn_readback.h"
#include "kiln/ops/cuda/block_reduce.cuh"
#include "kiln/ops/cuda/row_kernels.h"
#include "kiln/ops/cuda/handles.h"
#include "kiln/ops/cuda/register.h"
#include "kiln/ops/dispatch.h"

namespace kiln {
namespace {

using cuda::kReduceThreads;

// The row bodies are ops/cuda/row_kernels.h's (run on the CPU by test_cuda_block_rows).
template <class T>
__global__ void layer_norm_forward_kernel(const T* x, const T* w, const T* b, T* out, T* save_mean, T* save_rstd,
                                          int64_t R, int64_t D, double eps) {
  for (int64_t row = blockIdx.x; row < R; row += gridDim.x)
    cuda::rows::layer_norm_forward_row<T>(cuda::DeviceBlock{}, row, x, w, b, out, save_mean, save_rstd, D, eps);
}

// dx = rstd (gw - mean(gw) - xhat mean(gw xhat)), gw = g * w, per row.
template <class T>
__global__ void layer_norm_dx_kernel(const T* g, const T* x, const T* w, const T* mean, const T* rstd, T* dx,
                                     int64_t R, int64_t D) {
  for (int64_t row = blockIdx.x; row < R; row += gridDim.x)
    cuda::rows::layer_norm_dx_row<T>(cuda::DeviceBlock{}, row, g, x, w, mean, rstd, dx, D);
}

// dweight / dbias, stage 1: block (tile, chunk) sums rows [chunk * rows_per_chunk, ...) of
// features tile * blockDim + t into part_w / part_b (chunks, D): g xhat and g.
template <class T>
__global__ void layer_norm_dwb_partial_kernel(const T* g, const T* x, const T* mean, const T* rstd, T* part_w,
                                              T* part_b, int64_t R, int64_t D, int64_t rows_per_chunk) {
  const int64_t chunk = blockIdx.y;
  const int64_t r0 = chunk * rows_per_chunk, r1 = min(R, r0 + rows_per_chunk);
  for (int64_t d = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; d < D; d += int64_t(gridDim.x) * blockDim.x) {
    T sw = 0, sb = 0;
    for (int64_t row = r0; row < r1; ++row) {  // consecutive threads read consecutive features
      const T gv = g[row * D + d];
      sw += gv * (x[row * D + d] - mean[row]) * rstd[row];
      sb += gv;
    }
    part_w[chunk * D + d] = sw;
    part_b[chunk * D + d] = sb;
  }
}

// Stage 2: dweight[d] / dbias[d] = sum over chunks of the partials, in chunk order.
template <class T>
__global__ void layer_norm_dwb_final_kernel(const T* part_w, const T* part_b, T* dw, T* db, int64_t chunks,
                                            int64_t D) {
  for (int64_t d = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; d < D; d += int64_t(gridDim.x) * blockDim.x) {
    T sw = 0, sb = 0;
    for (int64_t c = 0; c < chunks; ++c) {
      sw += part_w[c * D + d];
      sb += part_b[c * D + d];
    }
    if (dw) dw[d] = sw;
    if (db) db[d] = sb;
  }
}

// ---------------------------------------------------------------- batch norm kernels

template <class T>
__global__ void fill_kernel(T* p, T v, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = v;
}

// Eval forward's saved stats: save_mean = running_mean, save_invstd = 1/sqrt(running_var + eps).
template <class T>
__global__ void bn_eval_stats_kernel(const T* rmean, const T* rvar, T* smean, T* sinv, int64_t C, double eps) {
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < C; c += int64_t(gridDim.x) * blockDim.x) {
    smean[c] = rmean[c];
    sinv[c] = T(1.0 / sqrt(double(rvar[c]) + eps));
  }
}

// Eval backward, dx (N, C, S) = g w invstd.
template <class T>
__global__ void bn_eval_dx_kernel(const T* g, const T* w, const T* sinv, T* dx, int64_t C, int64_t S, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = (i / S) % C;
    dx[i] = g[i] * (w ? w[c] : T(1)) * sinv[c];
  }
}

// Eval backward, one block per channel: dweight = invstd sum g (x - mean), dbias = sum g.
template <class T>
__global__ void bn_eval_dwb_kernel(const T* g, const T* x, const T* smean, const T* sinv, T* dw, T* db, int64_t N,
                                   int64_t C, int64_t S) {
  for (int64_t c = blockIdx.x; c < C; c += gridDim.x)
    cuda::rows::bn_eval_dwb_channel<T>(cuda::DeviceBlock{}, c, g, x, smean, sinv, dw, db, N, C, S);
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
    if ((dw || db) && D > 0) {
      // Chunks of rows so that (feature tiles x chunks) blocks fill the GPU about 4 times,
      // each chunk at least 8 rows; partial sums (2, chunks, D) from the caching allocator.
      const int64_t tiles = std::min<int64_t>((D + 255) / 256, 65535);
      const int64_t want = std::clamp<int64_t>((4 * cuda::multiprocessor_count(-1) + tiles - 1) / tiles, 1, 1024);
      const int64_t rows_per_chunk = std::max<int64_t>(8, (R + want - 1) / want);
      const int64_t chunks = std::max<int64_t>(1, (R + rows_per_chunk - 1) / rows_per_chunk);
      Tensor part = Tensor::empty({2 * chunks * D}, dt, Device::cuda(cuda::resolve_device(-1)));
      T* pw = static_cast<T*>(part.raw_data());
      T* pb = pw + chunks * D;
      layer_norm_dwb_partial_kernel<T><<<dim3(unsigned(tiles), unsigned(chunks)), 256, 0, s>>>(gt, xt, mt, rt, pw, pb,
                                                                                             R, D, rows_per_chunk);
      KILN_CUDA_CHECK_LAUNCH();
      layer_norm_dwb_final_kernel<T><<<int(tiles), 256, 0, s>>>(pw, pb, static_cast<T*>(dw), static_cast<T*>(db),
                                                                chunks, D);
    }
  };
  if (dt == DType::float32) run.template operator()<float>();
  else run.template operator()<double>();
  KILN_CUDA_CHECK_LAUNCH();
}

// ---------------------------------------------------------------- batch norm (cuDNN)

cudnnHandle_t cudnn_handle_for_current_stream() { return cuda::cudnn_handle(); }  // ops/cuda/handles.cu

void check_bn_dtype(DType dt) {
  KILN_CHECK(dt == DType::float32 || dt == DType::float64, "batch_norm: the CUDA kernel takes float32 or float64, "
             "got ", dtype_name(dt), " (16-bit inputs run batch_norm in float32 under autocast)");
}

constexpr int kThreads = 256;
int bn_blocks(int64_t n) {
  const int64_t cap = int64_t(cuda::multiprocessor_count(-1)) * 8;
  return int(std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, cap)));
}

/// A (C) tensor of dtype dt filled with v (a stand-in for a null weight or bias).
Tensor filled(DType dt, int64_t C, double v) {
  Tensor t = Tensor::empty({C}, dt, Device::cuda(cuda::resolve_device(-1)));
  auto run = [&]<class T>() {
    fill_kernel<T><<<bn_blocks(C), kThreads, 0, cuda::current_raw_stream()>>>(static_cast<T*>(t.raw_data()), T(v),
                                                                              C);
  };
  if (dt == DType::float32) run.template operator()<float>();
  else run.template operator()<double>();
  KILN_CUDA_CHECK_LAUNCH();
  return t;
}

/// Descriptors of x (N, C, S) as NCHW (N, C, S, 1) and of the per-channel tensors (1, C, 1, 1).
struct BnDescs {
  cudnnTensorDescriptor_t x = nullptr, param = nullptr;
  BnDescs(DType dt, int64_t N, int64_t C, int64_t S) {
    KILN_CHECK(N <= INT_MAX && C <= INT_MAX && S <= INT_MAX && N * C * S < (int64_t(1) << 31),
               "batch_norm: the CUDA kernel takes fewer than 2^31 elements, got (N, C, spatial) = (", N, ", ", C,
               ", ", S, ")");
    KILN_CUDNN_CHECK(KILN_LAZY(cudnn, cudnnCreateTensorDescriptor)(&x));
    KILN_CUDNN_CHECK(KILN_LAZY(cudnn, cudnnCreateTensorDescriptor)(&param));
    KILN_CUDNN_CHECK(KILN_LAZY(cudnn, cudnnSetTensor4dDescriptor)(x, CUDNN_TENSOR_NCHW,
                                                dt == DType::float64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT, int(N),
                                                int(C), int(S), 1));
    KILN_CUDNN_CHECK(KILN_LAZY(cudnn, cudnnDeriveBNTensorDescriptor)(param, x, CUDNN_BATCHNORM_SPATIAL));
  }
  ~BnDescs() {
    KILN_LAZY(cudnn, cudnnDestroyTensorDescriptor)(param);
    KILN_LAZY(cudnn, cudnnDestroyTensorDescriptor)(x);
  }
  BnDescs(const BnDescs&) = delete;
  BnDescs& operator=(const BnDescs&) = delete;
};

/// 1 and 0 in the scaling type cuDNN expects (double for double data, else float).
struct BnScale {
  double d1 = 1, d0 = 0;
  float f1 = 1, f0 = 0;
  const void* one(DType dt) const { return dt == DType::float64 ? static_cast<const void*>(&d1) : &f1; }
  const void* zero(DType dt) const { return dt == DType::float64 ? static_cast<const void*>(&d0) : &f0; }
};

// cuDNN's training forward matches the interface: running stats r = (1 - f) r + f stat with
// f = momentum and the unbiased variance for r_var; saved inverse variance = 1/sqrt(var + eps).
void batch_norm_forward_train_cuda(DType dt, const void* x, const void* w, const void* b, void* out, void* smean,
                                   void* sinv, void* rmean, void* rvar, int64_t N, int64_t C, int64_t S,
                                   double momentum, double eps) {
  check_bn_dtype(dt);
  if (N * C * S == 0) return;
  KILN_CHECK(eps >= CUDNN_BN_MIN_EPSILON, "batch_norm: eps ", eps, " is below cuDNN's minimum ", CUDNN_BN_MIN_EPSILON);
  BnDescs d(dt, N, C, S);
  Tensor ones = w ? Tensor() : filled(dt, C, 1.0), zeros = b ? Tensor() : filled(dt, C, 0.0);
  cudnnHandle_t h = cudnn_handle_for_current_stream();
  const BnScale sc;
  KILN_CUDNN_CHECK(KILN_LAZY(cudnn, cudnnBatchNormalizationForwardTraining)(
      h, CUDNN_BATCHNORM_SPATIAL, sc.one(dt), sc.zero(dt), d.x, x, d.x, out, d.param, w ? w : ones.raw_data(),
      b ? b : zeros.raw_data(), momentum, rmean, rvar, eps, smean, sinv));
}

void batch_norm_forward_eval_cuda(DType dt, const void* x, const void* w, const void* b, const void* rmean,
                                  const void* rvar, void* out, void* smean, void* sinv, int64_t N, int64_t C,
                                  int64_t S, double eps) {
  check_bn_dtype(dt);
  if (C == 0) return;
  KILN_CHECK(eps >= CUDNN_BN_MIN_EPSILON, "batch_norm: eps ", eps, " is below cuDNN's minimum ", CUDNN_BN_MIN_EPSILON);
  cudaStream_t s = cuda::current_raw_stream();
  auto run = [&]<class T>() {
    bn_eval_stats_kernel<T><<<bn_blocks(C), kThreads, 0, s>>>(static_cast<const T*>(rmean), static_cast<const T*>(rvar),
                                                             static_cast<T*>(smean), static_cast<T*>(sinv), C, eps);
  };
  if (dt == DType::float32) run.template operator()<float>();
  else run.template operator()<double>();
  KILN_CUDA_CHECK_LAUNCH();
  if (N * S == 0) return;
  BnDescs d(dt, N, C, S);
  Tensor ones = w ? Tensor() : filled(dt, C, 1.0), zeros = b ? Tensor() : filled(dt, C, 0.0);
  cudnnHandle_t h = cudnn_handle_for_current_stream();
  const BnScale sc;
  KILN_CUDNN_CHECK(KILN_LAZY(cudnn, cudnnBatchNormalizationForwardInference)(
      h, CUDNN_BATCHNORM_SPATIAL, sc.one(dt), sc.zero(dt), d.x, x, d.x, out, d.param, w ? w : ones.raw_data(),
      b ? b : zeros.raw_data(), rmean, rvar, eps));
}

// training: cuDNN's backward with the saved mean / inverse std (outputs not wanted go to
// scratch buffers: cuDNN writes all three); eval: dx = g w invstd and the channel sums.
void batch_norm_backward_cuda(DType dt, const void* g, const void* x, const void* w, const void* smean,
                              const void* sinv, void* dx, void* dw, void* db, int64_t N, int64_t C, int64_t S,
                              bool training) {
  check_bn_dtype(dt);
  if (C == 0 || (!dx && !dw && !db)) return;
  cudaStream_t s = cuda::current_raw_stream();
  if (!training || N * S == 0) {
    auto run = [&]<class T>() {
      const T *gt = static_cast<const T*>(g), *wt = static_cast<const T*>(w), *it = static_cast<const T*>(sinv);
      if (dx && N * S > 0)
        bn_eval_dx_kernel<T><<<bn_blocks(N * C * S), kThreads, 0, s>>>(gt, wt, it, static_cast<T*>(dx), C, S,
                                                                      N * C * S);
      if (dw || db)
        bn_eval_dwb_kernel<T><<<int(std::min<int64_t>(C, 65535)), kReduceThreads, 0, s>>>(
            gt, static_cast<const T*>(x), static_cast<const T*>(smean), it, static_cast<T*>(dw), static_cast<T*>(db),
            N, C, S);
    };
    if (dt == DType::float32) run.template operator()<float>();
    else run.template operator()<double>();
    KILN_CUDA_CHECK_LAUNCH();
    return;
  }
  BnDescs d(dt, N, C, S);
  const Device dev = Device::cuda(cuda::resolve_device(-1));
  Tensor ones = w ? Tensor() : filled(dt, C, 1.0);
  Tensor dx_tmp = dx ? Tensor() : Tensor::empty({N * C * S}, dt, dev);
  Tensor dwb_tmp = dw && db ? Tensor() : Tensor::empty({2 * C}, dt, dev);
  char* tmp = dwb_tmp.defined() ? static_cast<char*>(dwb_tmp.raw_data()) : nullptr;
  const size_t esize = dt == DType::float64 ? 8 : 4;
  cudnnHandle_t h = cudnn_handle_for_current_stream();
  const BnScale sc;
  // epsilon only has to be valid here: the saved mean and inverse std are used as given.
  KILN_CUDNN_CHECK(KILN_LAZY(cudnn, cudnnBatchNormalizationBackward)(
      h, CUDNN_BATCHNORM_SPATIAL, sc.one(dt), sc.zero(dt), sc.one(dt), sc.zero(dt), d.x, x, d.x, g, d.x,
      dx ? dx : dx_tmp.raw_data(), d.param, w ? w : ones.raw_data(), dw ? dw : tmp,
      db ? db : tmp + size_t(C) * esize, std::max(1e-5, CUDNN_BN_MIN_EPSILON), smean, sinv));
}

const LayerNormKernels kLayerNormCuda{&layer_norm_forward_cuda, &layer_norm_backward_cuda};
const BatchNormKernels kBatchNormCuda{&batch_norm_forward_train_cuda, &batch_norm_forward_eval_cuda,
                                      &batch_norm_backward_cuda};

}  // namespace

cuda::BatchNormDescriptorReadback cuda::batch_norm_descriptor_readback(DType dtype, int64_t N, int64_t C, int64_t S) {
  BnDescs d(dtype, N, C, S);
  BatchNormDescriptorReadback r;
  int ns, cs, hs, ws;
  cudnnDataType_t tx, tp;
  KILN_CUDNN_CHECK(
      KILN_LAZY(cudnn, cudnnGetTensor4dDescriptor)(d.x, &tx, &r.x[0], &r.x[1], &r.x[2], &r.x[3], &ns, &cs, &hs, &ws));
  KILN_CUDNN_CHECK(KILN_LAZY(cudnn, cudnnGetTensor4dDescriptor)(d.param, &tp, &r.param[0], &r.param[1], &r.param[2],
                                                                &r.param[3], &ns, &cs, &hs, &ws));
  r.x_type = int(tx);
  r.param_type = int(tp);
  return r;
}

void register_cuda_norm() {
  register_kernel(Op::layer_norm, DeviceType::CUDA, &kLayerNormCuda);
  register_kernel(Op::batch_norm, DeviceType::CUDA, &kBatchNormCuda);
}

}  // namespace kiln
