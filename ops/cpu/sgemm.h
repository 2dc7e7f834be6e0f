// kiln's own float32 GEMM for x86 CPUs with AVX-512 or AVX2 + FMA + F16C: the GotoBLAS /
// BLIS scheme in one file (ops/cpu/sgemm.cpp). gemm_cpu<float> calls it when it is
// compiled in; everything else (float64, CPUs without AVX2) stays on Eigen. See
// docs/architecture.md.
#pragma once
#include <cstdint>

namespace kiln {

/// True when this build contains the packed kernel (compiled with -march=native on a CPU
/// with AVX-512, or with AVX2, FMA and F16C).
bool sgemm_packed_available();

/// The instruction set the packed float32 kernel runs: "AVX-512", "AVX2" or "none". The
/// environment variable KILN_CPU_SGEMM (read once) chooses another kernel of the build:
/// avx2 in an AVX-512 build, or scalar16, a plain C++ model of the AVX-512 kernel (slow:
/// for tests on CPUs without AVX-512).
const char* sgemm_packed_isa();

/// Row-major C (M, N) = alpha * op(A) (M, K) @ op(B) (K, N) + beta * C, with the same
/// conventions as gemm_cpu: op(A) = A (M, K) with row stride lda, or A stored (K, M) and
/// read transposed when trans_a; the same for B. beta == 0 never reads C. A non-null
/// bias (N values) is added to every row of C. Runs on `threads` OpenMP threads (1 inside
/// a parallel region). Throws kiln::Error when the kernel is not compiled in.
void sgemm_packed(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                  int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc, int threads,
                  const float* bias = nullptr);

/// sgemm_packed with B's stored rows found through a table: row r (r < K when !trans_b,
/// r < N when trans_b) starts at B + b_rows[r]. A convolution passes its input plane and
/// each tap's offset, and the GEMM reads the im2col matrix without it being built.
void sgemm_packed_rows(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                       int64_t lda, const float* B, const int64_t* b_rows, float beta, float* C, int64_t ldc,
                       int threads);

/// C (M, N) = op(A) @ op(B) [+ bias] with A, B and C float16, or bfloat16 when `bf16` (raw
/// 16-bit storage), on the float32 micro-kernel: each panel widened to float32 as it is
/// packed (no conversion pass over the operands), each thread's block of C summed in
/// float32 and rounded once.
void sgemm_packed_half(bool bf16, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const uint16_t* A,
                       int64_t lda, const uint16_t* B, int64_t ldb, uint16_t* C, int64_t ldc, int threads,
                       const float* bias = nullptr);

/// True when this build has the packed kernels and the CPU has AVX512_BF16 (checked once).
bool sgemm_bf16_available();
/// True when bf16 matmul / linear on the CPU should use sgemm_bf16: available, and a CPU
/// whose VDPBF16PS doubles its float32 FMA rate (AMD Zen 4 and later; Intel's measured at
/// half of it). KILN_CPU_BF16_GEMM overrides: 0 (off), 1 (the AVX512_BF16 kernel where the
/// CPU has it), amx (the AMX kernel), amx_model (the AMX kernel's loop nest on a C++ model
/// of the tile instructions, any CPU: tests).
bool sgemm_bf16_preferred();
/// The kernel behind sgemm_bf16 and sgemm_bf16_rounding: "amx" or "amx_model" when
/// KILN_CPU_BF16_GEMM selects it, else "avx512_bf16" where that kernel can run, else null
/// (they then throw).
const char* sgemm_bf16_kernel();
/// True when the CPU has AMX-BF16 and Linux granted this process the tile state (asked
/// once, on the first call).
bool sgemm_amx_available();

/// Row-major C (M, N) float32 = op(A) @ op(B) + beta * C [+ bias], with A and B bfloat16
/// (raw 16-bit storage) and every product summed in float32 (VDPBF16PS; ops/cpu/sgemm_bf16.cpp).
/// VDPBF16PS (and AMX's TDPBF16PS) take a subnormal bf16 input (|x| < 2^-126) as zero, as
/// oneDNN's bf16 GEMMs in PyTorch do; the float32 kernels, sgemm_packed_half and the AMX
/// model keep it.
/// Transposes, strides and bias as sgemm_packed; beta is 0 (C not read) or 1. Throws
/// kiln::Error when no kernel can run (sgemm_bf16_kernel() null).
void sgemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda,
                const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc, int threads,
                const float* bias = nullptr);

