// CUDA kernels of the conv op family with the CPU's kernel tables (ops/kernels/conv.h):
// conv2d forward / backward-data / backward-filter through cuDNN (algorithm by cuDNN's
// heuristics, or timed when kiln::cudnn_benchmark(true), cached per shape), bias add and
// bias gradient as small own kernels; max / avg / adaptive-avg / adaptive-max pooling as own kernels
// (the kernel interface hands the backward only dy and the argmax, which cuDNN's pooling
// backward cannot use) with the window math of ops/cuda/pool_index.h.
#include <cudnn.h>
#include <algorithm>
#include <array>
#include <climits>
#include <map>
#include <mutex>
#include "kiln/core/cuda/lazy_library.h"
#include "kiln/core/cuda/runtime.h"
#include "kiln/core/error.h"
#include "kiln/core/tensor.h"
#include "kiln/ops/conv.h"
#include "kiln/ops/cuda/conv_algo.h"
#include "kiln/ops/cuda/cudnn_readback.h"
#include "kiln/ops/kernels/conv.h"
#include "kiln/ops/cuda/block_reduce.cuh"
#include "kiln/ops/cuda/dtype_dispatch.h"
#include "kiln/ops/cuda/handles.h"
#include "kiln/ops/cuda/pool_index.h"
#include "kiln/ops/cuda/register.h"
#include "kiln/ops/cuda/row_kernels.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/linalg.h"

namespace kiln {
namespace {

using cuda::kReduceThreads;

/// Accumulation type: float for the 16-bit types and float32, double for float64.
template <class T>
struct AccOf {
  using type = float;
};
template <>
struct AccOf<double> {
  using type = double;
};

// ================================================================== kernels

// y (N, O, L) += bias (O).
template <class T>
__global__ void add_bias_kernel(T* y, const T* bias, int64_t O, int64_t L, int64_t n) {
  using A = typename AccOf<T>::type;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = T(A(y[i]) + A(bias[(i / L) % O]));
}

// dbias[o] = sum over (n, l) of dy (N, O, L): one block per channel, a fixed-order block
// sum (ops/cuda/row_kernels.h's bias_grad_channel, run on the CPU by test_cuda_block_rows).
template <class T>
__global__ void bias_grad_kernel(const T* dy, T* db, int64_t N, int64_t O, int64_t L) {
  for (int64_t o = blockIdx.x; o < O; o += gridDim.x)
    cuda::rows::bias_grad_channel<T, typename AccOf<T>::type>(cuda::DeviceBlock{}, o, dy, db, N, O, L);
}

// One thread per output (p, oh, ow).
template <class T>
__global__ void max_pool_forward_kernel(Pool2dGeom g, const T* x, T* y, int64_t* idx) {
  using A = typename AccOf<T>::type;
  const int64_t n = g.P * g.OH * g.OW;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t p, oh, ow;
    cuda::split3(i, g.OH, g.OW, p, oh, ow);
    cuda::max_pool_out<T, A>(g, x + p * g.H * g.W, oh, ow, y[i], idx[i]);
  }
}

// One thread per input (p, h, w), gathering the windows whose argmax it is.
template <class T>
__global__ void max_pool_backward_kernel(Pool2dGeom g, const T* dy, const int64_t* idx, T* dx) {
  using A = typename AccOf<T>::type;
  const int64_t n = g.P * g.H * g.W;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t p, h, w;
    cuda::split3(i, g.H, g.W, p, h, w);
    dx[i] = cuda::max_pool_dx<T, A>(g, dy + p * g.OH * g.OW, idx + p * g.OH * g.OW, h, w);
  }
}

template <class T>
__global__ void avg_pool_forward_kernel(Pool2dGeom g, bool cip, const T* x, T* y) {
  using A = typename AccOf<T>::type;
  const int64_t n = g.P * g.OH * g.OW;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t p, oh, ow;
    cuda::split3(i, g.OH, g.OW, p, oh, ow);
    y[i] = cuda::avg_pool_out<T, A>(g, cip, x + p * g.H * g.W, oh, ow);
  }
}

