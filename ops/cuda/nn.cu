// CUDA kernels of the nn op family with the CPU's kernel types (ops/kernels/nn.h):
// dropout with the CPU's Philox keep rule (bitwise the same mask), embedding (gather, and a
// deterministic sorted-run scatter-add backward), and attention: the fused kernels of
// flash_attention.cu for 16-bit inputs, else cuBLAS GEMMs around one fused causal-mask +
// softmax kernel per row (16-bit inputs the fused kernels decline run in float32).
#include <limits>
#include "kiln/core/cuda/lazy_library.h"
#include "kiln/core/cuda/check.h"
#include "kiln/core/cuda/index_math.h"
#include "kiln/core/cuda/runtime.h"
#include "kiln/core/error.h"
#include "kiln/core/rng.h"
#include "kiln/core/tensor.h"
#include "kiln/ops/kernels/nn.h"
#include "kiln/ops/cuda/block_reduce.cuh"
#include "kiln/ops/cuda/row_kernels.h"
#include "kiln/ops/cuda/gemm_map.h"
#include "kiln/ops/cuda/handles.h"
#include "kiln/ops/cuda/dtype_dispatch.h"
#include "kiln/ops/cuda/flash_attention.h"
#include "kiln/ops/cuda/register.h"
#include "kiln/ops/cuda/shape_cuda.h"
#include "kiln/ops/cuda/shape_index.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/math.h"
#include "kiln/ops/nn_math.h"

