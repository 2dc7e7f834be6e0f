// kiln's float32 GEMM for x86 CPUs with AVX-512 or AVX2 + FMA: C = alpha * op(A) @ op(B) + beta * C,
// row-major.
//
// The scheme is GotoBLAS's (and BLIS's), the one every fast CPU BLAS uses:
//
//   for jc in N by NC:                 a block of columns of C and of op(B)
//     for pc in K by KC:               a slice of the shared dimension
//       pack op(B)[pc, jc]  -> Bp      KC x NC, as NR-wide column panels (L2)
//       for ic in M by MC:
//         pack op(A)[ic, pc] -> Ap     MC x KC, as MR-tall row panels (L2)
//         for jr in NC by NR:          one B panel, KC x NR (16 KiB with AVX2), stays in L1 ...
//           for ir in MC by MR:        ... while the A panels stream past it
//             micro-kernel: C[ir, jr] (MR x NR) += Ap panel @ Bp panel
//
// With AVX-512 the two inner loops swap: a B panel of 32 columns would fill a 48 KiB L1
// (KC x NR x 4 B with KC = 384), so the A panel (12 x 384 x 4 B = 18 KiB) stays in L1 while
// the B panels stream from L2, prefetched 8 rows ahead (Isa::kAPanelInL1; single-threaded 5-8%
// faster at 1024^3 and 2048^3 on an Intel Xeon with AVX-512, 0-4% on 2 threads; docs/benchmarks.md).
//
// The micro-kernel keeps an MR x NR tile of C in registers, NR two vectors wide: per k it
// loads one row of the B panel (2 vectors), broadcasts MR values of the A panel and issues
// 2 MR fused multiply-adds, so the loads never limit the two FMA units. With AVX-512 the
// tile is 12 x 32 (24 of the 32 zmm registers), with AVX2 6 x 16 (12 of the 16 ymm). The
// code is written once over the vector operations of sgemm_pack.h (Avx512, Avx2) and
// compiled for each instruction set the build has; an AVX-512 build also carries the AVX2
// one (KILN_CPU_SGEMM=avx2 selects it, so both are tested on an AVX-512 machine), and every
// build a scalar model of AVX-512 (Scalar16, KILN_CPU_SGEMM=scalar16: the AVX-512 tile
// geometry tested on any CPU). Packing
// makes both panels contiguous and aligned whatever the strides and transposes of A and B
// (a transposed operand is packed W x W blocks at a time with shuffles, W the vector's
// float lanes) and zero-pads the edges, so the kernel has no special cases but the final
// masked store.
//
// Threads (OpenMP) take independent blocks of C, by rows or by columns, each with its own
// packing buffers: no barriers, and every panel a thread reads is in its own core's cache.
// Measured against Eigen 3.4 and OpenBLAS on the workloads' shapes in docs/benchmarks.md.
#include "kiln/ops/cpu/sgemm.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <omp.h>
#include "kiln/core/copy.h"
#include "kiln/core/error.h"
#include "kiln/core/half.h"
#include "kiln/ops/cpu/sgemm_pack.h"