template <class T>
__global__ void avg_pool_backward_kernel(Pool2dGeom g, bool cip, const T* dy, T* dx) {
  using A = typename AccOf<T>::type;
  const int64_t n = g.P * g.H * g.W;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t p, h, w;
    cuda::split3(i, g.H, g.W, p, h, w);
    dx[i] = cuda::avg_pool_dx<T, A>(g, cip, dy + p * g.OH * g.OW, h, w);
  }
}

template <class T>
__global__ void adaptive_avg_forward_kernel(Pool2dGeom g, const T* x, T* y) {
  using A = typename AccOf<T>::type;
  const int64_t n = g.P * g.OH * g.OW;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t p, oh, ow;
    cuda::split3(i, g.OH, g.OW, p, oh, ow);
    y[i] = cuda::adaptive_avg_out<T, A>(g, x + p * g.H * g.W, oh, ow);
  }
}

template <class T>
__global__ void adaptive_avg_backward_kernel(Pool2dGeom g, const T* dy, T* dx) {
  using A = typename AccOf<T>::type;
  const int64_t n = g.P * g.H * g.W;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t p, h, w;
    cuda::split3(i, g.H, g.W, p, h, w);
    dx[i] = cuda::adaptive_avg_dx<T, A>(g, dy + p * g.OH * g.OW, h, w);
  }
}

template <class T>
__global__ void adaptive_max_forward_kernel(Pool2dGeom g, const T* x, T* y, int64_t* idx) {
  using A = typename AccOf<T>::type;
  const int64_t n = g.P * g.OH * g.OW;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t p, oh, ow;
    cuda::split3(i, g.OH, g.OW, p, oh, ow);
    cuda::adaptive_max_out<T, A>(g, x + p * g.H * g.W, oh, ow, y[i], idx[i]);
  }
}

template <class T>
__global__ void adaptive_max_backward_kernel(Pool2dGeom g, const T* dy, const int64_t* idx, T* dx) {
  using A = typename AccOf<T>::type;
  const int64_t n = g.P * g.H * g.W;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t p, h, w;
    cuda::split3(i, g.H, g.W, p, h, w);
    dx[i] = cuda::adaptive_max_dx<T, A>(g, dy + p * g.OH * g.OW, idx + p * g.OH * g.OW, h, w);
  }
}

// ================================================================== launchers

constexpr int kThreads = 256;

/// Blocks for n elements with kThreads each, capped at 8 per multiprocessor (grid-stride).
int blocks_for(int64_t n) {
  const int64_t cap = int64_t(cuda::multiprocessor_count(-1)) * 8;
  return int(std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, cap)));
}

// ------------------------------------------------------------------ pooling

void max_pool_forward_cuda(DType dtype, const Pool2dGeom& g, const void* x, void* y, int64_t* idx) {
  const int64_t n = g.P * g.OH * g.OW;
  if (n == 0) return;
  cuda::dispatch_float(dtype, "max_pool2d", [&]<class T>() {
    max_pool_forward_kernel<T><<<blocks_for(n), kThreads, 0, cuda::current_raw_stream()>>>(
        g, static_cast<const T*>(x), static_cast<T*>(y), idx);
  });
  KILN_CUDA_CHECK_LAUNCH();
}

void max_pool_backward_cuda(DType dtype, const Pool2dGeom& g, const void* dy, const int64_t* idx, void* dx) {
  const int64_t n = g.P * g.H * g.W;
  if (n == 0) return;
  cuda::dispatch_float(dtype, "max_pool2d", [&]<class T>() {
    max_pool_backward_kernel<T><<<blocks_for(n), kThreads, 0, cuda::current_raw_stream()>>>(
        g, static_cast<const T*>(dy), idx, static_cast<T*>(dx));
  });
  KILN_CUDA_CHECK_LAUNCH();
}

void avg_pool_forward_cuda(DType dtype, const Pool2dGeom& g, bool cip, const void* x, void* y) {
  const int64_t n = g.P * g.OH * g.OW;
  if (n == 0) return;
  cuda::dispatch_float(dtype, "avg_pool2d", [&]<class T>() {
    avg_pool_forward_kernel<T><<<blocks_for(n), kThreads, 0, cuda::current_raw_stream()>>>(
        g, cip, static_cast<const T*>(x), static_cast<T*>(y));
  });
  KILN_CUDA_CHECK_LAUNCH();
}

