// kiln's float32 GEMM for AVX-512 CPUs: C = alpha * op(A) @ op(B) + beta * C, row-major.
//
// The scheme is GotoBLAS's (and BLIS's), the one every fast CPU BLAS uses:
//
//   for jc in N by NC:                 a block of columns of C and of op(B)
//     for pc in K by KC:               a slice of the shared dimension
//       pack op(B)[pc, jc]  -> Bp      KC x NC, as NR-wide column panels (L2)
//       for ic in M by MC:
//         pack op(A)[ic, pc] -> Ap     MC x KC, as MR-tall row panels (L2)
//         for jr in NC by NR:          one B panel, KC x NR = 32 KiB, stays in L1 ...
//           for ir in MC by MR:        ... while the A panels stream past it
//             micro-kernel: C[ir, jr] (MR x NR) += Ap panel @ Bp panel
//
// The micro-kernel keeps a 12 x 32 tile of C in 24 of the 32 zmm registers: per k it loads
// one row of the B panel (2 vectors), broadcasts 12 values of the A panel and issues 24
// fused multiply-adds, so the loads never limit the two FMA units. Packing makes both
// panels contiguous and aligned whatever the strides and transposes of A and B (a
// transposed operand is packed 16 x 16 blocks at a time with AVX-512 shuffles) and
// zero-pads the edges, so the kernel has no special cases but the final masked store.
//
// Threads (OpenMP) take independent blocks of C, by rows or by columns, each with its own
// packing buffers: no barriers, and every panel a thread reads is in its own core's cache.
// Measured against Eigen 3.4 and OpenBLAS on the workloads' shapes in docs/benchmarks.md.
#include "kiln/ops/cpu/sgemm.h"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <type_traits>
#include <omp.h>
#include "kiln/core/error.h"
#include "kiln/core/half.h"
#include "kiln/ops/cpu/sgemm_pack.h"


