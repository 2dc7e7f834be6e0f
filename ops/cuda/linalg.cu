// CUDA kernels of the linalg op family (matmul, linear) through cuBLAS: the same kernel
// types as the CPU (ops/cpu/linalg_kernels.h, row-major), mapped onto column-major cuBLAS.
// One cuBLAS handle per device, created on first use and bound to the current stream.
#include <cublas_v2.h>
#include <mutex>
#include "core/cuda/runtime.h"
#include "core/error.h"
#include "ops/cpu/linalg_kernels.h"
#include "ops/cuda/register.h"
#include "ops/dispatch.h"

namespace kiln {
namespace {

cublasHandle_t handle_for_current_stream() {
  static cublasHandle_t handles[cuda::kMaxDevices] = {};
  static std::mutex mu;
  const int dev = cuda::resolve_device(-1);
  cublasHandle_t h;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!handles[dev]) KILN_CUBLAS_CHECK(cublasCreate(&handles[dev]));
    h = handles[dev];
  }
  KILN_CUBLAS_CHECK(cublasSetStream(h, cuda::current_raw_stream(dev)));
  return h;
}

// Row-major C (M, N) = op(A) op(B) is column-major C^T (N, M) = op(B)^T op(A)^T: the
// same buffers with the operands swapped, so cuBLAS needs no copies. A row-major operand
// stored untransposed reads as its transpose in column-major, hence op = N for !trans.
template <class T>
void gemm(cublasHandle_t h, bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
          const T* B, int64_t ldb, T beta, T* C, int64_t ldc, int64_t batch = 1, int64_t sa = 0, int64_t sb = 0,
          int64_t sc = 0) {
  const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  if constexpr (std::is_same_v<T, float>) {
    if (batch == 1)
      KILN_CUBLAS_CHECK(cublasSgemm(h, opb, opa, int(N), int(M), int(K), &alpha, B, int(ldb), A, int(lda), &beta, C,
                                    int(ldc)));
    else
      KILN_CUBLAS_CHECK(cublasSgemmStridedBatched(h, opb, opa, int(N), int(M), int(K), &alpha, B, int(ldb), sb, A,
                                                  int(lda), sa, &beta, C, int(ldc), sc, int(batch)));
  } else {
    if (batch == 1)
      KILN_CUBLAS_CHECK(cublasDgemm(h, opb, opa, int(N), int(M), int(K), &alpha, B, int(ldb), A, int(lda), &beta, C,
                                    int(ldc)));
    else
      KILN_CUBLAS_CHECK(cublasDgemmStridedBatched(h, opb, opa, int(N), int(M), int(K), &alpha, B, int(ldb), sb, A,
                                                  int(lda), sa, &beta, C, int(ldc), sc, int(batch)));
  }
}

/// The stride s when off[b] = off[0] + b * s for every b (s may be 0: a broadcast operand).
bool evenly_spaced(const int64_t* off, int64_t n, int64_t& s) {
  s = n > 1 ? off[1] - off[0] : 0;
  for (int64_t b = 2; b < n; ++b)
    if (off[b] - off[b - 1] != s) return false;
  return true;
}

template <class T>
void matmul_t(bool ta, bool tb, int64_t batch, int64_t M, int64_t N, int64_t K, double alpha, const T* A,
              int64_t lda, const int64_t* ao, const T* B, int64_t ldb, const int64_t* bo, double beta, T* C,
              int64_t ldc, const int64_t* co) {
  cublasHandle_t h = handle_for_current_stream();
  int64_t sa, sb, sc;
  if (batch > 1 && evenly_spaced(ao, batch, sa) && evenly_spaced(bo, batch, sb) && evenly_spaced(co, batch, sc) &&
      sc != 0) {
    gemm<T>(h, ta, tb, M, N, K, T(alpha), A + ao[0], lda, B + bo[0], ldb, T(beta), C + co[0], ldc, batch, sa, sb, sc);
    return;
  }
  for (int64_t b = 0; b < batch; ++b)  // irregular offsets (e.g. a broadcast middle batch dim)
    gemm<T>(h, ta, tb, M, N, K, T(alpha), A + ao[b], lda, B + bo[b], ldb, T(beta), C + co[b], ldc);
}

void matmul_cuda(DType dtype, bool ta, bool tb, int64_t batch, int64_t M, int64_t N, int64_t K, double alpha,
                 const void* A, int64_t lda, const int64_t* ao, const void* B, int64_t ldb, const int64_t* bo,
                 double beta, void* C, int64_t ldc, const int64_t* co) {
  KILN_CHECK(dtype == DType::float32 || dtype == DType::float64, "matmul: the CUDA kernel takes float32 or "
             "float64, got ", dtype_name(dtype));
  if (dtype == DType::float32)
    matmul_t(ta, tb, batch, M, N, K, alpha, static_cast<const float*>(A), lda, ao, static_cast<const float*>(B), ldb,
             bo, beta, static_cast<float*>(C), ldc, co);
  else
    matmul_t(ta, tb, batch, M, N, K, alpha, static_cast<const double*>(A), lda, ao, static_cast<const double*>(B),
             ldb, bo, beta, static_cast<double*>(C), ldc, co);
}

// y (M, O) = bias broadcast over the rows (the GEMM then adds x W^T with beta = 1).
template <class T>
__global__ void fill_rows_kernel(T* y, const T* bias, int64_t M, int64_t O) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < M * O; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = bias[i % O];
}

template <class T>
void linear_t(int64_t M, int64_t O, int64_t I, const T* x, int64_t ldx, const T* w, const T* bias, T* y) {
  cublasHandle_t h = handle_for_current_stream();
  if (bias) {
    const int64_t n = M * O;
    const int threads = 256;
    const int blocks = int(std::min<int64_t>((n + threads - 1) / threads, 65535));
    fill_rows_kernel<T><<<blocks, threads, 0, cuda::current_raw_stream()>>>(y, bias, M, O);
    KILN_CUDA_CHECK_LAUNCH();
  }
  gemm<T>(h, false, true, M, O, I, T(1), x, ldx, w, I, bias ? T(1) : T(0), y, O);  // x (M, I) @ W^T (I, O)
}

void linear_cuda(DType dtype, int64_t M, int64_t O, int64_t I, const void* x, int64_t ldx, const void* w,
                 const void* bias, void* y) {
  KILN_CHECK(dtype == DType::float32 || dtype == DType::float64, "linear: the CUDA kernel takes float32 or "
             "float64, got ", dtype_name(dtype));
  if (dtype == DType::float32)
    linear_t(M, O, I, static_cast<const float*>(x), ldx, static_cast<const float*>(w),
             static_cast<const float*>(bias), static_cast<float*>(y));
  else
    linear_t(M, O, I, static_cast<const double*>(x), ldx, static_cast<const double*>(w),
             static_cast<const double*>(bias), static_cast<double*>(y));
}

}  // namespace

void register_cuda_linalg() {
  register_kernel(Op::matmul, DeviceType::CUDA, reinterpret_cast<void*>(&matmul_cuda));
  register_kernel(Op::linear, DeviceType::CUDA, reinterpret_cast<void*>(&linear_cuda));
}

}  // namespace kiln