void avg_pool_backward_cuda(DType dtype, const Pool2dGeom& g, bool cip, const void* dy, void* dx) {
  const int64_t n = g.P * g.H * g.W;
  if (n == 0) return;
  cuda::dispatch_float(dtype, "avg_pool2d", [&]<class T>() {
    avg_pool_backward_kernel<T><<<blocks_for(n), kThreads, 0, cuda::current_raw_stream()>>>(
        g, cip, static_cast<const T*>(dy), static_cast<T*>(dx));
  });
  KILN_CUDA_CHECK_LAUNCH();
}

void adaptive_avg_forward_cuda(DType dtype, const Pool2dGeom& g, const void* x, void* y) {
  const int64_t n = g.P * g.OH * g.OW;
  if (n == 0) return;
  cuda::dispatch_float(dtype, "adaptive_avg_pool2d", [&]<class T>() {
    adaptive_avg_forward_kernel<T><<<blocks_for(n), kThreads, 0, cuda::current_raw_stream()>>>(
        g, static_cast<const T*>(x), static_cast<T*>(y));
  });
  KILN_CUDA_CHECK_LAUNCH();
}

void adaptive_avg_backward_cuda(DType dtype, const Pool2dGeom& g, const void* dy, void* dx) {
  const int64_t n = g.P * g.H * g.W;
  if (n == 0) return;
  cuda::dispatch_float(dtype, "adaptive_avg_pool2d", [&]<class T>() {
    adaptive_avg_backward_kernel<T><<<blocks_for(n), kThreads, 0, cuda::current_raw_stream()>>>(
        g, static_cast<const T*>(dy), static_cast<T*>(dx));
  });
  KILN_CUDA_CHECK_LAUNCH();
}

void adaptive_max_forward_cuda(DType dtype, const Pool2dGeom& g, const void* x, void* y, int64_t* idx) {
  const int64_t n = g.P * g.OH * g.OW;
  if (n == 0) return;
  cuda::dispatch_float(dtype, "adaptive_max_pool2d", [&]<class T>() {
    adaptive_max_forward_kernel<T><<<blocks_for(n), kThreads, 0, cuda::current_raw_stream()>>>(
        g, static_cast<const T*>(x), static_cast<T*>(y), idx);
  });
  KILN_CUDA_CHECK_LAUNCH();
}

void adaptive_max_backward_cuda(DType dtype, const Pool2dGeom& g, const void* dy, const int64_t* idx, void* dx) {
  const int64_t n = g.P * g.H * g.W;
  if (n == 0) return;
  cuda::dispatch_float(dtype, "adaptive_max_pool2d", [&]<class T>() {
    adaptive_max_backward_kernel<T><<<blocks_for(n), kThreads, 0, cuda::current_raw_stream()>>>(
        g, static_cast<const T*>(dy), idx, static_cast<T*>(dx));
  });
  KILN_CUDA_CHECK_LAUNCH();
}

// ------------------------------------------------------------------ cuDNN plumbing

cudnnHandle_t handle_for_current_stream() { return cuda::cudnn_handle(); }  // ops/cuda/handles.cu

cudnnDataType_t cudnn_dtype(DType d) {
  switch (d) {
    case DType::float32: return CUDNN_DATA_FLOAT;
    case DType::float64: return CUDNN_DATA_DOUBLE;
    case DType::float16: return CUDNN_DATA_HALF;
    case DType::bfloat16: return CUDNN_DATA_BFLOAT16;
    default:
      KILN_FAIL("conv2d: no CUDA kernel for dtype ", dtype_name(d),
                " (expected float32, float64, float16 or bfloat16)");
  }
}

/// Math type of the convolution: float32 uses TF32 only when the float32 matmul precision
/// allows it (set_float32_matmul_precision("high"), ops/linalg.h), else strict FMA math;
/// the other dtypes take CUDNN_DEFAULT_MATH (tensor cores for 16-bit data).
cudnnMathType_t math_for(DType d) {
  if (d == DType::float32) return float32_matmul_allows_tf32() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
  return CUDNN_DEFAULT_MATH;
}

struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  TensorDesc() { KILN_CUDNN_CHECK(KILN_LAZY(cudnn, cudnnCreateTensorDescriptor)(&d)); }
  ~TensorDesc() { KILN_LAZY(cudnn, cudnnDestroyTensorDescriptor)(d); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
};
struct FilterDesc {
  cudnnFilterDescriptor_t d = nullptr;
  FilterDesc() { KILN_CUDNN_CHECK(KILN_LAZY(cudnn, cudnnCreateFilterDescriptor)(&d)); }
  ~FilterDesc() { KILN_LAZY(cudnn, cudnnDestroyFilterDescriptor)(d); }
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
};
struct ConvDesc {
  cudnnConvolutionDescriptor_t d = nullptr;
  ConvDesc() { KILN_CUDNN_CHECK(KILN_LAZY(cudnn, cudnnCreateConvolutionDescriptor)(&d)); }
  ~ConvDesc() { KILN_LAZY(cudnn, cudnnDestroyConvolutionDescriptor)(d); }
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
};

/// Descriptors of one conv2d call: x (N, C, H, W), w (O, C/groups, kH, kW), y (N, O, OH, OW).
struct ConvDescs {
  TensorDesc x, y;
  FilterDesc w;
  ConvDesc conv;
  cudnnMathType_t math;
  ConvDescs(DType dtype, const Conv2dGeom& g) : math(math_for(dtype)) {
    const cudnnDataType_t dt = cudnn_dtype(dtype);
    const int64_t dims[] = {g.N, g.C, g.H, g.W, g.O, g.kH, g.kW, g.sH, g.sW, g.pH, g.pW, g.dH, g.dW, g.OH, g.OW};
    for (int64_t v : dims)
      KILN_CHECK(v <= INT_MAX, "conv2d: sizes beyond 2^31 are not supported by the CUDA kernel (input (", g.N, ", ",
                 g.C, ", ", g.H, ", ", g.W, "), weight (", g.O, ", ", g.C / g.groups, ", ", g.kH, ", ", g.kW, "))");
    KILN_CHECK(g.N * g.C * g.H * g.W < (int64_t(1) << 31) && g.N * g.O * g.OH * g.OW < (int64_t(1) << 31),
               "conv2d: tensors of 2^31 or more elements are not supported by the CUDA kernel (input (", g.N, ", ",
               g.C, ", ", g.H, ", ", g.W, "), output (", g.N, ", ", g.O, ", ", g.OH, ", ", g.OW,
               ")); split the batch");
    KILN_CUDNN_CHECK(KILN_LAZY(cudnn, cudnnSetTensor4dDescriptor)(x.d, CUDNN_TENSOR_NCHW, dt, int(g.N), int(g.C),
                                                                  int(g.H), int(g.W)));
    KILN_CUDNN_CHECK(KILN_LAZY(cudnn, cudnnSetTensor4dDescriptor)(y.d, CUDNN_TENSOR_NCHW, dt, int(g.N), int(g.O),
                                                                  int(g.OH), int(g.OW)));
    KILN_CUDNN_CHECK(KILN_LAZY(cudnn, cudnnSetFilter4dDescriptor)(w.d, dt, CUDNN_TENSOR_NCHW, int(g.O),
                                                                  int(g.C / g.groups), int(g.kH), int(g.kW)));
    const cudnnDataType_t compute = dtype == DType::float64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    KILN_CUDNN_CHECK(KILN_LAZY(cudnn, cudnnSetConvolution2dDescriptor)(
        conv.d, int(g.pH), int(g.pW), int(g.sH), int(g.sW), int(g.dH), int(g.dW), CUDNN_CROSS_CORRELATION, compute));
    KILN_CUDNN_CHECK(KILN_LAZY(cudnn, cudnnSetConvolutionGroupCount)(conv.d, int(g.groups)));
    KILN_CUDNN_CHECK(KILN_LAZY(cudnn, cudnnSetConvolutionMathType)(conv.d, math));
  }
};