namespace kiln {

#if defined(__AVX512F__)

bool sgemm_packed_available() { return true; }

namespace {

using namespace sgemm_detail;

constexpr int MR = 12;         // rows of the C tile held in registers
constexpr int NR = 32;         // columns: two 16-float zmm vectors
constexpr int64_t KC = 256;    // depth of one packed slice: a B panel is KC x NR x 4 B = 32 KiB (L1)
constexpr int64_t MC = 192;    // rows of a packed A block: MC x KC x 4 B = 192 KiB (L2)
constexpr int64_t kDirectBRows = 24;  // C at most two tiles tall reads a row-major B in place
constexpr int64_t NC = 512;    // columns of a packed B block: KC x NC x 4 B = 512 KiB (L2)

/// Packs op(A) rows [0, mc) x depth [0, kc) (A already offset to the block's corner) into
/// MR-row panels: Ap[panel][k][i] = op(A)(panel * MR + i, k), zero rows past mc. E is
/// float, or F16 / BF16 widened here.
template <class E>
void pack_a(bool trans_a, const E* A, int64_t lda, int64_t mc, int64_t kc, float* Ap) {
  for (int64_t i0 = 0; i0 < mc; i0 += MR, Ap += MR * kc) {
    const int mr = int(std::min<int64_t>(MR, mc - i0));
    if (trans_a) {  // A stored (K, M): the MR values of one k are contiguous
      for (int64_t k = 0; k < kc; ++k)  // MR = 12 lanes of one masked copy, zeros past mr
        _mm512_mask_storeu_ps(Ap + k * MR, 0x0FFF, load16(A + k * lda + i0, mr));
    } else {  // A stored (M, K): transpose MR rows
      pack_transposed(RowsOf<E>{A + i0 * lda, lda}, mr, kc, Ap, MR);
      if (mr < MR)
        for (int64_t k = 0; k < kc; ++k)
          for (int i = mr; i < MR; ++i) Ap[k * MR + i] = 0.f;
    }
  }
}

/// Packs op(B) depth [0, kc) x columns [0, nc) (B already moved to the block's corner)
/// into NR-column panels: Bp[panel][k][j] = op(B)(k, panel * NR + j), zero past nc.
template <class E>
void pack_b(bool trans_b, const RowsOf<E>& B, int64_t kc, int64_t nc, float* Bp) {
  for (int64_t j0 = 0; j0 < nc; j0 += NR) {
    const int nr = int(std::min<int64_t>(NR, nc - j0));
    float* d = Bp + j0 * kc;
    if (!trans_b) {  // stored row k holds op(B)'s row k: each k's NR values are contiguous
      const int n0 = std::min(nr, 16), n1 = std::clamp(nr - 16, 0, 16);
      for (int64_t k = 0; k < kc; ++k) {
        const E* s = B.row(k) + j0;
        _mm512_store_ps(d + k * NR, load16(s, n0));
        _mm512_store_ps(d + k * NR + 16, n1 > 0 ? load16(s + 16, n1) : _mm512_setzero_ps());
      }
    } else {  // stored row j holds op(B)'s column j: transpose 16 at a time
      for (int h = 0; h < NR; h += 16) {
        const int rows = std::clamp(nr - h, 0, 16);
        if (rows > 0) pack_transposed(B.from_row(j0 + h), rows, kc, d + h, NR);
        if (rows < 16)
          for (int64_t k = 0; k < kc; ++k)
            for (int j = h + rows; j < h + 16; ++j) d[k * NR + j] = 0.f;
      }
    }
  }
}

/// C tile (mr x nr, row stride ldc) = alpha * Ap panel @ B panel + beta * C, for
/// mr <= ROWS <= MR (a panel's last rows run the 8- or 4-row variant instead of computing
/// zeros); beta == 0 does not read C. The 2 x ROWS accumulators stay in registers. The B
/// panel's rows are Bp.ld apart (NR when packed, B's own row stride when it is read in
/// place), or found in a row table (kTable); masked loads keep the reads inside its nr
/// columns. A non-null bias (nr values) is added to every row: the linear layer's bias
/// without a separate pass over C.
template <int ROWS, bool kTable>
void micro_kernel(int64_t kc, const float* __restrict Ap, Rows Bp, float* C, int64_t ldc, int mr, int nr,
                  float alpha, float beta, const float* bias) {
  const __mmask16 m0 = nr >= 16 ? 0xFFFF : __mmask16((1u << nr) - 1);
  const __mmask16 m1 = nr >= 32 ? 0xFFFF : nr > 16 ? __mmask16((1u << (nr - 16)) - 1) : 0;
  __m512 c0[ROWS], c1[ROWS];
#pragma GCC unroll 12
  for (int i = 0; i < ROWS; ++i) {
    c0[i] = c1[i] = _mm512_setzero_ps();
    if (i < mr) {  // the tile of C is read or written after the loop: fetch it meanwhile
      _mm_prefetch(reinterpret_cast<const char*>(C + i * ldc), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(C + i * ldc + 16), _MM_HINT_T0);
    }
  }
  const float* b = Bp.base;
  for (int64_t k = 0; k < kc; ++k) {
    if constexpr (kTable) b = Bp.base + Bp.rows[k];
    const __m512 b0 = _mm512_maskz_loadu_ps(m0, b), b1 = _mm512_maskz_loadu_ps(m1, b + 16);
#pragma GCC unroll 12
    for (int i = 0; i < ROWS; ++i) {
      const __m512 a = _mm512_set1_ps(Ap[i]);
      c0[i] = _mm512_fmadd_ps(a, b0, c0[i]);
      c1[i] = _mm512_fmadd_ps(a, b1, c1[i]);
    }
    Ap += MR;
    if constexpr (!kTable) b += Bp.ld;
  }
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  const __m512 bias0 = bias ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps();
  const __m512 bias1 = bias ? _mm512_maskz_loadu_ps(m1, bias + 16) : _mm512_setzero_ps();
#pragma GCC unroll 12
  for (int i = 0; i < ROWS; ++i) {
    if (i >= mr) break;
    float* c = C + i * ldc;
    __m512 r0 = _mm512_fmadd_ps(va, c0[i], bias0), r1 = _mm512_fmadd_ps(va, c1[i], bias1);
    if (beta != 0.f) {
      r0 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m0, c), r0);
      r1 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m1, c + 16), r1);
    }
    _mm512_mask_storeu_ps(c, m0, r0);
    _mm512_mask_storeu_ps(c + 16, m1, r1);
  }
}

/// C block (mc x nc) from packed Ap (mc rows) and B (nc columns), depth kc: B packed in
/// NR-column panels (packed), or read in place (rows of op(B), by stride or table).
void macro_kernel(int64_t mc, int64_t nc, int64_t kc, const float* Ap, const Rows& B, bool packed, float* C,
                  int64_t ldc, float alpha, float beta, const float* bias) {
  auto tile = [&]<bool kTable>(int64_t i0, int64_t j0) {
    const int mr = int(std::min<int64_t>(MR, mc - i0)), nr = int(std::min<int64_t>(NR, nc - j0));
    const float* a = Ap + i0 * kc;
    const Rows b = packed ? Rows{B.base + j0 * kc, NR} : B.from_col(j0);
    float* c = C + i0 * ldc + j0;
    const float* bi = bias ? bias + j0 : nullptr;
    if (mr > 8) micro_kernel<MR, kTable>(kc, a, b, c, ldc, mr, nr, alpha, beta, bi);
    else if (mr > 4) micro_kernel<8, kTable>(kc, a, b, c, ldc, mr, nr, alpha, beta, bi);
    else micro_kernel<4, kTable>(kc, a, b, c, ldc, mr, nr, alpha, beta, bi);
  };
  const bool table = !packed && B.rows;
  for (int64_t j0 = 0; j0 < nc; j0 += NR)  // one B panel stays in L1 ...
    for (int64_t i0 = 0; i0 < mc; i0 += MR) {  // ... while the A panels pass
      if (table) tile.template operator()<true>(i0, j0);
      else tile.template operator()<false>(i0, j0);
    }
}