/// sgemm_bf16 with C bfloat16 (beta 0): each float32 sum rounded once, as its tile is
/// stored (through a float32 buffer when K is deeper than one packed slice, 512).
void sgemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda,
                const uint16_t* B, int64_t ldb, uint16_t* C, int64_t ldc, int threads, const float* bias = nullptr);

/// sgemm_bf16 over float32 operands, each value rounded to bf16 (nearest even) as it is
/// packed, so a bf16 product costs no conversion pass over the operands; B's rows through
/// b_rows when it is not null (as sgemm_packed_rows, ldb then unused). The bf16
/// convolutions on the CPU pass float32 buffers holding bf16 values, where the rounding is
/// exact and the result equals a float32 GEMM's up to the order of the sums (and subnormal
/// inputs taken as zero, see above).
void sgemm_bf16_rounding(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                         const float* B, int64_t ldb, const int64_t* b_rows, float beta, float* C, int64_t ldc,
                         int threads);
/// The same with B already bfloat16 (raw bits; A float32, rounded as it is packed): the
/// bf16 convolutions' padded inputs, read where they lie.
void sgemm_bf16_rounding(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                         const uint16_t* B, int64_t ldb, const int64_t* b_rows, float beta, float* C, int64_t ldc,
                         int threads);

/// C (M, N) float32 = A @ B (beta 0, on the calling thread) over Kp *pairs* of bf16 values,
/// neither operand packed: A's row i holds its Kp pairs (32-bit lanes, the even k in the low
/// half) at A + i lda, B's pair row p holds N pairs at B + b_off[p] (any 4-byte offsets;
/// read with masks, never past column N). The wide bf16 convolution's forward stores its
/// padded input with channels interleaved in pairs, so every (channel pair, tap) row of its
/// GEMM lies in memory as this reads it (ops/cpu/conv_wide.cpp). Only on the AVX512_BF16
/// kernel: sgemm_bf16_pair_rows_available() (false where AMX or no bf16 kernel is chosen);
/// otherwise kiln::Error.
bool sgemm_bf16_pair_rows_available();
void sgemm_bf16_pair_rows(int64_t M, int64_t N, int64_t Kp, const uint32_t* A, int64_t lda, const uint32_t* B,
                          const int64_t* b_off, float* C, int64_t ldc);

/// C (M, N) float32 = A @ B + beta C (beta 0 or 1, on the calling thread) with A read where
/// it lies: A's row i is the K bf16 values at A + a_off[i] (any element offsets; nothing past
/// a row's K values is read), and B given transposed, column j's K float32 values at Bt + j
/// ldb (rounded to bf16 as B is packed, once). The wide bf16 convolution's weight
/// gradient, dW^T (C kH kW, O) = its padded input's tap rows @ dY^T: the tap rows are A, so
/// only the few output channels are packed (ops/cpu/conv_wide.cpp). Needs the same kernel as
/// sgemm_bf16_pair_rows (sgemm_bf16_pair_rows_available()); otherwise kiln::Error.
void sgemm_bf16_a_rows(int64_t M, int64_t N, int64_t K, const uint16_t* A, const int64_t* a_off, const float* Bt,
                       int64_t ldb, float beta, float* C, int64_t ldc);

/// The AMX forms of the three above (ops/cpu/sgemm_amx.cpp; sgemm_bf16 calls them when
/// KILN_CPU_BF16_GEMM selects AMX): the tile instructions, or with `model` their C++ model.
/// A build without the packed kernels (AVX2 or AVX-512) throws kiln::Error.
void sgemm_amx(bool model, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const uint16_t* A,
               int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc, int threads,
               const float* bias = nullptr);
void sgemm_amx(bool model, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const uint16_t* A,
               int64_t lda, const uint16_t* B, int64_t ldb, uint16_t* C, int64_t ldc, int threads,
               const float* bias = nullptr);
void sgemm_amx_rounding(bool model, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A,
                        int64_t lda, const float* B, int64_t ldb, const int64_t* b_rows, float beta, float* C,
                        int64_t ldc, int threads);
void sgemm_amx_rounding(bool model, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A,
                        int64_t lda, const uint16_t* B, int64_t ldb, const int64_t* b_rows, float beta, float* C,
                        int64_t ldc, int threads);

}  // namespace kiln