namespace kiln {
namespace {

using cuda::kReduceThreads;

template <class T> constexpr DType dtype_of() { return std::is_same_v<T, double> ? DType::float64 : DType::float32; }

Device current_device() { return Device::cuda(cuda::resolve_device(-1)); }

// ================================================================ kernels

// Thread item b = one Philox block: elements 4b .. 4b + 3 use its words 0..3, which is
// math::dropout_keep(seed, offset, i, p) for each i. C: the compute type (float for 16-bit).
template <class T>
__global__ void dropout_kernel(const T* in, T* out, int64_t n, float p, cuda::AccType<T> scale, uint64_t seed,
                               uint64_t offset) {
  using C = cuda::AccType<T>;
  const int64_t blocks = (n + 3) / 4;
  for (int64_t b = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; b < blocks; b += int64_t(gridDim.x) * blockDim.x) {
    const Philox4 r = philox4x32(offset + uint64_t(b), 0, seed);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t i = 4 * b + j;
      if (i < n) out[i] = T(C(in[i]) * (math::dropout_keep_word(r.x[j], p) ? scale : C(0)));
    }
  }
}

// One block per row k = b * Tq + i of the scores s (B, Tq, Tk) (already scaled): masks the
// keys row i does not see, turns the row into probabilities in place, saves lse. The row
// bodies are ops/cuda/row_kernels.h's (run on the CPU by test_cuda_block_rows).
template <class T>
__global__ void attention_softmax_kernel(T* s, T* lse, int64_t rows, int64_t Tq, int64_t Tk, bool causal) {
  for (int64_t k = blockIdx.x; k < rows; k += gridDim.x)
    cuda::rows::attention_softmax_row<T>(cuda::DeviceBlock{}, k, s, lse, nullptr, Tq, Tk, causal);
}

// Backward: the scores s (B, Tq, Tk) (scaled) become the probabilities p = exp(s - lse)
// in place, 0 where masked. lse comes from the forward, or (lse == null: the forward
// saved it in 16 bits) is recomputed here from the row.
template <class T>
__global__ void attention_probs_kernel(T* s, const T* lse, int64_t rows, int64_t Tq, int64_t Tk, bool causal) {
  for (int64_t k = blockIdx.x; k < rows; k += gridDim.x)
    cuda::rows::attention_softmax_row<T>(cuda::DeviceBlock{}, k, s, nullptr, lse, Tq, Tk, causal);
}

// Backward, one block per row k: dsum = dout_k . out_k, then in place
// dp (B, Tq, Tk) <- ds = p (dp - dsum) scale (the scale of s folded in).
template <class T>
__global__ void attention_dscores_kernel(const T* p, T* dp, const T* dout, const T* out, int64_t rows, int64_t Tk,
                                         int64_t Ev, T scale) {
  for (int64_t k = blockIdx.x; k < rows; k += gridDim.x)
    cuda::rows::attention_dscores_row<T>(cuda::DeviceBlock{}, k, p, dp, dout, out, Tk, Ev, scale);
}

// ================================================================ launchers

// ---------------------------------------------------------------- dropout

void dropout_apply(DType dt, const void* in, void* out, int64_t n, float p, double scale, uint64_t seed,
                   uint64_t offset) {
  if (n == 0) return;
  cudaStream_t s = cuda::current_raw_stream();
  cuda::dispatch_float(dt, "dropout", [&]<class T>() {
    using C = cuda::AccType<T>;
    dropout_kernel<T><<<cuda::grid_for((n + 3) / 4), cuda::kLoopBlock, 0, s>>>(
        static_cast<const T*>(in), static_cast<T*>(out), n, p, C(scale), seed, offset);
    KILN_CUDA_CHECK_LAUNCH();
  });
}

// ---------------------------------------------------------------- embedding

void embedding_forward(size_t es, const int64_t* idx, const void* weight, void* out, int64_t n, int64_t D) {
  cuda::index_select_copy(es, "embedding", weight, idx, out, 1, 0, n, D);  // S unused when outer == 1
}

void embedding_backward(DType dt, const int64_t* idx, const void* dout, void* dweight, int64_t n, int64_t D,
                        int64_t padding_idx) {
  // V is not passed to the kernel: the sort takes every non-sign bit of the keys.
  cuda::index_add_sorted(dt, "embedding_backward", dout, idx, dweight, 1, std::numeric_limits<int64_t>::max(), n, D,
                         padding_idx);
}

// ---------------------------------------------------------------- attention

// C = alpha op(A) op(B) for one of attention's row-major GEMMs (ops/cuda/gemm_map.h: the
// shapes, and their column-major cuBLAS form C^T = op(B)^T op(A)^T, tested on the CPU).
// C is contiguous (batch, M, N). float32 uses TF32 when set_float32_matmul_precision allows.
template <class T>
void gemm(const cuda::RowMajorGemm& g, T alpha, const T* A, const T* B, T* C) {
  if (g.M == 0 || g.N == 0 || g.batch == 0) return;
  if (g.K == 0) {  // an empty sum
    KILN_CUDA_CHECK(cudaMemsetAsync(C, 0, size_t(g.batch * g.M * g.N) * sizeof(T), cuda::current_raw_stream()));
    return;
  }
  cublasHandle_t h = cuda::cublas_handle();
  const cuda::ColMajorGemm c = cuda::to_col_major(g);
  const cublasOperation_t opf = c.trans_first ? CUBLAS_OP_T : CUBLAS_OP_N, ops = c.trans_second ? CUBLAS_OP_T : CUBLAS_OP_N;
  const T beta = 0;
  if constexpr (std::is_same_v<T, float>) {
    if (float32_matmul_allows_tf32()) {  // set_float32_matmul_precision("high"): TF32 tensor cores, as linalg.cu
      KILN_CUBLAS_CHECK(KILN_LAZY_AS(cublas, cublasGemmStridedBatchedEx, cuda::GemmStridedBatchedEx)(
          h, opf, ops, int(c.m), int(c.n), int(c.k), &alpha, B, CUDA_R_32F, int(c.ld_first), c.stride_first, A,
          CUDA_R_32F, int(c.ld_second), c.stride_second, &beta, C, CUDA_R_32F, int(c.ldc), c.stride_c, int(c.batch),
          CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT));
      return;
    }
  }
  if constexpr (std::is_same_v<T, float>)
    KILN_CUBLAS_CHECK(KILN_LAZY(cublas, cublasSgemmStridedBatched)(
        h, opf, ops, int(c.m), int(c.n), int(c.k), &alpha, B, int(c.ld_first), c.stride_first, A, int(c.ld_second),
        c.stride_second, &beta, C, int(c.ldc), c.stride_c, int(c.batch)));
  else
    KILN_CUBLAS_CHECK(KILN_LAZY(cublas, cublasDgemmStridedBatched)(
        h, opf, ops, int(c.m), int(c.n), int(c.k), &alpha, B, int(c.ld_first), c.stride_first, A, int(c.ld_second),
        c.stride_second, &beta, C, int(c.ldc), c.stride_c, int(c.batch)));
}

template <class T>
void attention_forward_t(const T* q, const T* k, const T* v, T* out, T* lse, int64_t B, int64_t Tq, int64_t Tk,
                         int64_t E, int64_t Ev, double scale, bool causal) {
  const int64_t rows = B * Tq;
  if (rows == 0) return;
  cudaStream_t st = cuda::current_raw_stream();
  Tensor sbuf = Tensor::empty({B, Tq, Tk}, dtype_of<T>(), current_device());
  T* s = static_cast<T*>(sbuf.raw_data());  // (B, Tq, Tk) scores, then probabilities
  gemm<T>(cuda::attention_scores(B, Tq, Tk, E), T(scale), q, k, s);  // s = scale q k^T
  attention_softmax_kernel<T><<<cuda::reduce_blocks(rows), kReduceThreads, 0, st>>>(s, lse, rows, Tq, Tk, causal);
  KILN_CUDA_CHECK_LAUNCH();
  gemm<T>(cuda::attention_output(B, Tq, Tk, Ev), T(1), s, v, out);  // out = p v
}

template <class T>
void attention_backward_t(const T* q, const T* k, const T* v, const T* out, const T* lse, const T* dout, T* dq, T* dk,
                          T* dv, int64_t B, int64_t Tq, int64_t Tk, int64_t E, int64_t Ev, double scale, bool causal) {
  const int64_t rows = B * Tq;
  cudaStream_t st = cuda::current_raw_stream();
  const Device dev = current_device();
  Tensor pbuf = Tensor::empty({B, Tq, Tk}, dtype_of<T>(), dev);
  T* p = static_cast<T*>(pbuf.raw_data());  // (B, Tq, Tk)
  gemm<T>(cuda::attention_scores(B, Tq, Tk, E), T(scale), q, k, p);  // s = scale q k^T
  if (rows > 0) {
    attention_probs_kernel<T><<<cuda::reduce_blocks(rows), kReduceThreads, 0, st>>>(p, lse, rows, Tq, Tk, causal);
    KILN_CUDA_CHECK_LAUNCH();
  }
  if (dv) gemm<T>(cuda::attention_dv(B, Tq, Tk, Ev), T(1), p, dout, dv);  // p^T dO
  if (!dq && !dk) return;
  Tensor dpbuf = Tensor::empty({B, Tq, Tk}, dtype_of<T>(), dev);
  T* dp = static_cast<T*>(dpbuf.raw_data());  // (B, Tq, Tk)
  gemm<T>(cuda::attention_dp(B, Tq, Tk, Ev), T(1), dout, v, dp);  // dp = dO v^T
  if (rows > 0) {
    attention_dscores_kernel<T><<<cuda::reduce_blocks(rows), kReduceThreads, 0, st>>>(p, dp, dout, out, rows, Tk, Ev,
                                                                                      T(scale));
    KILN_CUDA_CHECK_LAUNCH();
  }
  if (dq) gemm<T>(cuda::attention_dq(B, Tq, Tk, E), T(1), dp, k, dq);  // ds k
  if (dk) gemm<T>(cuda::attention_dk(B, Tq, Tk, E), T(1), dp, q, dk);  // ds^T q
}

// Operands with their own layouts (ops/kernels/nn.h: AttnLayout), element i of row t of
// batch entry b at l.offset(b) + t * l.st + i. The fused kernels of flash_attention.cu read
// and write them in place (16-bit, head dims multiples of 16 up to 128); otherwise the
// composed path above runs on contiguous operands of its compute type C (float32 for 16-bit
// inputs), copied and converted in and out by copy_rows where they are not already that.

bool is_contiguous(AttnLayout l, int64_t T, int64_t W) {
  return l.st == W && (l.H == 1 ? l.sb == T * W : (l.sh == T * W && l.sb == l.H * T * W));
}

// dst (B, T, W) rows in layout ld = src rows in layout ls, converted from S to D (the same
// type is copied as it is: float64 must not pass through float).
template <class S, class D>
__global__ void copy_rows_kernel(const S* src, AttnLayout ls, D* dst, AttnLayout ld, int64_t B, int64_t T, int64_t W) {
  const int64_t n = B * T * W;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t w = i % W, t = (i / W) % T, b = i / (W * T);
    const S x = src[ls.offset(b) + t * ls.st + w];
    if constexpr (std::is_same_v<S, D>) dst[ld.offset(b) + t * ld.st + w] = x;
    else dst[ld.offset(b) + t * ld.st + w] = D(static_cast<float>(x));  // 16-bit <-> float32
  }
}