thread_local Buffer tls_a, tls_b, tls_part;  // packed A, packed B, the K split's partial C's

/// The whole loop nest on the calling thread, with its own packing buffers.
template <class E>
void sgemm_serial(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const E* A,
                  int64_t lda, const RowsOf<E>& B, float beta, float* C, int64_t ldc, const float* bias) {
  // K in equal slices of at most KC (576 = 3 x 192, not 256 + 256 + 64: every slice pays
  // one pass over the C tiles, a short one would pay it for little work).
  const int64_t kslices = (K + KC - 1) / KC, kcmax = (K + kslices - 1) / kslices;
  // A short C (a convolution's 16 or 32 output channels) uses each B panel for a tile or
  // two: packing would copy B for less than it saves, so a row-major B is read in place.
  // (16-bit operands are always packed: the micro-kernel reads float32.)
  const bool direct_b = std::is_same_v<E, float> && !trans_b && M <= kDirectBRows;
  float* Bp = direct_b ? nullptr : tls_b.get((std::min(N, NC) + NR - 1) / NR * NR * kcmax);
  float* Ap = tls_a.get((std::min(M, MC) + MR - 1) / MR * MR * kcmax);
  for (int64_t jc = 0; jc < N; jc += NC) {
    const int64_t nc = std::min(NC, N - jc);
    for (int64_t pc = 0; pc < K; pc += kcmax) {
      const int64_t kc = std::min(kcmax, K - pc);
      const RowsOf<E> Bc = trans_b ? B.from_row(jc).from_col(pc) : B.from_row(pc).from_col(jc);
      if (!direct_b) pack_b(trans_b, Bc, kc, nc, Bp);
      const float b = pc == 0 ? beta : 1.f;  // later slices add to what the first wrote
      for (int64_t ic = 0; ic < M; ic += MC) {
        const int64_t mc = std::min(MC, M - ic);
        pack_a(trans_a, trans_a ? A + pc * lda + ic : A + ic * lda + pc, lda, mc, kc, Ap);
        Rows Bf{Bp, NR};
        if constexpr (std::is_same_v<E, float>)
          if (direct_b) Bf = Bc;
        macro_kernel(mc, nc, kc, Ap, Bf, !direct_b, C + ic * ldc + jc, ldc, alpha, b,
                     pc == 0 && bias ? bias + jc : nullptr);
      }
    }
  }
}

/// sgemm_packed over B given by Rows (a stride or a row table).
template <class E>
void sgemm_rows(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const E* A,
                int64_t lda, const RowsOf<E>& B, float beta, float* C, int64_t ldc, int threads, const float* bias) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0 || alpha == 0.f) {  // C = beta * C + bias (beta == 0 never reads C)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j)
        C[i * ldc + j] = (beta == 0.f ? 0.f : beta * C[i * ldc + j]) + (bias ? bias[j] : 0.f);
    return;
  }
  const int want = omp_in_parallel() ? 1 : std::max(1, threads);
  // A deep product with a small C (a weight gradient: C = dY^T X over 2048 tokens) splits
  // K instead: each thread packs its own share of both operands (a split of C would have
  // every thread pack all of one) into its own partial C, summed in thread order after.
  if (want > 1 && K >= 2 * std::max(M, N) && K >= 512 * want && M * N <= (int64_t(1) << 18)) {
    const int nt = int(std::min<int64_t>(want, K / 256));
    float* part = tls_part.get((nt - 1) * M * N);  // threads 1.. write here, thread 0 into C
#pragma omp parallel num_threads(nt)
    {
      // K >= 512 T: every thread's share is at least 256 deep
      const int t = omp_get_thread_num(), T = omp_get_num_threads();
      const int64_t per = (K + T - 1) / T, k0 = t * per, kn = std::min(K, k0 + per) - k0;
      const E* At = trans_a ? A + k0 * lda : A + k0;
      const RowsOf<E> Bt = trans_b ? B.from_col(k0) : B.from_row(k0);
      if (t == 0) sgemm_serial(trans_a, trans_b, M, N, kn, alpha, At, lda, Bt, beta, C, ldc, bias);
      else sgemm_serial(trans_a, trans_b, M, N, kn, alpha, At, lda, Bt, 0.f, part + (t - 1) * M * N, N, nullptr);
#pragma omp barrier
#pragma omp for schedule(static)
      for (int64_t i = 0; i < M; ++i)
        for (int u = 1; u < T; ++u) {
          const float* p = part + (u - 1) * M * N + i * N;
          float* c = C + i * ldc;
          for (int64_t j = 0; j < N; ++j) c[j] += p[j];
        }
    }
    return;
  }
  // Otherwise threads take independent blocks of C (split_c, sgemm_pack.h).
  split_c(want, M, N, NR, [&](int64_t r0, int64_t rows, int64_t c0, int64_t cols) {
    sgemm_serial(trans_a, trans_b, rows, cols, K, alpha, trans_a ? A + r0 : A + r0 * lda, lda,
                 trans_b ? B.from_row(c0) : B.from_col(c0), beta, C + r0 * ldc + c0, ldc, bias ? bias + c0 : nullptr);
  });
}

}  // namespace

