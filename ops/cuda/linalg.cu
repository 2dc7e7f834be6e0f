// CUDA kernels of the linalg op family (matmul, linear) through cuBLAS: the same kernel
// types as the CPU (ops/kernels/linalg.h, row-major), mapped onto column-major cuBLAS.
// One cuBLAS handle per device, created on first use and bound to the current stream.
// float16/bfloat16 go through cuBLASLt with float32 accumulation (bias, bias + GELU and the
// bias gradient as epilogues);
// float32 uses TF32 tensor cores when set_float32_matmul_precision("high") allows it.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <algorithm>
#include <mutex>
#include "kiln/core/cuda/lazy_library.h"
#include "kiln/core/cuda/runtime.h"
#include "kiln/core/error.h"
#include "kiln/core/tensor.h"
#include "kiln/ops/kernels/linalg.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/cuda/gemm_map.h"
#include "kiln/ops/cuda/handles.h"
#include "kiln/ops/cuda/lt_readback.h"
#include "kiln/ops/cuda/register.h"
#include "kiln/ops/dispatch.h"

namespace kiln {
namespace {

using cuda::GemmEx;
using cuda::GemmStridedBatchedEx;

cublasHandle_t handle_for_current_stream() { return cuda::cublas_handle(); }  // ops/cuda/handles.cu

cublasOperation_t op_of(bool trans) { return trans ? CUBLAS_OP_T : CUBLAS_OP_N; }

// Row-major C (M, N) = op(A) op(B) as column-major C^T (N, M) = op(B)^T op(A)^T: the same
// buffers with the operands swapped, no copies (cuda::to_col_major, ops/cuda/gemm_map.h).
template <class T>
void gemm(cublasHandle_t h, bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
          const T* B, int64_t ldb, T beta, T* C, int64_t ldc, int64_t batch = 1, int64_t sa = 0, int64_t sb = 0,
          int64_t sc = 0) {
  const cuda::ColMajorGemm c = cuda::to_col_major({ta, tb, M, N, K, lda, ldb, ldc, sa, sb, sc, batch});
  const cublasOperation_t opf = op_of(c.trans_first), ops = op_of(c.trans_second);
  if constexpr (std::is_same_v<T, float>) {
    if (c.batch == 1)
      KILN_CUBLAS_CHECK(KILN_LAZY(cublas, cublasSgemm)(h, opf, ops, int(c.m), int(c.n), int(c.k), &alpha, B,
                                                       int(c.ld_first), A, int(c.ld_second), &beta, C, int(c.ldc)));
    else
      KILN_CUBLAS_CHECK(KILN_LAZY(cublas, cublasSgemmStridedBatched)(
          h, opf, ops, int(c.m), int(c.n), int(c.k), &alpha, B, int(c.ld_first), c.stride_first, A, int(c.ld_second),
          c.stride_second, &beta, C, int(c.ldc), c.stride_c, int(c.batch)));
  } else {
    if (c.batch == 1)
      KILN_CUBLAS_CHECK(KILN_LAZY(cublas, cublasDgemm)(h, opf, ops, int(c.m), int(c.n), int(c.k), &alpha, B,
                                                       int(c.ld_first), A, int(c.ld_second), &beta, C, int(c.ldc)));
    else
      KILN_CUBLAS_CHECK(KILN_LAZY(cublas, cublasDgemmStridedBatched)(
          h, opf, ops, int(c.m), int(c.n), int(c.k), &alpha, B, int(c.ld_first), c.stride_first, A, int(c.ld_second),
          c.stride_second, &beta, C, int(c.ldc), c.stride_c, int(c.batch)));
  }
}

// ---------------------------------------------------------------- float32 accumulation GEMMs

cudaDataType_t cuda_type(DType dt) {
  switch (dt) {
    case DType::float16: return CUDA_R_16F;
    case DType::bfloat16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}

/// The same row-major GEMM as gemm<T>() for float16/bfloat16 (float32 compute) or float32
/// under TF32 (CUBLAS_COMPUTE_32F_FAST_TF32), through cublasGemmEx. alpha/beta are float.
void gemm_ex(cublasHandle_t h, DType dt, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
             const void* A, int64_t lda, const void* B, int64_t ldb, float beta, void* C, int64_t ldc,
             int64_t batch = 1, int64_t sa = 0, int64_t sb = 0, int64_t sc = 0) {
  const cuda::ColMajorGemm c = cuda::to_col_major({ta, tb, M, N, K, lda, ldb, ldc, sa, sb, sc, batch});
  const cublasOperation_t opf = op_of(c.trans_first), ops = op_of(c.trans_second);
  const cudaDataType_t t = cuda_type(dt);
  const cublasComputeType_t compute = is_half(dt) ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_FAST_TF32;
  if (c.batch == 1)
    KILN_CUBLAS_CHECK(KILN_LAZY_AS(cublas, cublasGemmEx, GemmEx)(h, opf, ops, int(c.m), int(c.n), int(c.k), &alpha, B,
                                                                 t, int(c.ld_first), A, t, int(c.ld_second), &beta, C,
                                                                 t, int(c.ldc), compute, CUBLAS_GEMM_DEFAULT));
  else
    KILN_CUBLAS_CHECK(KILN_LAZY_AS(cublas, cublasGemmStridedBatchedEx, GemmStridedBatchedEx)(
        h, opf, ops, int(c.m), int(c.n), int(c.k), &alpha, B, t, int(c.ld_first), c.stride_first, A, t,
        int(c.ld_second), c.stride_second, &beta, C, t, int(c.ldc), c.stride_c, int(c.batch), compute,
        CUBLAS_GEMM_DEFAULT));
}

cublasLtHandle_t lt_handle() {
  static cublasLtHandle_t handles[cuda::kMaxDevices] = {};
  static std::mutex mu;
  const int dev = cuda::resolve_device(-1);
  std::lock_guard<std::mutex> lock(mu);
  if (!handles[dev]) KILN_CUBLAS_CHECK(KILN_LAZY(cublasLt, cublasLtCreate)(&handles[dev]));
  return handles[dev];
}

// RAII owners of the cuBLASLt descriptors (freed also when a call throws).
struct LtDesc {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtDesc() {
    if (pref) KILN_LAZY(cublasLt, cublasLtMatmulPreferenceDestroy)(pref);
    if (c) KILN_LAZY(cublasLt, cublasLtMatrixLayoutDestroy)(c);
    if (b) KILN_LAZY(cublasLt, cublasLtMatrixLayoutDestroy)(b);
    if (a) KILN_LAZY(cublasLt, cublasLtMatrixLayoutDestroy)(a);
    if (op) KILN_LAZY(cublasLt, cublasLtMatmulDescDestroy)(op);
  }
};

constexpr size_t kLtWorkspace = size_t(8) << 20;

/// Largest power of two (<= 256) dividing the address and the batch stride in bytes.
uint32_t alignment_of(const void* p, int64_t stride_bytes) {
  uint64_t bits = uint64_t(reinterpret_cast<uintptr_t>(p)) | uint64_t(stride_bytes) | 256u;
  return uint32_t(bits & (~bits + 1));
}

cublasLtMatrixLayout_t lt_layout(cudaDataType_t t, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                                 int64_t stride) {
  cublasLtMatrixLayout_t l = nullptr;
  KILN_CUBLAS_CHECK(KILN_LAZY(cublasLt, cublasLtMatrixLayoutCreate)(&l, t, uint64_t(rows), uint64_t(cols), ld));
  if (batch > 1) {
    const int32_t bc = int32_t(batch);
    KILN_CUBLAS_CHECK(
        KILN_LAZY(cublasLt, cublasLtMatrixLayoutSetAttribute)(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof(bc)));
    KILN_CUBLAS_CHECK(KILN_LAZY(cublasLt, cublasLtMatrixLayoutSetAttribute)(
        l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
  }
  return l;
}

/// What a cuBLASLt GEMM does to its output on the way out (CUBLASLT_MATMUL_DESC_EPILOGUE).
struct LtEpilogue {
  cublasLtEpilogue_t kind = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;  ///< BIAS, GELU_AUX_BIAS: the vector added; BGRADB: the bias gradient written
  void* aux = nullptr;         ///< GELU_AUX(_BIAS): the pre-activation, laid out as C
  int64_t aux_ld = 0;
};

/// The descriptors of one row-major GEMM on cuBLASLt (16-bit operands, float32 accumulation):
/// column-major C^T = op(B)^T op(A)^T as in gemm<T>(), with the epilogue. Needs no GPU.
void lt_describe(LtDesc& d, DType dt, const cuda::RowMajorGemm& g, const LtEpilogue& e) {
  const cudaDataType_t t = cuda_type(dt);
  KILN_CUBLAS_CHECK(KILN_LAZY(cublasLt, cublasLtMatmulDescCreate)(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cuda::ColMajorGemm c = cuda::to_col_major(g);
  const cublasOperation_t op_first = op_of(c.trans_first), op_second = op_of(c.trans_second);
  auto set = [&](cublasLtMatmulDescAttributes_t attr, const void* v, size_t n) {
    KILN_CUBLAS_CHECK(KILN_LAZY(cublasLt, cublasLtMatmulDescSetAttribute)(d.op, attr, v, n));
  };
  set(CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof(op_first));
  set(CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof(op_second));
  if (e.kind != CUBLASLT_EPILOGUE_DEFAULT) set(CUBLASLT_MATMUL_DESC_EPILOGUE, &e.kind, sizeof(e.kind));
  if (e.bias) set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, &e.bias, sizeof(e.bias));
  if (e.aux) {
    set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &e.aux, sizeof(e.aux));
    set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &e.aux_ld, sizeof(e.aux_ld));
  }
  // first operand: B's buffer, (N, K) column-major when !tb, stored (K, N) when tb
  const cuda::LtGemmLayouts l = cuda::to_lt_layouts(g);
  d.a = lt_layout(t, l.first.rows, l.first.cols, l.first.ld, g.batch, l.first.stride);
  d.b = lt_layout(t, l.second.rows, l.second.cols, l.second.ld, g.batch, l.second.stride);
  d.c = lt_layout(t, l.c.rows, l.c.cols, l.c.ld, g.batch, l.c.stride);
}

/// Row-major C (M, N) = alpha op(A) op(B) + beta C through cuBLASLt, with an epilogue (the
/// bias added to every row of C, GELU, the bias gradient), 16-bit operands with float32
/// accumulation. Returns false when cuBLASLt offers no algorithm for the case (the caller
/// then runs its fallback).
bool gemm_lt(DType dt, const cuda::RowMajorGemm& g, float alpha, const void* A, const void* B, float beta, void* C,
             const LtEpilogue& e = {}) {
  if (g.K == 0) return false;  // cublasGemmEx handles the empty sum (C = beta C)
  if (e.bias && alignment_of(e.bias, 0) < 16) return false;  // the epilogues want aligned vectors
  if (e.aux && (alignment_of(e.aux, 0) < 16 || e.aux_ld % 8 != 0)) return false;  // cuBLASLt's rule for GELU's aux
  LtDesc d;
  lt_describe(d, dt, g, e);
  KILN_CUBLAS_CHECK(KILN_LAZY(cublasLt, cublasLtMatmulPreferenceCreate)(&d.pref));
  const uint64_t ws_bytes = kLtWorkspace;
  KILN_CUBLAS_CHECK(KILN_LAZY(cublasLt, cublasLtMatmulPreferenceSetAttribute)(
      d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof(ws_bytes)));
  // cuBLASLt assumes 256-byte aligned operands unless told otherwise (views, batch offsets)
  const size_t es = 2;
  const bool batched = g.batch > 1;
  const uint32_t al_first = alignment_of(B, batched ? g.sb * es : 0), al_second = alignment_of(A, batched ? g.sa * es : 0);
  const uint32_t al_c = alignment_of(C, batched ? g.sc * es : 0);
  KILN_CUBLAS_CHECK(KILN_LAZY(cublasLt, cublasLtMatmulPreferenceSetAttribute)(
      d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_first, sizeof(al_first)));
  KILN_CUBLAS_CHECK(KILN_LAZY(cublasLt, cublasLtMatmulPreferenceSetAttribute)(
      d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_second, sizeof(al_second)));
  KILN_CUBLAS_CHECK(KILN_LAZY(cublasLt, cublasLtMatmulPreferenceSetAttribute)(
      d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof(al_c)));
  KILN_CUBLAS_CHECK(KILN_LAZY(cublasLt, cublasLtMatmulPreferenceSetAttribute)(
      d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof(al_c)));
  cublasLtHandle_t lt = lt_handle();
  cublasLtMatmulHeuristicResult_t res{};
  int found = 0;
  const cublasStatus_t st =
      KILN_LAZY(cublasLt, cublasLtMatmulAlgoGetHeuristic)(lt, d.op, d.a, d.b, d.c, d.c, d.pref, 1, &res, &found);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0) return false;
  // workspace from the caching allocator: stream-ordered, so it may be released after the launch
  Tensor ws = Tensor::empty({int64_t(kLtWorkspace)}, DType::uint8, Device::cuda(cuda::resolve_device(-1)));
  KILN_CUBLAS_CHECK(KILN_LAZY(cublasLt, cublasLtMatmul)(lt, d.op, &alpha, B, d.a, A, d.b, &beta, C, d.c, C, d.c,
                                                        &res.algo, ws.raw_data(), kLtWorkspace,
                                                        cuda::current_raw_stream()));
  return true;
}

/// One (possibly strided-batched) GEMM in a 16-bit dtype, or float32 under TF32.
void gemm_mixed(cublasHandle_t h, DType dt, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                const void* A, int64_t lda, const void* B, int64_t ldb, float beta, void* C, int64_t ldc,
                int64_t batch = 1, int64_t sa = 0, int64_t sb = 0, int64_t sc = 0) {
  if (is_half(dt) && gemm_lt(dt, {ta, tb, M, N, K, lda, ldb, ldc, sa, sb, sc, batch}, alpha, A, B, beta, C)) return;
  gemm_ex(h, dt, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, batch, sa, sb, sc);
}

using cuda::evenly_spaced;

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

/// matmul_t for 16-bit dtypes and TF32 float32: byte offsets through the element size.
void matmul_mixed(DType dt, bool ta, bool tb, int64_t batch, int64_t M, int64_t N, int64_t K, double alpha,
                  const void* A, int64_t lda, const int64_t* ao, const void* B, int64_t ldb, const int64_t* bo,
                  double beta, void* C, int64_t ldc, const int64_t* co) {
  cublasHandle_t h = handle_for_current_stream();
  const size_t es = dt == DType::float32 ? 4 : 2;
  auto at = [es](const void* p, int64_t off) { return static_cast<const char*>(p) + size_t(off) * es; };
  int64_t sa, sb, sc;
  if (batch > 1 && evenly_spaced(ao, batch, sa) && evenly_spaced(bo, batch, sb) && evenly_spaced(co, batch, sc) &&
      sc != 0) {
    gemm_mixed(h, dt, ta, tb, M, N, K, float(alpha), at(A, ao[0]), lda, at(B, bo[0]), ldb, float(beta),
               const_cast<char*>(at(C, co[0])), ldc, batch, sa, sb, sc);
    return;
  }
  for (int64_t b = 0; b < batch; ++b)
    gemm_mixed(h, dt, ta, tb, M, N, K, float(alpha), at(A, ao[b]), lda, at(B, bo[b]), ldb, float(beta),
               const_cast<char*>(at(C, co[b])), ldc);
}

void matmul_cuda(DType dtype, bool ta, bool tb, int64_t batch, int64_t M, int64_t N, int64_t K, double alpha,
                 const void* A, int64_t lda, const int64_t* ao, const void* B, int64_t ldb, const int64_t* bo,
                 double beta, void* C, int64_t ldc, const int64_t* co) {
  KILN_CHECK(dtype == DType::float32 || dtype == DType::float64 || is_half(dtype), "matmul: the CUDA kernel takes "
             "float32, float64, float16 or bfloat16, got ", dtype_name(dtype));
  if (is_half(dtype) || (dtype == DType::float32 && float32_matmul_allows_tf32())) {
    matmul_mixed(dtype, ta, tb, batch, M, N, K, alpha, A, lda, ao, B, ldb, bo, beta, C, ldc, co);
    return;
  }
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
  // W's leading dimension is I, at least 1 for cuBLAS (I == 0: y = bias or 0)
  gemm<T>(h, false, true, M, O, I, T(1), x, ldx, w, std::max<int64_t>(I, 1), bias ? T(1) : T(0), y, O);  // x W^T
}

/// linear for 16-bit dtypes (cuBLASLt, bias as an epilogue) and TF32 float32 (cublasGemmEx).
void linear_mixed(DType dt, int64_t M, int64_t O, int64_t I, const void* x, int64_t ldx, const void* w,
                  const void* bias, void* y) {
  // y (M, O) = x (M, I) @ W^T (I, O)
  if (is_half(dt) && gemm_lt(dt, cuda::linear_forward(M, O, I, ldx), 1.0f, x, w, 0.0f, y,
                             {bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT, bias}))
    return;
  if (bias) {
    const int64_t n = M * O;
    const int threads = 256;
    const int blocks = int(std::min<int64_t>((n + threads - 1) / threads, 65535));
    // the rows are plain copies of the bias: move the bits (2 or 4 bytes per element)
    if (dt == DType::float32)
      fill_rows_kernel<uint32_t><<<blocks, threads, 0, cuda::current_raw_stream()>>>(
          static_cast<uint32_t*>(y), static_cast<const uint32_t*>(bias), M, O);
    else
      fill_rows_kernel<uint16_t><<<blocks, threads, 0, cuda::current_raw_stream()>>>(
          static_cast<uint16_t*>(y), static_cast<const uint16_t*>(bias), M, O);
    KILN_CUDA_CHECK_LAUNCH();
  }
  gemm_ex(handle_for_current_stream(), dt, false, true, M, O, I, 1.0f, x, ldx, w, std::max<int64_t>(I, 1),
          bias ? 1.0f : 0.0f, y, O);
}

void linear_cuda(DType dtype, int64_t M, int64_t O, int64_t I, const void* x, int64_t ldx, const void* w,
                 const void* bias, void* y) {
  KILN_CHECK(dtype == DType::float32 || dtype == DType::float64 || is_half(dtype), "linear: the CUDA kernel takes "
             "float32, float64, float16 or bfloat16, got ", dtype_name(dtype));
  if (is_half(dtype) || (dtype == DType::float32 && float32_matmul_allows_tf32())) {
    linear_mixed(dtype, M, O, I, x, ldx, w, bias, y);
    return;
  }
  if (dtype == DType::float32)
    linear_t(M, O, I, static_cast<const float*>(x), ldx, static_cast<const float*>(w),
             static_cast<const float*>(bias), static_cast<float*>(y));
  else
    linear_t(M, O, I, static_cast<const double*>(x), ldx, static_cast<const double*>(w),
             static_cast<const double*>(bias), static_cast<double*>(y));
}

/// y = gelu_tanh(x W^T + bias) with the pre-activation in pre (unless pre is null), in one
/// cuBLASLt call (GELU_AUX_BIAS, or GELU_BIAS without pre: the epilogue's GELU is the tanh
/// approximation). 16-bit dtypes only: the op runs linear and the gelu_tanh kernel for the
/// rest, and where cuBLASLt declines.
bool linear_gelu_cuda(DType dtype, int64_t M, int64_t O, int64_t I, const void* x, int64_t ldx, const void* w,
                      const void* bias, void* pre, void* y) {
  if (!is_half(dtype)) return false;
  const cublasLtEpilogue_t kind = pre ? (bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX)
                                      : (bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU);
  return gemm_lt(dtype, cuda::linear_forward(M, O, I, ldx), 1.0f, x, w, 0.0f, y, {kind, bias, pre, pre ? O : 0});
}

/// dW = g^T x and db = the column sums of g in one cuBLASLt call (BGRADB), 16-bit dtypes.
bool linear_weight_grad_bias_cuda(DType dtype, int64_t M, int64_t O, int64_t I, const void* g, const void* x,
                                  int64_t ldx, void* dw, void* db) {
  if (!is_half(dtype) || I == 0 || O == 0) return false;  // no empty matrix layouts: the GEMM and the sum
  return gemm_lt(dtype, cuda::linear_weight_grad(M, O, I, ldx), 1.0f, g, x, 0.0f, dw,
                 {CUBLASLT_EPILOGUE_BGRADB, db});
}

}  // namespace

cuda::LtDescriptorReadback cuda::linear_lt_descriptor_readback(DType dtype, const RowMajorGemm& g, int epilogue,
                                                               const void* bias, void* aux, int64_t aux_ld) {
  const LtEpilogue e{cublasLtEpilogue_t(epilogue), bias, aux, aux_ld};
  LtDesc d;
  lt_describe(d, dtype, g, e);
  LtDescriptorReadback r;
  auto get = [&](cublasLtMatmulDescAttributes_t attr, void* v, size_t n) {
    size_t written = 0;
    KILN_CUBLAS_CHECK(KILN_LAZY(cublasLt, cublasLtMatmulDescGetAttribute)(d.op, attr, v, n, &written));
  };
  int32_t ta = 0, tb = 0, compute = 0, scale = 0;
  uint32_t epi = 0;
  get(CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
  get(CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
  get(CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi));
  get(CUBLASLT_MATMUL_DESC_BIAS_POINTER, &r.bias, sizeof(r.bias));
  get(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &r.aux, sizeof(r.aux));
  get(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &r.aux_ld, sizeof(r.aux_ld));
  get(CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, &compute, sizeof(compute));
  get(CUBLASLT_MATMUL_DESC_SCALE_TYPE, &scale, sizeof(scale));
  r.trans_a = ta == CUBLAS_OP_T, r.trans_b = tb == CUBLAS_OP_T;
  r.epilogue = int(epi), r.compute_type = compute, r.scale_type = scale;
  auto layout = [&](cublasLtMatrixLayout_t l, LtDescriptorReadback::Layout& out) {
    auto lget = [&](cublasLtMatrixLayoutAttribute_t attr, void* v, size_t n) {
      size_t written = 0;
      KILN_CUBLAS_CHECK(KILN_LAZY(cublasLt, cublasLtMatrixLayoutGetAttribute)(l, attr, v, n, &written));
    };
    uint64_t rows = 0, cols = 0;
    uint32_t type = 0;
    lget(CUBLASLT_MATRIX_LAYOUT_ROWS, &rows, sizeof(rows));
    lget(CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof(cols));
    lget(CUBLASLT_MATRIX_LAYOUT_LD, &out.ld, sizeof(out.ld));
    lget(CUBLASLT_MATRIX_LAYOUT_TYPE, &type, sizeof(type));
    out.rows = int64_t(rows), out.cols = int64_t(cols), out.type = int(type);
  };
  layout(d.a, r.a);
  layout(d.b, r.b);
  layout(d.c, r.c);
  return r;
}

void register_cuda_linalg() {
  register_kernel(Op::matmul, DeviceType::CUDA, &matmul_cuda);
  static constexpr LinearKernels kLinearCuda{.forward = &linear_cuda,
                                             .forward_gelu = &linear_gelu_cuda,
                                             .weight_grad_bias = &linear_weight_grad_bias_cuda};
  register_kernel(Op::linear, DeviceType::CUDA, &kLinearCuda);
}

}  // namespace kiln