template <class S, class D>
void copy_rows(const S* src, AttnLayout ls, D* dst, AttnLayout ld, int64_t B, int64_t T, int64_t W) {
  const int64_t n = B * T * W;
  if (n == 0) return;
  copy_rows_kernel<S, D><<<cuda::grid_for(n), cuda::kLoopBlock, 0, cuda::current_raw_stream()>>>(src, ls, dst, ld, B,
                                                                                                  T, W);
  KILN_CUDA_CHECK_LAUNCH();
}

// An operand of element type X as a contiguous C buffer: x itself when it already is one,
// else a copy held by `keep`.
template <class X, class C>
const C* stage_in(const void* x, AttnLayout l, int64_t B, int64_t T, int64_t W, Tensor& keep) {
  if constexpr (std::is_same_v<X, C>)
    if (is_contiguous(l, T, W)) return static_cast<const C*>(x);
  keep = Tensor::empty({B * T * W}, dtype_of<C>(), current_device());
  copy_rows<X, C>(static_cast<const X*>(x), l, static_cast<C*>(keep.raw_data()), AttnLayout::contiguous(T, W), B, T,
                  W);
  return static_cast<const C*>(keep.raw_data());
}

// Where the composed path writes a result of element type X: x itself when it is a
// contiguous C buffer, else a temporary in `keep` that stage_out_finish copies into x.
template <class X, class C>
C* stage_out(void* x, AttnLayout l, int64_t B, int64_t T, int64_t W, Tensor& keep) {
  if (!x) return nullptr;
  if constexpr (std::is_same_v<X, C>)
    if (is_contiguous(l, T, W)) return static_cast<C*>(x);
  keep = Tensor::empty({B * T * W}, dtype_of<C>(), current_device());
  return static_cast<C*>(keep.raw_data());
}