/// A device workspace of `bytes` from the caching allocator (undefined for 0 bytes).
Tensor workspace(size_t bytes) {
  if (bytes == 0) return Tensor();
  return Tensor::empty({int64_t(bytes)}, DType::uint8, Device::cuda(cuda::resolve_device(-1)));
}
void* ptr(const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; }

/// True when a workspace of `bytes` can be allocated now (it goes back to the cache at once).
bool workspace_fits(size_t bytes) {
  try {
    workspace(bytes);
    return true;
  } catch (const Error&) {
    return false;
  }
}

/// The largest workspace up to `bytes` that can be allocated now (halving on failure).
Tensor largest_workspace(size_t bytes, size_t& got) {
  for (got = bytes; got > 0; got /= 2) {
    try {
      return workspace(got);
    } catch (const Error&) {
    }
  }
  return Tensor();
}

enum class Dir { forward, backward_data, backward_filter };
const char* dir_name(Dir d) {
  return d == Dir::forward ? "forward" : d == Dir::backward_data ? "backward-data" : "backward-filter";
}

struct AlgoChoice {
  int algo;
  cudnnMathType_t math;
  size_t workspace;
};
using AlgoKey = std::array<int64_t, 21>;

AlgoKey algo_key(const Conv2dGeom& g, DType dtype, Dir dir, bool bench, cudnnMathType_t math) {
  return {g.N, g.C, g.H, g.W, g.O, g.kH, g.kW, g.sH, g.sW, g.pH, g.pW, g.dH, g.dW, g.groups, g.OH, g.OW,
          int64_t(dtype), int64_t(dir), int64_t(bench), int64_t(math), int64_t(cuda::resolve_device(-1))};
}

std::mutex g_algo_mu;
std::map<AlgoKey, AlgoChoice> g_algo_cache;

/// The algorithm for one direction, from the cache or by asking cuDNN: `heuristic(perf,
/// cap, &n)` lists algorithms by expected speed; with cudnn_benchmark on, `find(perf, cap,
/// &n, ws, bytes)` times them on the real buffers. Takes the first usable one: status
/// success, workspace allocatable, and (for float32 without TF32) listed with FMA math;
/// it runs with the math type it was listed with (pick_conv_algo, ops/cuda/conv_algo.h).
template <class Perf, class Heuristic, class Find>
AlgoChoice choose_algo(const Conv2dGeom& g, DType dtype, Dir dir, cudnnMathType_t math, const Heuristic& heuristic,
                       const Find& find) {
  const bool bench = cudnn_benchmark_enabled();
  const AlgoKey key = algo_key(g, dtype, dir, bench, math);
  {
    std::lock_guard<std::mutex> lock(g_algo_mu);
    auto it = g_algo_cache.find(key);
    if (it != g_algo_cache.end()) return it->second;
  }
  constexpr int kCap = 16;
  Perf perf[kCap];
  int n = 0;
  heuristic(perf, kCap, &n);
  if (bench) {
    size_t most = 0;
    for (int i = 0; i < n; ++i)
      if (perf[i].status == CUDNN_STATUS_SUCCESS) most = std::max(most, perf[i].memory);
    size_t free_bytes = 0, total_bytes = 0;  // stay below what the device has free outside the cache
    KILN_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    most = std::min(most, free_bytes / 10 * 9);
    size_t got = 0;
    Tensor ws = largest_workspace(most, got);
    n = 0;
    find(perf, kCap, &n, ptr(ws), got);  // sorted by measured time
  }
  std::vector<cuda::ConvAlgoCandidate> rows(static_cast<size_t>(std::max(n, 0)));
  for (size_t i = 0; i < rows.size(); ++i)
    rows[i] = {int(perf[i].algo), perf[i].status == CUDNN_STATUS_SUCCESS, int(perf[i].mathType), perf[i].memory};
  const bool fma_only = math == CUDNN_FMA_MATH;
  const int i = cuda::pick_conv_algo(rows, fma_only, [&](size_t bytes) { return bench || workspace_fits(bytes); });
  if (i >= 0) {
    const AlgoChoice c{rows[size_t(i)].algo, cudnnMathType_t(rows[size_t(i)].math), rows[size_t(i)].workspace};
    std::lock_guard<std::mutex> lock(g_algo_mu);
    g_algo_cache[key] = c;
    return c;
  }
  KILN_FAIL("conv2d: cuDNN offers no usable ", dir_name(dir), " algorithm", fma_only ? " with plain float32 (FMA) math" : "",
            " for input (", g.N, ", ", g.C, ", ", g.H, ", ", g.W, "), weight (", g.O, ", ", g.C / g.groups, ", ", g.kH,
            ", ", g.kW, "), stride (", g.sH, ", ", g.sW, "), padding (", g.pH, ", ", g.pW, "), dilation (", g.dH, ", ",
            g.dW, "), groups ", g.groups, ", dtype ", dtype_name(dtype),
            fma_only ? "; set_float32_matmul_precision(\"high\") lets it use TF32 algorithms" : "");
}