namespace kiln {

#if defined(KILN_SGEMM_AVX512) || defined(KILN_SGEMM_AVX2)

namespace {

using namespace sgemm_detail;

/// Packs op(A) rows [0, mc) x depth [0, kc) (A already offset to the block's corner) into
/// MR-row panels: Ap[panel][k][i] = op(A)(panel * MR + i, k), zero rows past mc. E is
/// float, or F16 / BF16 widened here.
template <class Isa, class E>
void pack_a(bool trans_a, const E* A, int64_t lda, int64_t mc, int64_t kc, float* Ap) {
  constexpr int MR = Isa::MR;
  for (int64_t i0 = 0; i0 < mc; i0 += MR, Ap += MR * kc) {
    const int mr = int(std::min<int64_t>(MR, mc - i0));
    if (trans_a) {  // A stored (K, M): the MR values of one k are contiguous
      const typename Isa::Mask keep = Isa::mask(MR);
      // MR lanes of one copy, zeros past mr (with AVX2 the store's spill past MR lanes is
      // overwritten by k + 1's). The load reads a whole vector where the block has that many
      // columns left (lanes past MR are not kept): a partial one is a masked load, or for
      // 16-bit values with AVX2 a copy through memory, on every k.
      const int n = mc - i0 >= Isa::W ? Isa::W : mr;
      for (int64_t k = 0; k < kc; ++k) Isa::store_lanes(Ap + k * MR, Isa::load(A + k * lda + i0, n), keep);
    } else {  // A stored (M, K): transpose MR rows
      pack_transposed<Isa>(RowsOf<E>{A + i0 * lda, lda}, mr, kc, Ap, MR);
      if (mr < MR)
        for (int64_t k = 0; k < kc; ++k)
          for (int i = mr; i < MR; ++i) Ap[k * MR + i] = 0.f;
    }
  }
}

/// Packs op(B) depth [0, kc) x columns [0, nc) (B already moved to the block's corner)
/// into NR-column panels: Bp[panel][k][j] = op(B)(k, panel * NR + j), zero past nc.
template <class Isa, class E>
void pack_b(bool trans_b, const RowsOf<E>& B, int64_t kc, int64_t nc, float* Bp) {
  constexpr int W = Isa::W, NR = Isa::NR;
  for (int64_t j0 = 0; j0 < nc; j0 += NR) {
    const int nr = int(std::min<int64_t>(NR, nc - j0));
    float* d = Bp + j0 * kc;
    if (!trans_b) {  // stored row k holds op(B)'s row k: each k's NR values are contiguous
      const int n0 = std::min(nr, W), n1 = std::clamp(nr - W, 0, W);
      for (int64_t k = 0; k < kc; ++k) {
        const E* s = B.row(k) + j0;
        Isa::store(d + k * NR, Isa::load(s, n0));
        Isa::store(d + k * NR + W, n1 > 0 ? Isa::load(s + W, n1) : Isa::zero());
      }
    } else {  // stored row j holds op(B)'s column j: transpose W at a time
      for (int h = 0; h < NR; h += W) {
        const int rows = std::clamp(nr - h, 0, W);
        if (rows > 0) pack_transposed<Isa>(B.from_row(j0 + h), rows, kc, d + h, NR);
        if (rows < W)
          for (int64_t k = 0; k < kc; ++k)
            for (int j = h + rows; j < h + W; ++j) d[k * NR + j] = 0.f;
      }
    }
  }
}

/// C tile (mr x nr) = alpha * Ap panel @ B panel + beta * C, written to `out` (row stride
/// ldo): C itself (O = float, out == C), or, in a 16-bit GEMM's last slice of K, its 16-bit
/// result rounded as Tensor::to rounds (O = F16 / BF16; C the float32 sums of the earlier
/// slices, read when beta != 0). mr <= ROWS <= MR (a panel's last rows run the 2/3- or
/// 1/3-height variant instead of computing zeros); beta == 0 does not read C. The 2 x ROWS
/// accumulators stay in registers. The B panel's rows are Bp.ld apart (NR when packed, B's
/// own row stride when it is read in place), or found in a row table (kTable); unless every
/// row has NR readable values (kFull: a packed panel is zero-padded), masked loads keep the
/// reads inside its nr columns. A non-null bias (nr values) is added to every row: the
/// linear layer's bias without a separate pass over C.
template <class Isa, int ROWS, bool kTable, bool kFull, class O>
void micro_kernel(int64_t kc, const float* __restrict Ap, Rows Bp, const float* C, int64_t ldc, O* out, int64_t ldo,
                  int mr, int nr, float alpha, float beta, const float* bias) {
  using V = typename Isa::V;
  constexpr int W = Isa::W, MR = Isa::MR;
  const typename Isa::Mask m0 = Isa::mask(nr), m1 = Isa::mask(nr - W);
  V c0[ROWS], c1[ROWS];
#pragma GCC unroll 12
  for (int i = 0; i < ROWS; ++i) {
    c0[i] = c1[i] = Isa::zero();
    if (i < mr) {  // the tile is written (and C read) after the loop: fetch it meanwhile
      _mm_prefetch(reinterpret_cast<const char*>(out + i * ldo), _MM_HINT_T0);
      if constexpr (std::is_same_v<O, float>) _mm_prefetch(reinterpret_cast<const char*>(out + i * ldo + 16), _MM_HINT_T0);
    }
  }
  const float* b = Bp.base;
  for (int64_t k = 0; k < kc; ++k) {
    if constexpr (kTable) b = Bp.base + Bp.rows[k];
    V b0, b1;
    if constexpr (Isa::kAPanelInL1 && !kTable && kFull) {  // the B panel streams from L2
      _mm_prefetch(reinterpret_cast<const char*>(b + 8 * Bp.ld), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(b + 8 * Bp.ld + 16), _MM_HINT_T0);
    }
    if constexpr (kFull) b0 = Isa::load(b), b1 = Isa::load(b + W);
    else b0 = Isa::load(b, m0), b1 = Isa::load(b + W, m1);
#pragma GCC unroll 12
    for (int i = 0; i < ROWS; ++i) {
      const V a = Isa::set1(Ap[i]);
      c0[i] = Isa::fma(a, b0, c0[i]);
      c1[i] = Isa::fma(a, b1, c1[i]);
    }
    Ap += MR;
    if constexpr (!kTable) b += Bp.ld;
  }
  const V va = Isa::set1(alpha), vb = Isa::set1(beta);
  const V bias0 = bias ? Isa::load(bias, m0) : Isa::zero();
  const V bias1 = bias ? Isa::load(bias + W, m1) : Isa::zero();
  const bool whole = nr == 2 * W;  // plain stores (a masked store is slow on some CPUs)
#pragma GCC unroll 12
  for (int i = 0; i < ROWS; ++i) {
    if (i >= mr) break;
    V r0 = Isa::fma(va, c0[i], bias0), r1 = Isa::fma(va, c1[i], bias1);
    if (beta != 0.f) {
      const float* c = C + i * ldc;
      r0 = Isa::fma(vb, Isa::load(c, m0), r0);
      r1 = Isa::fma(vb, Isa::load(c + W, m1), r1);
    }
    O* o = out + i * ldo;
    if constexpr (!std::is_same_v<O, float>) {  // rounded to 16 bits
      if (whole) {
        Isa::store2(o, r0, r1);
      } else {
        Isa::store(o, r0, nr);
        Isa::store(o + W, r1, nr - W);
      }
    } else if (whole) {
      Isa::store(o, r0);
      Isa::store(o + W, r1);
    } else {
      Isa::store(o, r0, m0);
      Isa::store(o + W, r1, m1);
    }
  }
}

/// C block (mc x nc) from packed Ap (mc rows) and B (nc columns), depth kc, written to
/// `out` (see micro_kernel; C may be null when beta == 0 and out is not C): B packed in
/// NR-column panels (packed), or read in place (rows of op(B), by stride or table).
template <class Isa, class O>
void macro_kernel(int64_t mc, int64_t nc, int64_t kc, const float* Ap, const Rows& B, bool packed, const float* C,
                  int64_t ldc, O* out, int64_t ldo, float alpha, float beta, const float* bias) {
  constexpr int MR = Isa::MR, NR = Isa::NR;
  auto tile = [&]<bool kTable, bool kFull>(int64_t i0, int64_t j0) {
    const int mr = int(std::min<int64_t>(MR, mc - i0)), nr = int(std::min<int64_t>(NR, nc - j0));
    const float* a = Ap + i0 * kc;
    const Rows b = packed ? Rows{B.base + j0 * kc, NR} : B.from_col(j0);
    const float* c = C ? C + i0 * ldc + j0 : nullptr;
    O* o = out + i0 * ldo + j0;
    const float* bi = bias ? bias + j0 : nullptr;
    if (mr > 2 * MR / 3) micro_kernel<Isa, MR, kTable, kFull>(kc, a, b, c, ldc, o, ldo, mr, nr, alpha, beta, bi);
    else if (mr > MR / 3) micro_kernel<Isa, 2 * MR / 3, kTable, kFull>(kc, a, b, c, ldc, o, ldo, mr, nr, alpha, beta, bi);
    else micro_kernel<Isa, MR / 3, kTable, kFull>(kc, a, b, c, ldc, o, ldo, mr, nr, alpha, beta, bi);
  };
  if (packed && Isa::kAPanelInL1) {  // one A panel stays in L1 while the B panels pass
    for (int64_t i0 = 0; i0 < mc; i0 += MR)
      for (int64_t j0 = 0; j0 < nc; j0 += NR) tile.template operator()<false, true>(i0, j0);
    return;
  }
  const bool table = !packed && B.rows;
  for (int64_t j0 = 0; j0 < nc; j0 += NR) {  // one B panel stays in L1 ...
    const bool full = packed || nc - j0 >= NR;
    for (int64_t i0 = 0; i0 < mc; i0 += MR) {  // ... while the A panels pass
      if (table) {
        if (full) tile.template operator()<true, true>(i0, j0);
        else tile.template operator()<true, false>(i0, j0);
      } else {
        if (full) tile.template operator()<false, true>(i0, j0);
        else tile.template operator()<false, false>(i0, j0);
      }
    }
  }
}

thread_local Buffer tls_a, tls_b, tls_part;  // packed A, packed B, the K split's partial C's

/// The whole loop nest on the calling thread, with its own packing buffers. With a 16-bit
/// `out` (O = E = F16 / BF16) the last slice of K writes the result rounded there, and C
/// (float32, may be null when K fits one slice) holds the sums of the slices before it.
template <class Isa, class E, class O = float>
void sgemm_serial(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const E* A,
                  int64_t lda, const RowsOf<E>& B, float beta, float* C, int64_t ldc, const float* bias,
                  O* out = nullptr, int64_t ldo = 0) {
  constexpr int MR = Isa::MR, NR = Isa::NR;
  constexpr int64_t KC = Isa::KC, MC = Isa::MC, NC = Isa::NC;
  // K in equal slices of at most KC (1000 = 3 x 334 with AVX-512, not 384 + 384 + 232: every
  // slice pays one pass over the C tiles, a short one would pay it for little work).
  const int64_t kslices = (K + KC - 1) / KC, kcmax = (K + kslices - 1) / kslices;
  // A short C (a convolution's 16 or 32 output channels) uses each B panel for a tile or
  // two: packing would copy B for less than it saves, so a row-major B is read in place.
  // (16-bit operands are always packed: the micro-kernel reads float32.)
  const bool direct_b = std::is_same_v<E, float> && !trans_b && M <= 2 * MR;
  float* Bp = direct_b ? nullptr : tls_b.get((std::min(N, NC) + NR - 1) / NR * NR * kcmax);
  float* Ap = tls_a.get((std::min(M, MC) + MR - 1) / MR * MR * kcmax);
  for (int64_t jc = 0; jc < N; jc += NC) {
    const int64_t nc = std::min(NC, N - jc);
    for (int64_t pc = 0; pc < K; pc += kcmax) {
      const int64_t kc = std::min(kcmax, K - pc);
      const RowsOf<E> Bc = trans_b ? B.from_row(jc).from_col(pc) : B.from_row(pc).from_col(jc);
      if (!direct_b) pack_b<Isa>(trans_b, Bc, kc, nc, Bp);
      const float b = pc == 0 ? beta : 1.f;  // later slices add to what the first wrote
      for (int64_t ic = 0; ic < M; ic += MC) {
        const int64_t mc = std::min(MC, M - ic);
        pack_a<Isa>(trans_a, trans_a ? A + pc * lda + ic : A + ic * lda + pc, lda, mc, kc, Ap);
        Rows Bf{Bp, NR};
        if constexpr (std::is_same_v<E, float>)
          if (direct_b) Bf = Bc;
        float* c = C ? C + ic * ldc + jc : nullptr;
        const float* bi = pc == 0 && bias ? bias + jc : nullptr;
        if constexpr (!std::is_same_v<O, float>)
          if (pc + kc >= K) {  // a 16-bit product's last slice: rounded into out
            macro_kernel<Isa>(mc, nc, kc, Ap, Bf, !direct_b, c, ldc, out + ic * ldo + jc, ldo, alpha, b, bi);
            continue;
          }
        macro_kernel<Isa>(mc, nc, kc, Ap, Bf, !direct_b, c, ldc, c, ldc, alpha, b, bi);
      }
    }
  }
}

/// Threads for a split of K instead of C, 0 for none: a deep product with a small C (a
/// weight gradient, C = dY^T X over 2048 tokens), where each thread packs its own share of
/// both operands (a split of C would have every thread pack all of one) into its own
/// partial C, summed in thread order after. Every share is at least 256 deep.
int split_k_threads(int want, int64_t M, int64_t N, int64_t K) {
  if (want > 1 && K >= 2 * std::max(M, N) && K >= 512 * want && M * N <= (int64_t(1) << 18))
    return int(std::min<int64_t>(want, K / 256));
  return 0;
}

/// The K split: thread t of T runs serial(k0, kn, t) over its share [k0, k0 + kn) of K,
/// then finish(i, T) runs for each row i of C, spread over the threads.
template <class Serial, class Finish>
void split_k(int nt, int64_t M, int64_t K, const Serial& serial, const Finish& finish) {
#pragma omp parallel num_threads(nt)
  {
    const int t = omp_get_thread_num(), T = omp_get_num_threads();
    const int64_t per = (K + T - 1) / T, k0 = t * per, kn = std::min(K, k0 + per) - k0;
    serial(k0, kn, t);
#pragma omp barrier
#pragma omp for schedule(static)
    for (int64_t i = 0; i < M; ++i) finish(i, T);
  }
}

/// sgemm_packed over B given by Rows (a stride or a row table).
template <class Isa, class E>
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
  if (const int nt = split_k_threads(want, M, N, K)) {  // thread 0 into C, threads 1.. into part
    float* part = tls_part.get((nt - 1) * M * N);
    split_k(
        nt, M, K,
        [&](int64_t k0, int64_t kn, int t) {
          const E* At = trans_a ? A + k0 * lda : A + k0;
          const RowsOf<E> Bt = trans_b ? B.from_col(k0) : B.from_row(k0);
          if (t == 0) sgemm_serial<Isa>(trans_a, trans_b, M, N, kn, alpha, At, lda, Bt, beta, C, ldc, bias);
          else sgemm_serial<Isa>(trans_a, trans_b, M, N, kn, alpha, At, lda, Bt, 0.f, part + (t - 1) * M * N, N, nullptr);
        },
        [&](int64_t i, int T) {
          float* c = C + i * ldc;
          for (int u = 1; u < T; ++u) {
            const float* p = part + (u - 1) * M * N + i * N;
            for (int64_t j = 0; j < N; ++j) c[j] += p[j];
          }
        });
    return;
  }
  // Otherwise threads take independent blocks of C (split_c, sgemm_pack.h).
  split_c(want, M, N, Isa::NR, [&](int64_t r0, int64_t rows, int64_t c0, int64_t cols) {
    sgemm_serial<Isa>(trans_a, trans_b, rows, cols, K, alpha, trans_a ? A + r0 : A + r0 * lda, lda,
                      trans_b ? B.from_row(c0) : B.from_col(c0), beta, C + r0 * ldc + c0, ldc,
                      bias ? bias + c0 : nullptr);
  });
}

/// sgemm_packed_half for one instruction set and element type E (F16 or BF16): float32 sums
/// rounded to E once, by the micro-kernel as it finishes each tile.
template <class Isa, class E>
void sgemm_half(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda,
                const uint16_t* B, int64_t ldb, uint16_t* C16, int64_t ldc, int threads, const float* bias) {
  if (M <= 0 || N <= 0) return;
  const auto* a = reinterpret_cast<const E*>(A);
  const RowsOf<E> b{reinterpret_cast<const E*>(B), ldb};
  E* C = reinterpret_cast<E*>(C16);
  using Stored = std::conditional_t<std::is_same_v<E, F16>, Half, BFloat16>;  // the same 16 bits
  if (K <= 0) {  // C = bias
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j].bits = Stored(bias ? bias[j] : 0.f).bits;
    return;
  }
  const int want = omp_in_parallel() ? 1 : std::max(1, threads);
  if (const int nt = split_k_threads(want, M, N, K)) {  // float32 partials, summed in order and rounded
    float* part = tls_part.get(nt * M * N);
    split_k(
        nt, M, K,
        [&](int64_t k0, int64_t kn, int t) {
          sgemm_serial<Isa>(trans_a, trans_b, M, N, kn, 1.f, trans_a ? a + k0 * lda : a + k0, lda,
                            trans_b ? b.from_col(k0) : b.from_row(k0), 0.f, part + t * M * N, N,
                            t == 0 ? bias : nullptr);
        },
        [&](int64_t i, int T) {
          float* c = part + i * N;
          for (int u = 1; u < T; ++u) {
            const float* p = part + u * M * N + i * N;
            for (int64_t j = 0; j < N; ++j) c[j] += p[j];
          }
          convert_floats(c, reinterpret_cast<Stored*>(C + i * ldc), N);
        });
    return;
  }
  // Threads take blocks of C as sgemm_packed does; a product deeper than one slice of K
  // keeps the earlier slices' float32 sums in a buffer of the thread's own.
  split_c(want, M, N, Isa::NR, [&](int64_t r0, int64_t rows, int64_t c0, int64_t cols) {
    float* s = K > Isa::KC ? tls_part.get(rows * cols) : nullptr;
    sgemm_serial<Isa>(trans_a, trans_b, rows, cols, K, 1.f, trans_a ? a + r0 : a + r0 * lda, lda,
                      trans_b ? b.from_row(c0) : b.from_col(c0), 0.f, s, cols, bias ? bias + c0 : nullptr,
                      C + r0 * ldc + c0, ldc);
  });
}