template <class X, class C>
void stage_out_finish(const Tensor& keep, void* x, AttnLayout l, int64_t B, int64_t T, int64_t W) {
  if (keep.defined() && x)
    copy_rows<C, X>(static_cast<const C*>(keep.raw_data()), AttnLayout::contiguous(T, W), static_cast<X*>(x), l, B,
                    T, W);
}

// lse is (B, Tq) of the compute type: float32 for 16-bit inputs (ops/kernels/nn.h).
void attention_forward_strided(DType dt, const void* q, AttnLayout lq, const void* k, AttnLayout lk, const void* v,
                               AttnLayout lv, void* out, AttnLayout lout, void* lse, int64_t B, int64_t Tq,
                               int64_t Tk, int64_t E, int64_t Ev, double scale, bool causal) {
  if (B * Tq == 0) return;
  if (cuda::flash::try_forward(dt, q, lq, k, lk, v, lv, out, lout, static_cast<float*>(lse), B, Tq, Tk, E, Ev, scale,
                               causal))
    return;
  cuda::dispatch_float(dt, "scaled_dot_product_attention", [&]<class T>() {
    using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
    Tensor kq, kk, kv, ko;
    const C* qc = stage_in<T, C>(q, lq, B, Tq, E, kq);
    const C* kc = stage_in<T, C>(k, lk, B, Tk, E, kk);
    const C* vc = stage_in<T, C>(v, lv, B, Tk, Ev, kv);
    C* oc = stage_out<T, C>(out, lout, B, Tq, Ev, ko);
    attention_forward_t<C>(qc, kc, vc, oc, static_cast<C*>(lse), B, Tq, Tk, E, Ev, scale, causal);
    stage_out_finish<T, C>(ko, out, lout, B, Tq, Ev);
  });
}

