// CUDA kernels of the loss family with the CPU's kernel types (ops/kernels/loss.h):
// fused cross entropy (one block per (n, s) row over the c classes: max, sum of exp and,
// with label smoothing, sum of logits by block reductions), nll_loss and mse_loss. The
// reduced mse sums fixed per-block partials in a fixed order: deterministic, no atomics.
#include <algorithm>
#include <limits>
#include "kiln/core/cuda/check.h"
#include "kiln/core/cuda/index_math.h"
#include "kiln/core/cuda/runtime.h"
#include "kiln/core/error.h"
#include "kiln/core/tensor.h"
#include "kiln/ops/kernels/loss.h"
#include "kiln/ops/cuda/block_reduce.cuh"
#include "kiln/ops/cuda/reduce_index.h"
#include "kiln/ops/cuda/row_kernels.h"
#include "kiln/ops/cuda/register.h"
#include "kiln/ops/cuda/shape_cuda.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/math.h"

namespace kiln {
namespace {

using cuda::kReduceThreads;
using cuda::reduce_elem_offset;

// Calls f.template operator()<T>() for float32 / float64 (nll_loss and mse_loss: the op
// layer casts 16-bit inputs to float32; cross_entropy_cuda takes 16-bit logits itself).
template <class F>
void dispatch_loss(DType dt, const char* op, F&& f) {
  switch (dt) {
    case DType::float32: return f.template operator()<float>();
    case DType::float64: return f.template operator()<double>();
    default: KILN_FAIL(op, ": the CUDA kernel takes float32 or float64, got ", dtype_name(dt));
  }
}

#define KILN_GRID_STRIDE(i, n) \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

// ================================================================ kernels

// One block per row k = n * S + s of the logits (N, C, S): ops/cuda/row_kernels.h's
// cross_entropy_forward_row (run on the CPU by test_cuda_block_rows).
// X: how the logits and dlogits are stored (T, or a 16-bit float computed on as T = float:
// the kernels read it widened and round dx once).
template <class T, class X>
__global__ void cross_entropy_forward_kernel(const X* x, const int64_t* tg, T* loss, T* row_max, T* log_sum,
                                             int64_t rows, int64_t C, int64_t S, int64_t ignore_index, double eps) {
  for (int64_t k = blockIdx.x; k < rows; k += gridDim.x)
    cuda::rows::cross_entropy_forward_row<T>(cuda::DeviceBlock{}, k, x, tg, loss, row_max, log_sum, C, S,
                                             ignore_index, eps);
}

// dx[n, c, s] = g (softmax[c] - eps / C) - g (1 - eps) [c == t], 0 where ignored.
template <class T, class X>
__global__ void cross_entropy_backward_kernel(const X* x, const int64_t* tg, const T* row_max, const T* log_sum,
                                              const T* g, int64_t gs, double scale, X* dx, int64_t total, int64_t C,
                                              int64_t S, int64_t ignore_index, T eps, T smooth) {
  KILN_GRID_STRIDE(e, total) {
    const int64_t s = e % S, nc = e / S;
    const int64_t c = nc % C, n = nc / C, k = n * S + s;
    const int64_t t = tg[k];
    if (t == ignore_index) {
      dx[e] = X(T(0));
      continue;
    }
    const T gk = T(double(g[k * gs]) * scale);
    T v = gk * (math::fast_exp((T(x[e]) - row_max[k]) - log_sum[k]) - smooth);
    if (c == t) v -= gk * (T(1) - eps);
    dx[e] = X(v);
  }
}

template <class T>
__global__ void nll_forward_kernel(const T* lp, const int64_t* tg, T* loss, int64_t K, int64_t C, int64_t S,
                                   int64_t ignore_index) {
  KILN_GRID_STRIDE(k, K) {
    const int64_t t = tg[k];
    loss[k] = t == ignore_index ? T(0) : -lp[reduce_elem_offset(k, t, C, S)];
  }
}

template <class T>
__global__ void nll_backward_kernel(const int64_t* tg, const T* g, int64_t gs, double scale, T* d, int64_t total,
                                    int64_t C, int64_t S, int64_t ignore_index) {
  KILN_GRID_STRIDE(e, total) {
    const int64_t s = e % S, nc = e / S;
    const int64_t c = nc % C, k = (nc / C) * S + s;
    const int64_t t = tg[k];
    d[e] = (t != ignore_index && c == t) ? T(-double(g[k * gs]) * scale) : T(0);
  }
}

template <class T>
__global__ void mse_kernel(const T* x, const T* y, T* out, int64_t n) {
  KILN_GRID_STRIDE(i, n) out[i] = (x[i] - y[i]) * (x[i] - y[i]);
}

// Partial sums of (x - y)^2: block b takes i = b * B + t, + grid * B, ... (fixed by n).
template <class T>
__global__ void mse_partial_kernel(const T* x, const T* y, double* part, int64_t n) {
  cuda::rows::mse_partial_block<T>(cuda::DeviceBlock{}, blockIdx.x, gridDim.x, x, y, part, n);
}

// One block: out[0] = scale * sum of the partials.
template <class T>
__global__ void mse_finish_kernel(const double* part, int64_t np, T* out, double scale) {
  cuda::rows::mse_finish_block<T>(cuda::DeviceBlock{}, part, np, out, scale);
}

template <class T>
__global__ void mse_backward_kernel(const T* x, const T* y, const T* g, int64_t gs, T two_scale, T* dx, T* dy,
                                    int64_t n) {
  KILN_GRID_STRIDE(i, n) {
    const T d = two_scale * (x[i] - y[i]) * g[i * gs];
    if (dx) dx[i] = d;
    if (dy) dy[i] = -d;
  }
}

// ================================================================ launchers

void cross_entropy_cuda(DType dt, const CrossEntropyKernelArgs& a) {
  const int64_t rows = a.n * a.s;
  if (rows == 0) return;
  cudaStream_t st = cuda::current_raw_stream();
  // T: the loss's dtype; X: the logits' (a 16-bit X computes in float32)
  auto run = [&]<class T, class X>() {
    const X* x = static_cast<const X*>(a.logits);
    if (!a.backward) {
      cross_entropy_forward_kernel<T, X><<<cuda::reduce_blocks(rows), kReduceThreads, 0, st>>>(
          x, a.target, static_cast<T*>(a.loss), static_cast<T*>(a.row_max), static_cast<T*>(a.log_sum), rows, a.c,
          a.s, a.ignore_index, a.label_smoothing);
    } else {
      const int64_t total = rows * a.c;
      if (total == 0) return;
      const T eps = T(a.label_smoothing), smooth = a.c > 0 ? eps / T(a.c) : T(0);
      cross_entropy_backward_kernel<T, X><<<cuda::grid_for(total), cuda::kLoopBlock, 0, st>>>(
          x, a.target, static_cast<const T*>(a.row_max), static_cast<const T*>(a.log_sum),
          static_cast<const T*>(a.g), a.g_stride, a.scale,
          static_cast<X*>(a.dlogits), total, a.c, a.s, a.ignore_index, eps, smooth);
    }
    KILN_CUDA_CHECK_LAUNCH();
  };
  if (dt == DType::bfloat16) return run.template operator()<float, BFloat16>();
  if (dt == DType::float16) return run.template operator()<float, Half>();
  dispatch_loss(dt, "cross_entropy", [&]<class T>() { run.template operator()<T, T>(); });
}

void nll_loss_cuda(DType dt, const NllLossKernelArgs& a) {
  const int64_t K = a.n * a.s;
  if (K == 0) return;
  cudaStream_t st = cuda::current_raw_stream();
  dispatch_loss(dt, "nll_loss", [&]<class T>() {
    if (!a.backward) {
      nll_forward_kernel<T><<<cuda::grid_for(K), cuda::kLoopBlock, 0, st>>>(
          static_cast<const T*>(a.log_probs), a.target, static_cast<T*>(a.loss), K, a.c, a.s, a.ignore_index);
    } else {
      const int64_t total = K * a.c;
      if (total == 0) return;
      nll_backward_kernel<T><<<cuda::grid_for(total), cuda::kLoopBlock, 0, st>>>(
          a.target, static_cast<const T*>(a.g), a.g_stride, a.scale, static_cast<T*>(a.dlog_probs), total, a.c, a.s,
          a.ignore_index);
    }
    KILN_CUDA_CHECK_LAUNCH();
  });
}

/// Blocks of the reduced mse's first pass: a function of n only, so the summation order
/// (and the result) does not depend on the GPU.
int64_t mse_partials(int64_t n) { return std::clamp<int64_t>((n + 4 * kReduceThreads - 1) / (4 * kReduceThreads), 1, 1024); }

void mse_loss_cuda(DType dt, const MseLossKernelArgs& a) {
  const int64_t n = a.n;
  cudaStream_t st = cuda::current_raw_stream();
  dispatch_loss(dt, "mse_loss", [&]<class T>() {
    const T* x = static_cast<const T*>(a.input);
    const T* y = static_cast<const T*>(a.target);
    if (a.backward) {
      if (n == 0) return;
      mse_backward_kernel<T><<<cuda::grid_for(n), cuda::kLoopBlock, 0, st>>>(
          x, y, static_cast<const T*>(a.g), a.g_stride, T(2.0 * a.scale), static_cast<T*>(a.dinput),
          static_cast<T*>(a.dtarget), n);
    } else if (!a.reduce) {
      if (n == 0) return;
      mse_kernel<T><<<cuda::grid_for(n), cuda::kLoopBlock, 0, st>>>(x, y, static_cast<T*>(a.out), n);
    } else {
      const int64_t np = mse_partials(n);
      Tensor part = Tensor::empty({np}, DType::float64, Device::cuda(cuda::resolve_device(-1)));
      double* pp = static_cast<double*>(part.raw_data());
      mse_partial_kernel<T><<<int(np), kReduceThreads, 0, st>>>(x, y, pp, n);
      KILN_CUDA_CHECK_LAUNCH();
      mse_finish_kernel<T><<<1, kReduceThreads, 0, st>>>(pp, np, static_cast<T*>(a.out), a.scale);
    }
    KILN_CUDA_CHECK_LAUNCH();
  });
}

#undef KILN_GRID_STRIDE

}  // namespace

void register_cuda_loss() {
  register_kernel(Op::cross_entropy, DeviceType::CUDA, &cross_entropy_cuda);
  register_kernel(Op::nll_loss, DeviceType::CUDA, &nll_loss_cuda);
  register_kernel(Op::mse_loss, DeviceType::CUDA, &mse_loss_cuda);
}

}  // namespace kiln