/// The kernel that runs: AVX-512 where the build has it, else AVX2; KILN_CPU_SGEMM=avx2
/// (in an AVX-512 build) or scalar16 (the scalar model of AVX-512, for tests) chooses
/// another (read once).
enum class Kernel { avx512, avx2, scalar16 };
Kernel selected_kernel() {
  static const Kernel k = [] {
    const char* var = std::getenv("KILN_CPU_SGEMM");
    const std::string env = var ? var : "";
    if (env == "scalar16") return Kernel::scalar16;
#if defined(KILN_SGEMM_AVX2)
    if (env == "avx2") return Kernel::avx2;
#endif
#if defined(KILN_SGEMM_AVX512)
    if (env == "avx512") return Kernel::avx512;
#endif
    std::string have;  // this build's kernels
#if defined(KILN_SGEMM_AVX512)
    have += "avx512, ";
#endif
#if defined(KILN_SGEMM_AVX2)
    have += "avx2, ";
#endif
    KILN_CHECK(env.empty(), "KILN_CPU_SGEMM: '", env, "' is not a kernel of this build (it has ", have, "scalar16)");
#if defined(KILN_SGEMM_AVX512)
    return Kernel::avx512;
#else
    return Kernel::avx2;
#endif
  }();
  return k;
}

/// Calls f.template operator()<Isa>() for the selected kernel's instruction set.
template <class F>
void with_isa(F&& f) {
  switch (selected_kernel()) {
#if defined(KILN_SGEMM_AVX512)
    case Kernel::avx512: return f.template operator()<Avx512>();
#endif
#if defined(KILN_SGEMM_AVX2)
    case Kernel::avx2: return f.template operator()<Avx2>();
#endif
    case Kernel::scalar16: return f.template operator()<Scalar16>();
    default: break;
  }
  KILN_FAIL("matmul (cpu sgemm): no packed kernel selected");
}

}  // namespace