void attention_backward_strided(DType dt, const void* q, AttnLayout lq, const void* k, AttnLayout lk, const void* v,
                                AttnLayout lv, const void* out, AttnLayout lout, const void* lse, const void* dout,
                                AttnLayout ldout, void* dq, AttnLayout ldq, void* dk, AttnLayout ldk, void* dv,
                                AttnLayout ldv, int64_t B, int64_t Tq, int64_t Tk, int64_t E, int64_t Ev,
                                double scale, bool causal) {
  if (cuda::flash::try_backward(dt, q, lq, k, lk, v, lv, out, lout, static_cast<const float*>(lse), dout, ldout, dq,
                                ldq, dk, ldk, dv, ldv, B, Tq, Tk, E, Ev, scale, causal))
    return;
  cuda::dispatch_float(dt, "scaled_dot_product_attention_backward", [&]<class T>() {
    using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
    Tensor kq, kk, kv, ko, kg, kdq, kdk, kdv;
    const C* qc = stage_in<T, C>(q, lq, B, Tq, E, kq);
    const C* kc = stage_in<T, C>(k, lk, B, Tk, E, kk);
    const C* vc = stage_in<T, C>(v, lv, B, Tk, Ev, kv);
    const C* oc = stage_in<T, C>(out, lout, B, Tq, Ev, ko);
    const C* gc = stage_in<T, C>(dout, ldout, B, Tq, Ev, kg);
    C* dqc = stage_out<T, C>(dq, ldq, B, Tq, E, kdq);
    C* dkc = stage_out<T, C>(dk, ldk, B, Tk, E, kdk);
    C* dvc = stage_out<T, C>(dv, ldv, B, Tk, Ev, kdv);
    attention_backward_t<C>(qc, kc, vc, oc, static_cast<const C*>(lse), gc, dqc, dkc, dvc, B, Tq, Tk, E, Ev, scale,
                            causal);
    stage_out_finish<T, C>(kdq, dq, ldq, B, Tq, E);
    stage_out_finish<T, C>(kdk, dk, ldk, B, Tk, E);
    stage_out_finish<T, C>(kdv, dv, ldv, B, Tk, Ev);
  });
}

void attention_forward(DType dt, const void* q, const void* k, const void* v, void* out, void* lse, int64_t B,
                       int64_t Tq, int64_t Tk, int64_t E, int64_t Ev, double scale, bool causal) {
  const AttnLayout lq = AttnLayout::contiguous(Tq, E), lk = AttnLayout::contiguous(Tk, E),
                   lv = AttnLayout::contiguous(Tk, Ev), lo = AttnLayout::contiguous(Tq, Ev);
  attention_forward_strided(dt, q, lq, k, lk, v, lv, out, lo, lse, B, Tq, Tk, E, Ev, scale, causal);
}

void attention_backward(DType dt, const void* q, const void* k, const void* v, const void* out, const void* lse,
                        const void* dout, void* dq, void* dk, void* dv, int64_t B, int64_t Tq, int64_t Tk, int64_t E,
                        int64_t Ev, double scale, bool causal) {
  const AttnLayout lq = AttnLayout::contiguous(Tq, E), lk = AttnLayout::contiguous(Tk, E),
                   lv = AttnLayout::contiguous(Tk, Ev), lo = AttnLayout::contiguous(Tq, Ev);
  attention_backward_strided(dt, q, lq, k, lk, v, lv, out, lo, lse, dout, lo, dq, lq, dk, lk, dv, lv, B, Tq, Tk, E,
                             Ev, scale, causal);
}

const DropoutKernels kDropoutCuda{&dropout_apply};
const EmbeddingKernels kEmbeddingCuda{&embedding_forward, &embedding_backward};
const AttentionKernels kAttentionCuda{&attention_forward, &attention_backward, &attention_forward_strided,
                                      &attention_backward_strided};

}  // namespace

void register_cuda_nn() {
  register_kernel(Op::dropout, DeviceType::CUDA, &kDropoutCuda);
  register_kernel(Op::embedding, DeviceType::CUDA, &kEmbeddingCuda);
  register_kernel(Op::scaled_dot_product_attention, DeviceType::CUDA, &kAttentionCuda);
}

}  // namespace kiln