// ------------------------------------------------------------------ conv2d

/// alpha = 1, beta = 0 in the scaling type cuDNN expects (double for double data, else float).
struct Scale {
  double d1 = 1, d0 = 0;
  float f1 = 1, f0 = 0;
  const void* one(DType dt) const { return dt == DType::float64 ? static_cast<const void*>(&d1) : &f1; }
  const void* zero(DType dt) const { return dt == DType::float64 ? static_cast<const void*>(&d0) : &f0; }
};

void conv2d_forward_cuda(DType dtype, const Conv2dGeom& g, const void* x, const void* w, const void* bias, void* y) {
  ConvDescs d(dtype, g);
  cudnnHandle_t h = handle_for_current_stream();
  const AlgoChoice c = choose_algo<cudnnConvolutionFwdAlgoPerf_t>(
      g, dtype, Dir::forward, d.math,
      [&](cudnnConvolutionFwdAlgoPerf_t* p, int cap, int* n) {
        KILN_CUDNN_CHECK(
            KILN_LAZY(cudnn, cudnnGetConvolutionForwardAlgorithm_v7)(h, d.x.d, d.w.d, d.conv.d, d.y.d, cap, n, p));
      },
      [&](cudnnConvolutionFwdAlgoPerf_t* p, int cap, int* n, void* ws, size_t bytes) {
        KILN_CUDNN_CHECK(KILN_LAZY(cudnn, cudnnFindConvolutionForwardAlgorithmEx)(h, d.x.d, x, d.w.d, w, d.conv.d,
                                                                                  d.y.d, y, cap, n, p, ws, bytes));
      });
  KILN_CUDNN_CHECK(KILN_LAZY(cudnn, cudnnSetConvolutionMathType)(d.conv.d, c.math));
  size_t bytes = 0;  // the exact size for the algorithm with the math type now set
  KILN_CUDNN_CHECK(KILN_LAZY(cudnn, cudnnGetConvolutionForwardWorkspaceSize)(h, d.x.d, d.w.d, d.conv.d, d.y.d,
                                                           cudnnConvolutionFwdAlgo_t(c.algo), &bytes));
  bytes = std::max(bytes, c.workspace);
  Tensor ws = workspace(bytes);
  const Scale s;
  KILN_CUDNN_CHECK(KILN_LAZY(cudnn, cudnnConvolutionForward)(h, s.one(dtype), d.x.d, x, d.w.d, w, d.conv.d,
                                           cudnnConvolutionFwdAlgo_t(c.algo), ptr(ws), bytes, s.zero(dtype), d.y.d,
                                           y));
  if (bias) {
    const int64_t L = g.OH * g.OW, n = g.N * g.O * L;
    cuda::dispatch_float(dtype, "conv2d", [&]<class T>() {
      add_bias_kernel<T><<<blocks_for(n), kThreads, 0, cuda::current_raw_stream()>>>(
          static_cast<T*>(y), static_cast<const T*>(bias), g.O, L, n);
    });
    KILN_CUDA_CHECK_LAUNCH();
  }
}