bool sgemm_packed_available() { return true; }

const char* sgemm_packed_isa() {
  const char* name = "";
  with_isa([&]<class Isa>() { name = Isa::name; });
  return name;
}

void sgemm_packed(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                  int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc, int threads,
                  const float* bias) {
  with_isa([&]<class Isa>() {
    sgemm_rows<Isa>(trans_a, trans_b, M, N, K, alpha, A, lda, Rows{B, ldb}, beta, C, ldc, threads, bias);
  });
}

void sgemm_packed_rows(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                       int64_t lda, const float* B, const int64_t* b_rows, float beta, float* C, int64_t ldc,
                       int threads) {
  with_isa([&]<class Isa>() {
    sgemm_rows<Isa>(trans_a, trans_b, M, N, K, alpha, A, lda, Rows{B, 0, b_rows}, beta, C, ldc, threads, nullptr);
  });
}

void sgemm_packed_half(bool bf16, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const uint16_t* A,
                       int64_t lda, const uint16_t* B, int64_t ldb, uint16_t* C, int64_t ldc, int threads,
                       const float* bias) {
  with_isa([&]<class Isa>() {
    if (bf16) sgemm_half<Isa, BF16>(trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc, threads, bias);
    else sgemm_half<Isa, F16>(trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc, threads, bias);
  });
}

