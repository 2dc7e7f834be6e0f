// CUDA kernels of the nn op family with the CPU's kernel types (ops/kernels/nn.h):
// dropout with the CPU's Philox keep rule (bitwise the same mask), embedding (gather, and a
// deterministic sorted-run scatter-add backward), and attention as cuBLAS GEMMs around one
// fused causal-mask + softmax kernel per row (16-bit inputs run in float32 internally).
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
#include "kiln/ops/cuda/register.h"
#include "kiln/ops/cuda/shape_cuda.h"
#include "kiln/ops/cuda/shape_index.h"
#include "kiln/ops/dispatch.h"
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

template <class Src, class Dst>
__global__ void convert_kernel(const Src* in, Dst* out, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = Dst(static_cast<float>(in[i]));
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
// C is contiguous (batch, M, N).
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

// 16-bit attention: inputs converted to float32 temporaries, the float32 path, results
// converted back (lse is saved in 16 bits, so the backward recomputes it in float32).
template <class H>
Tensor to_float(const void* x, int64_t n) {
  Tensor t = Tensor::empty({n}, DType::float32, current_device());
  if (n > 0) {
    convert_kernel<H, float><<<cuda::grid_for(n), cuda::kLoopBlock, 0, cuda::current_raw_stream()>>>(
        static_cast<const H*>(x), static_cast<float*>(t.raw_data()), n);
    KILN_CUDA_CHECK_LAUNCH();
  }
  return t;
}

template <class H>
void from_float(const Tensor& t, void* x) {
  const int64_t n = t.numel();
  if (!x || n == 0) return;
  convert_kernel<float, H><<<cuda::grid_for(n), cuda::kLoopBlock, 0, cuda::current_raw_stream()>>>(
      static_cast<const float*>(t.raw_data()), static_cast<H*>(x), n);
  KILN_CUDA_CHECK_LAUNCH();
}

float* fptr(const Tensor& t) { return t.defined() ? static_cast<float*>(t.raw_data()) : nullptr; }

void attention_forward(DType dt, const void* q, const void* k, const void* v, void* out, void* lse, int64_t B,
                       int64_t Tq, int64_t Tk, int64_t E, int64_t Ev, double scale, bool causal) {
  cuda::dispatch_float(dt, "scaled_dot_product_attention", [&]<class T>() {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      attention_forward_t<T>(static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
                             static_cast<T*>(out), static_cast<T*>(lse), B, Tq, Tk, E, Ev, scale, causal);
    } else {
      Tensor qf = to_float<T>(q, B * Tq * E), kf = to_float<T>(k, B * Tk * E), vf = to_float<T>(v, B * Tk * Ev);
      Tensor of = Tensor::empty({B * Tq * Ev}, DType::float32, current_device());
      Tensor lf = Tensor::empty({B * Tq}, DType::float32, current_device());
      attention_forward_t<float>(fptr(qf), fptr(kf), fptr(vf), fptr(of), fptr(lf), B, Tq, Tk, E, Ev, scale, causal);
      from_float<T>(of, out);
      from_float<T>(lf, lse);
    }
  });
}

void attention_backward(DType dt, const void* q, const void* k, const void* v, const void* out, const void* lse,
                        const void* dout, void* dq, void* dk, void* dv, int64_t B, int64_t Tq, int64_t Tk, int64_t E,
                        int64_t Ev, double scale, bool causal) {
  cuda::dispatch_float(dt, "scaled_dot_product_attention_backward", [&]<class T>() {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      attention_backward_t<T>(static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
                              static_cast<const T*>(out), static_cast<const T*>(lse), static_cast<const T*>(dout),
                              static_cast<T*>(dq), static_cast<T*>(dk), static_cast<T*>(dv), B, Tq, Tk, E, Ev, scale,
                              causal);
    } else {
      Tensor qf = to_float<T>(q, B * Tq * E), kf = to_float<T>(k, B * Tk * E), vf = to_float<T>(v, B * Tk * Ev);
      Tensor of = to_float<T>(out, B * Tq * Ev), gf = to_float<T>(dout, B * Tq * Ev);
      const Device dev = current_device();
      Tensor dqf = dq ? Tensor::empty({B * Tq * E}, DType::float32, dev) : Tensor();
      Tensor dkf = dk ? Tensor::empty({B * Tk * E}, DType::float32, dev) : Tensor();
      Tensor dvf = dv ? Tensor::empty({B * Tk * Ev}, DType::float32, dev) : Tensor();
      attention_backward_t<float>(fptr(qf), fptr(kf), fptr(vf), fptr(of), nullptr, fptr(gf), fptr(dqf), fptr(dkf),
                                  fptr(dvf), B, Tq, Tk, E, Ev, scale, causal);
      from_float<T>(dqf, dq);
      from_float<T>(dkf, dk);
      from_float<T>(dvf, dv);
    }
  });
}

const DropoutKernels kDropoutCuda{&dropout_apply};
const EmbeddingKernels kEmbeddingCuda{&embedding_forward, &embedding_backward};
const AttentionKernels kAttentionCuda{&attention_forward, &attention_backward, nullptr, nullptr};  // no strided kernels yet

}  // namespace

void register_cuda_nn() {
  register_kernel(Op::dropout, DeviceType::CUDA, &kDropoutCuda);
  register_kernel(Op::embedding, DeviceType::CUDA, &kEmbeddingCuda);
  register_kernel(Op::scaled_dot_product_attention, DeviceType::CUDA, &kAttentionCuda);
}

}  // namespace kiln