void conv2d_backward_cuda(DType dtype, const Conv2dGeom& g, const void* x, const void* w, const void* dy, void* dx,
                          void* dw, void* dbias) {
  ConvDescs d(dtype, g);
  cudnnHandle_t h = handle_for_current_stream();
  const Scale s;
  if (dx) {
    const AlgoChoice c = choose_algo<cudnnConvolutionBwdDataAlgoPerf_t>(
        g, dtype, Dir::backward_data, d.math,
        [&](cudnnConvolutionBwdDataAlgoPerf_t* p, int cap, int* n) {
          KILN_CUDNN_CHECK(KILN_LAZY(cudnn, cudnnGetConvolutionBackwardDataAlgorithm_v7)(h, d.w.d, d.y.d, d.conv.d,
                                                                                         d.x.d, cap, n, p));
        },
        [&](cudnnConvolutionBwdDataAlgoPerf_t* p, int cap, int* n, void* ws, size_t bytes) {
          KILN_CUDNN_CHECK(KILN_LAZY(cudnn, cudnnFindConvolutionBackwardDataAlgorithmEx)(
              h, d.w.d, w, d.y.d, dy, d.conv.d, d.x.d, dx, cap, n, p, ws, bytes));
        });
    KILN_CUDNN_CHECK(KILN_LAZY(cudnn, cudnnSetConvolutionMathType)(d.conv.d, c.math));
    size_t bytes = 0;
    KILN_CUDNN_CHECK(KILN_LAZY(cudnn, cudnnGetConvolutionBackwardDataWorkspaceSize)(h, d.w.d, d.y.d, d.conv.d, d.x.d,
                                                                  cudnnConvolutionBwdDataAlgo_t(c.algo), &bytes));
    bytes = std::max(bytes, c.workspace);
    Tensor ws = workspace(bytes);
    KILN_CUDNN_CHECK(KILN_LAZY(cudnn, cudnnConvolutionBackwardData)(h, s.one(dtype), d.w.d, w, d.y.d, dy, d.conv.d,
                                                  cudnnConvolutionBwdDataAlgo_t(c.algo), ptr(ws), bytes,
                                                  s.zero(dtype), d.x.d, dx));
  }
  if (dw) {
    // the backward-data choice above may have changed the descriptor's math type
    KILN_CUDNN_CHECK(KILN_LAZY(cudnn, cudnnSetConvolutionMathType)(d.conv.d, d.math));
    const AlgoChoice c = choose_algo<cudnnConvolutionBwdFilterAlgoPerf_t>(
        g, dtype, Dir::backward_filter, d.math,
        [&](cudnnConvolutionBwdFilterAlgoPerf_t* p, int cap, int* n) {
          KILN_CUDNN_CHECK(KILN_LAZY(cudnn, cudnnGetConvolutionBackwardFilterAlgorithm_v7)(h, d.x.d, d.y.d, d.conv.d,
                                                                                           d.w.d, cap, n, p));
        },
        [&](cudnnConvolutionBwdFilterAlgoPerf_t* p, int cap, int* n, void* ws, size_t bytes) {
          KILN_CUDNN_CHECK(KILN_LAZY(cudnn, cudnnFindConvolutionBackwardFilterAlgorithmEx)(
              h, d.x.d, x, d.y.d, dy, d.conv.d, d.w.d, dw, cap, n, p, ws, bytes));
        });
    KILN_CUDNN_CHECK(KILN_LAZY(cudnn, cudnnSetConvolutionMathType)(d.conv.d, c.math));
    size_t bytes = 0;
    KILN_CUDNN_CHECK(KILN_LAZY(cudnn, cudnnGetConvolutionBackwardFilterWorkspaceSize)(h, d.x.d, d.y.d, d.conv.d, d.w.d,
                                                                    cudnnConvolutionBwdFilterAlgo_t(c.algo), &bytes));
    bytes = std::max(bytes, c.workspace);
    Tensor ws = workspace(bytes);
    KILN_CUDNN_CHECK(KILN_LAZY(cudnn, cudnnConvolutionBackwardFilter)(h, s.one(dtype), d.x.d, x, d.y.d, dy, d.conv.d,
                                                    cudnnConvolutionBwdFilterAlgo_t(c.algo), ptr(ws), bytes,
                                                    s.zero(dtype), d.w.d, dw));
  }
  if (dbias) {
    const int64_t L = g.OH * g.OW;
    cuda::dispatch_float(dtype, "conv2d", [&]<class T>() {
      bias_grad_kernel<T><<<int(std::min<int64_t>(g.O, 65535)), kReduceThreads, 0, cuda::current_raw_stream()>>>(
          static_cast<const T*>(dy), static_cast<T*>(dbias), g.N, g.O, L);
    });
    KILN_CUDA_CHECK_LAUNCH();
  }
}