#else  // neither AVX-512 nor AVX2 + FMA + F16C in this build: gemm_cpu stays on Eigen

bool sgemm_packed_available() { return false; }

const char* sgemm_packed_isa() { return "none"; }

void sgemm_packed(bool, bool, int64_t M, int64_t N, int64_t K, float, const float*, int64_t, const float*, int64_t,
                  float, float*, int64_t, int, const float*) {
  KILN_FAIL("matmul (cpu sgemm): the packed float32 GEMM is not compiled into this build (no AVX-512 or AVX2); ",
            "called for M=", M, " N=", N, " K=", K);
}

void sgemm_packed_rows(bool, bool, int64_t M, int64_t N, int64_t K, float, const float*, int64_t, const float*,
                       const int64_t*, float, float*, int64_t, int) {
  KILN_FAIL("conv2d (cpu sgemm): the packed float32 GEMM is not compiled into this build (no AVX-512 or AVX2); ",
            "called for M=", M, " N=", N, " K=", K);
}

void sgemm_packed_half(bool, bool, bool, int64_t M, int64_t N, int64_t K, const uint16_t*, int64_t, const uint16_t*, int64_t,
                      uint16_t*, int64_t, int, const float*) {
  KILN_FAIL("matmul (cpu 16-bit gemm): the packed GEMM is not compiled into this build (no AVX-512 or AVX2); ",
            "called for M=", M, " N=", N, " K=", K);
}

#endif

}  // namespace kiln