void sgemm_packed(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                  int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc, int threads,
                  const float* bias) {
  sgemm_rows(trans_a, trans_b, M, N, K, alpha, A, lda, Rows{B, ldb}, beta, C, ldc, threads, bias);
}

void sgemm_packed_rows(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                       int64_t lda, const float* B, const int64_t* b_rows, float beta, float* C, int64_t ldc,
                       int threads) {
  sgemm_rows(trans_a, trans_b, M, N, K, alpha, A, lda, Rows{B, 0, b_rows}, beta, C, ldc, threads, nullptr);
}

namespace {

/// sgemm_packed_half for one element type E (F16 or BF16).
template <class E>
void sgemm_half(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda,
                const uint16_t* B, int64_t ldb, uint16_t* C, int64_t ldc, int threads, const float* bias) {
  if (M <= 0 || N <= 0) return;
  const auto* a = reinterpret_cast<const E*>(A);
  const RowsOf<E> b{reinterpret_cast<const E*>(B), ldb};
  const int want = omp_in_parallel() ? 1 : std::max(1, threads);
  // Threads take blocks of C as sgemm_packed does; each sums its block in float32 (in a
  // buffer of its own) and rounds it to E once.
  split_c(want, M, N, NR, [&](int64_t r0, int64_t rows, int64_t c0, int64_t cols) {
    float* s = tls_part.get(rows * cols);
    if (K > 0)
      sgemm_serial(trans_a, trans_b, rows, cols, K, 1.f, trans_a ? a + r0 : a + r0 * lda, lda,
                   trans_b ? b.from_row(c0) : b.from_col(c0), 0.f, s, cols, bias ? bias + c0 : nullptr);
    else
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) s[i * cols + j] = bias ? bias[c0 + j] : 0.f;
    for (int64_t i = 0; i < rows; ++i) {
      const float* src = s + i * cols;
      uint16_t* dst = C + (r0 + i) * ldc + c0;
      int64_t j = 0;
      if constexpr (std::is_same_v<E, F16>)
        for (; j + 16 <= cols; j += 16)
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + j),
                              _mm512_cvtps_ph(_mm512_loadu_ps(src + j), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      for (; j < cols; ++j) dst[j] = std::is_same_v<E, F16> ? float_to_half_bits(src[j]) : float_to_bf16_bits(src[j]);
    }
  });
}

}  // namespace

void sgemm_packed_half(bool bf16, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const uint16_t* A,
                       int64_t lda, const uint16_t* B, int64_t ldb, uint16_t* C, int64_t ldc, int threads,
                       const float* bias) {
  if (bf16) sgemm_half<BF16>(trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc, threads, bias);
  else sgemm_half<F16>(trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc, threads, bias);
}

#else  // no AVX-512 in this build: gemm_cpu stays on Eigen

bool sgemm_packed_available() { return false; }

void sgemm_packed(bool, bool, int64_t M, int64_t N, int64_t K, float, const float*, int64_t, const float*, int64_t,
                  float, float*, int64_t, int, const float*) {
  KILN_FAIL("matmul (cpu sgemm): the packed AVX-512 float32 GEMM is not compiled into this build (no AVX-512); ",
            "called for M=", M, " N=", N, " K=", K);
}

void sgemm_packed_rows(bool, bool, int64_t M, int64_t N, int64_t K, float, const float*, int64_t, const float*,
                       const int64_t*, float, float*, int64_t, int) {
  KILN_FAIL("conv2d (cpu sgemm): the packed AVX-512 float32 GEMM is not compiled into this build (no AVX-512); ",
            "called for M=", M, " N=", N, " K=", K);
}

void sgemm_packed_half(bool, bool, bool, int64_t M, int64_t N, int64_t K, const uint16_t*, int64_t, const uint16_t*, int64_t,
                      uint16_t*, int64_t, int, const float*) {
  KILN_FAIL("matmul (cpu 16-bit gemm): the packed AVX-512 GEMM is not compiled into this build (no AVX-512); ",
            "called for M=", M, " N=", N, " K=", K);
}

#endif

}  // namespace kiln