const Conv2dKernels kConv2dCuda{&conv2d_forward_cuda, &conv2d_backward_cuda};
const MaxPool2dKernels kMaxPoolCuda{&max_pool_forward_cuda, &max_pool_backward_cuda};
const AvgPool2dKernels kAvgPoolCuda{&avg_pool_forward_cuda, &avg_pool_backward_cuda};
const AdaptiveAvgPool2dKernels kAdaptiveAvgPoolCuda{&adaptive_avg_forward_cuda, &adaptive_avg_backward_cuda};
const MaxPool2dKernels kAdaptiveMaxPoolCuda{&adaptive_max_forward_cuda, &adaptive_max_backward_cuda};

}  // namespace

cuda::ConvDescriptorReadback cuda::conv2d_descriptor_readback(DType dtype, const Conv2dGeom& g) {
  ConvDescs d(dtype, g);
  ConvDescriptorReadback r;
  int ns, cs, hs, ws;  // strides of the tensor descriptors (NCHW packed, not checked here)
  cudnnDataType_t tx, ty, tw, compute;
  cudnnTensorFormat_t fmt;
  KILN_CUDNN_CHECK(
      KILN_LAZY(cudnn, cudnnGetTensor4dDescriptor)(d.x.d, &tx, &r.x[0], &r.x[1], &r.x[2], &r.x[3], &ns, &cs, &hs, &ws));
  KILN_CUDNN_CHECK(
      KILN_LAZY(cudnn, cudnnGetTensor4dDescriptor)(d.y.d, &ty, &r.y[0], &r.y[1], &r.y[2], &r.y[3], &ns, &cs, &hs, &ws));
  KILN_CUDNN_CHECK(KILN_LAZY(cudnn, cudnnGetFilter4dDescriptor)(d.w.d, &tw, &fmt, &r.w[0], &r.w[1], &r.w[2], &r.w[3]));
  KILN_CUDNN_CHECK(KILN_LAZY(cudnn, cudnnGetConvolution2dForwardOutputDim)(d.conv.d, d.x.d, d.w.d, &r.out[0], &r.out[1],
                                                                           &r.out[2], &r.out[3]));
  cudnnConvolutionMode_t mode;
  KILN_CUDNN_CHECK(KILN_LAZY(cudnn, cudnnGetConvolution2dDescriptor)(
      d.conv.d, &r.pad[0], &r.pad[1], &r.stride[0], &r.stride[1], &r.dilation[0], &r.dilation[1], &mode, &compute));
  KILN_CUDNN_CHECK(KILN_LAZY(cudnn, cudnnGetConvolutionGroupCount)(d.conv.d, &r.groups));
  cudnnMathType_t math;
  KILN_CUDNN_CHECK(KILN_LAZY(cudnn, cudnnGetConvolutionMathType)(d.conv.d, &math));
  r.math = int(math);
  r.data_type = tx == ty && tx == tw && fmt == CUDNN_TENSOR_NCHW ? int(tx) : -1;
  r.compute_type = int(compute);
  r.cross_correlation = mode == CUDNN_CROSS_CORRELATION;
  return r;
}

void register_cuda_conv() {
  register_kernel(Op::conv2d, DeviceType::CUDA, &kConv2dCuda);
  register_kernel(Op::max_pool2d, DeviceType::CUDA, &kMaxPoolCuda);
  register_kernel(Op::avg_pool2d, DeviceType::CUDA, &kAvgPoolCuda);
  register_kernel(Op::adaptive_avg_pool2d, DeviceType::CUDA, &kAdaptiveAvgPoolCuda);
  register_kernel(Op::adaptive_max_pool2d, DeviceType::CUDA, &kAdaptiveMaxPoolCuda);
}

}  // namespace kiln
