// kiln's bf16 GEMM for CPUs with AVX512_BF16: C (float32) = op(A) @ op(B) [+ bias], A and B
// bfloat16, products summed in float32. The loop nest is sgemm.cpp's (GotoBLAS: pack a
// slice of B, pack blocks of A, a 12 x 32 register tile of C); what changes is the unit
// of depth. VDPBF16PS multiplies *pairs* of bf16 values and adds both products to one
// float32 lane:
//
//   c[j] += a[2p] * b[2p][j] + a[2p+1] * b[2p+1][j]        for 16 lanes j at once
//
// so the packed panels hold pairs along K: Ap[p][i] = (A(i, 2p), A(i, 2p+1)) and
// Bp[p][j] = (B(2p, j), B(2p+1, j)), each pair one 32-bit lane (the low half is the even
// k). Per pair the micro-kernel loads two vectors of B pairs, broadcasts 12 A pairs and
// issues 24 VDPBF16PS: twice the multiply-adds of the float32 kernel's 24 FMAs per k, on
// the same units. An operand whose pairs already lie side by side in memory (A = x in
// x W^T, or the transposed W) is packed by moving 32-bit lanes with the float32 kernel's
// transpose; the others interleave two rows of 16-bit values. An odd K gets a zero
// partner for its last value.
//
// Whether it pays depends on the CPU: AMD Zen 4 runs one VDPBF16PS per cycle against one
// 512-bit FMA, twice the float32 rate; on this project's Intel machine (an AVX512_FP16
// Xeon) 24 independent VDPBF16PS chains reach 80 GFLOP/s a core against 170 for FMAs, and
// this kernel 72-75 GFLOP/s against the float32 kernel's 80-98 (docs/benchmarks.md). So
// matmul and linear use it where sgemm_bf16_preferred() (AMD, or KILN_CPU_BF16_GEMM=1);
// Intel's bf16 speed-up is AMX: ops/cpu/sgemm_amx.cpp, behind the same entry points when
// KILN_CPU_BF16_GEMM=amx (see bf16_kernel() at the end of this file).
#include "kiln/ops/cpu/sgemm.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <type_traits>
#include <omp.h>
#include "kiln/core/error.h"
#include "kiln/core/half.h"
#include "kiln/ops/cpu/sgemm_pack.h"
#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace kiln {

#if defined(__AVX512F__) && defined(__x86_64__)

bool sgemm_bf16_available() {
  static const bool ok = [] {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 1, &a, &b, &c, &d)) return false;
    const bool bf16 = a & (1u << 5);  // AVX512_BF16
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    const bool bw_vl = (b & (1u << 30)) && (b & (1u << 31));  // AVX512BW, AVX512VL
    return bf16 && bw_vl;  // this file is compiled with AVX-512 (F) enabled: the OS saves zmm state
  }();
  return ok;
}

namespace {

/// Where VDPBF16PS outruns the float32 FMAs: AMD (Zen 4 and later).
bool avx512_bf16_pays() {
  unsigned a, b, c, d;
  if (!sgemm_bf16_available() || !__get_cpuid(0, &a, &b, &c, &d)) return false;
  return b == 0x68747541 && d == 0x69746E65 && c == 0x444D4163;  // "AuthenticAMD"
}

using namespace sgemm_detail;

#define KILN_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

constexpr int MR = 12;         // rows of the C tile in registers
constexpr int NR = 32;         // columns: two vectors of 16 float32 lanes
constexpr int64_t KP = 256;    // pairs (512 depth) per slice: a B panel is KP x NR x 4 B = 32 KiB (L1)
constexpr int64_t MC = 192;    // rows of a packed A block: MC x KP x 4 B = 192 KiB (L2)
constexpr int64_t NC = 512;    // columns of a packed B block: KP x NC x 4 B = 512 KiB (L2)

/// 16 pairs from two rows of 16-bit values: lane j = (lo[j], hi[j]); `m` masks the lanes
/// read; a null `hi` gives zero partners.
KILN_BF16_TARGET inline __m512i interleave16(const uint16_t* lo, const uint16_t* hi, __mmask16 m) {
  const __m512i l = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, lo));
  const __m512i h = hi ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, hi)) : _mm512_setzero_si512();
  return _mm512_or_si512(l, _mm512_slli_epi32(h, 16));
}

/// The same from two rows of float32 values, rounded to bf16 (nearest even) in one
/// VCVTNE2PS2BF16 (lo's 16 values in the low half, hi's in the high half), then interleaved.
KILN_BF16_TARGET inline __m512i interleave16(const float* lo, const float* hi, __mmask16 m) {
  alignas(64) static constexpr uint16_t kZip[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                    8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512 l = _mm512_maskz_loadu_ps(m, lo);
  const __m512 h = hi ? _mm512_maskz_loadu_ps(m, hi) : _mm512_setzero_ps();
  return _mm512_permutexvar_epi16(_mm512_load_si512(kZip), (__m512i)_mm512_cvtne2ps_pbh(h, l));
}

/// 16 pairs along one row: the 32 values s[0, 32) as bf16, lane q = (s[2q], s[2q+1]).
KILN_BF16_TARGET inline __m512 row_pairs16(const uint16_t* s) { return _mm512_loadu_ps(s); }
KILN_BF16_TARGET inline __m512 row_pairs16(const float* s) {
  return (__m512)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(s + 16), _mm512_loadu_ps(s));
}

/// dst[p * step + i] = (s[i][2p], s[i][2p+1]) for rows i < rows <= 16 and pairs p < kp, where
/// each row's values run along K (so 16 pairs are one 64-byte load of bf16, or two of
/// float32 rounded in one instruction); the last pair of an odd depth `kc` gets a zero
/// partner. Lanes past `rows` are not written.
template <class E>
KILN_BF16_TARGET void pack_pairs_transposed(const E* const* s, int rows, int64_t kc, uint32_t* dst, int64_t step) {
  const __mmask16 keep = __mmask16((1u << rows) - 1);
  const int64_t full = kc / 2;  // whole pairs
  int64_t p = 0;
  for (; p + 16 <= full; p += 16) {
    __m512 r[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) r[i] = i < rows ? row_pairs16(s[i] + 2 * p) : _mm512_setzero_ps();
    transpose16(r);
#pragma GCC unroll 16
    for (int q = 0; q < 16; ++q) _mm512_mask_storeu_ps(dst + (p + q) * step, keep, r[q]);
  }
  for (; p < full; ++p)
    for (int i = 0; i < rows; ++i) dst[p * step + i] = bf16_pair(bf16_of(s[i][2 * p]), bf16_of(s[i][2 * p + 1]));
  if (kc % 2)
    for (int i = 0; i < rows; ++i) dst[full * step + i] = bf16_pair(bf16_of(s[i][kc - 1]), 0);
}

/// Packs op(A) rows [0, mc) x depth [0, kc) (A at the block's corner) into MR-row panels
/// of pairs: Ap[panel][p][i] = (op(A)(i, 2p), op(A)(i, 2p+1)), zero rows past mc.
template <class E>
KILN_BF16_TARGET void pack_a(bool trans_a, const E* A, int64_t lda, int64_t mc, int64_t kc, uint32_t* Ap) {
  const int64_t kp = (kc + 1) / 2;
  for (int64_t i0 = 0; i0 < mc; i0 += MR, Ap += MR * kp) {
    const int mr = int(std::min<int64_t>(MR, mc - i0));
    if (trans_a) {  // A stored (K, M): a pair is two stored rows' values at one column
      const __mmask16 m = __mmask16((1u << mr) - 1);
      for (int64_t p = 0; p < kp; ++p) {
        const E* lo = A + 2 * p * lda + i0;
        const E* hi = 2 * p + 1 < kc ? lo + lda : nullptr;
        _mm512_mask_storeu_epi32(Ap + p * MR, 0x0FFF, interleave16(lo, hi, m));
      }
    } else {  // A stored (M, K): a row's pairs are adjacent, so transpose 32-bit lanes
      const E* s[16];
      for (int i = 0; i < 16; ++i) s[i] = A + (i0 + std::min(i, mr - 1)) * lda;
      pack_pairs_transposed(s, mr, kc, Ap, MR);
      for (int64_t p = 0; p < kp; ++p)
        for (int i = mr; i < MR; ++i) Ap[p * MR + i] = 0;
    }
  }
}

/// Packs op(B) depth [0, kc) x columns [0, nc) (B's stored rows found through `B`, at the
/// block's corner) into NR-column panels of pairs: Bp[panel][p][j] = (op(B)(2p, j),
/// op(B)(2p+1, j)), zero past nc.
template <class E>
KILN_BF16_TARGET void pack_b(bool trans_b, const RowsOf<E>& B, int64_t kc, int64_t nc, uint32_t* Bp) {
  const int64_t kp = (kc + 1) / 2;
  for (int64_t j0 = 0; j0 < nc; j0 += NR) {
    const int nr = int(std::min<int64_t>(NR, nc - j0));
    uint32_t* d = Bp + j0 * kp;
    if (!trans_b) {  // B stored (K, N): interleave stored rows 2p and 2p+1
      const __mmask16 m0 = nr >= 16 ? 0xFFFF : __mmask16((1u << nr) - 1);
      const __mmask16 m1 = nr >= 32 ? 0xFFFF : nr > 16 ? __mmask16((1u << (nr - 16)) - 1) : 0;
      for (int64_t p = 0; p < kp; ++p) {
        const E* lo = B.row(2 * p) + j0;
        const E* hi = 2 * p + 1 < kc ? B.row(2 * p + 1) + j0 : nullptr;
        _mm512_store_si512(d + p * NR, interleave16(lo, hi, m0));
        _mm512_store_si512(d + p * NR + 16, interleave16(lo + 16, hi ? hi + 16 : nullptr, m1));
      }
    } else {  // B stored (N, K): a column's pairs are adjacent, transpose 16 columns at a time
      for (int h = 0; h < NR; h += 16) {
        const int rows = std::clamp(nr - h, 0, 16);
        if (rows > 0) {
          const E* s[16];
          for (int i = 0; i < 16; ++i) s[i] = B.row(j0 + h + std::min(i, rows - 1));
          pack_pairs_transposed(s, rows, kc, d + h, NR);
        }
        if (rows < 16)
          for (int64_t p = 0; p < kp; ++p)
            for (int j = h + rows; j < h + 16; ++j) d[p * NR + j] = 0;
      }
    }
  }
}

/// Stores 16 float32 lanes (those in m) at c: as they are, or rounded to bf16 bits.
KILN_BF16_TARGET inline void store16(float* c, __mmask16 m, __m512 v) { _mm512_mask_storeu_ps(c, m, v); }
KILN_BF16_TARGET inline void store16(uint16_t* c, __mmask16 m, __m512 v) {
  _mm256_mask_storeu_epi16(c, m, (__m256i)_mm512_cvtneps_pbh(v));
}

/// Where the micro-kernel finds A's pairs: a packed panel `a` (pair p of row i at a[p MR + i]),
/// or, with `a` null, A itself read in place: a bf16 A stored (M, K) already holds each
/// row's pairs side by side, each of the tile's rows its own stream (rows past mr re-read the
/// last one), row i from the 16-bit element e + i stride, or e + rows[i] where a row table
/// is given (any 2-byte offsets: sgemm_bf16_a_rows); `half_last`: the last pair's high half
/// lies past the row (odd K) and is read as zero.
struct APanel {
  const uint32_t* a = nullptr;
  const uint16_t* e = nullptr;
  int64_t stride = 0;
  const int64_t* rows = nullptr;
  bool half_last = false;
};

/// Where it finds B's pairs: a packed panel (pair row p at b + p NR), or, with `off` set,
/// pair row p at b + off[p] (sgemm_bf16_pair_rows: rows of pairs that lie in memory as they
/// are, 32-bit lanes, read with masks past nr).
struct BPanel {
  const uint32_t* b;
  const int64_t* off = nullptr;  // null: packed
};

/// One pair of depth through the tile's accumulators: B's two vectors of pairs (packed, or
/// pair row p at b_off[p]) times each row's A pair, broadcast; kHalf: A's high halves lie
/// past its rows and are read as zero. Advances the panel pointers.
template <int ROWS, bool kDirectA, bool kRowsB, bool kHalf>
KILN_BF16_TARGET __attribute__((always_inline)) inline void pair_step(
    int64_t p, const uint32_t*& ap, const uint16_t*& ae, const uint32_t*& bp, const int64_t* off,
    const int64_t* b_off, __mmask16 m0, __mmask16 m1, __m512* c0, __m512* c1) {
  __m512bh b0, b1;
  if constexpr (kRowsB) {
    const uint32_t* r = bp + b_off[p];
    b0 = (__m512bh)_mm512_maskz_loadu_epi32(m0, r);
    b1 = (__m512bh)_mm512_maskz_loadu_epi32(m1, r + 16);
  } else {
    b0 = (__m512bh)_mm512_load_si512(bp);
    b1 = (__m512bh)_mm512_load_si512(bp + 16);
    bp += NR;
  }
#pragma GCC unroll 12
  for (int i = 0; i < ROWS; ++i) {
    uint32_t pair = 0;
    if constexpr (kDirectA) std::memcpy(&pair, ae + off[i], kHalf ? sizeof(uint16_t) : sizeof pair);  // any alignment
    else pair = ap[i];
    const __m512bh a = (__m512bh)_mm512_set1_epi32(int(pair));
    c0[i] = _mm512_dpbf16_ps(c0[i], a, b0);
    c1[i] = _mm512_dpbf16_ps(c1[i], a, b1);
  }
  if constexpr (kDirectA) ae += 2;
  else ap += MR;
}

/// C tile (mr x nr) = A panel @ B panel (kp pairs) + beta * C (+ bias on every row); beta
/// is 0 (C not read) or 1 (float32 C only). The 2 x ROWS float32 accumulators stay in
/// registers; a bf16 C gets them rounded once. kDirectA / kRowsB: A is read in place (A.a
/// null), B.off is set.
template <int ROWS, class OutT, bool kDirectA, bool kRowsB>
KILN_BF16_TARGET void micro_kernel(int64_t kp, APanel A, BPanel B, OutT* C, int64_t ldc, int mr, int nr, bool add_c,
                                   const float* bias) {
  const __mmask16 m0 = nr >= 16 ? 0xFFFF : __mmask16((1u << nr) - 1);
  const __mmask16 m1 = nr >= 32 ? 0xFFFF : nr > 16 ? __mmask16((1u << (nr - 16)) - 1) : 0;
  __m512 c0[ROWS], c1[ROWS];
#pragma GCC unroll 12
  for (int i = 0; i < ROWS; ++i) {
    c0[i] = c1[i] = _mm512_setzero_ps();
    if (i < mr) {
      _mm_prefetch(reinterpret_cast<const char*>(C + i * ldc), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(C + i * ldc + 16), _MM_HINT_T0);
    }
  }
  int64_t off[ROWS];  // direct A: each row's start from A.e, in 16-bit elements
  if constexpr (kDirectA) {
#pragma GCC unroll 12
    for (int i = 0; i < ROWS; ++i) off[i] = A.rows ? A.rows[std::min(i, mr - 1)] : std::min(i, mr - 1) * A.stride;
  }
  const uint32_t* ap = A.a;  // packed A
  const uint16_t* ae = A.e;  // direct A
  const uint32_t* bp = B.b;
  const int64_t kfull = kDirectA && A.half_last ? kp - 1 : kp;  // pairs read whole
  for (int64_t p = 0; p < kfull; ++p)
    pair_step<ROWS, kDirectA, kRowsB, false>(p, ap, ae, bp, off, B.off, m0, m1, c0, c1);
  if (kfull < kp) pair_step<ROWS, kDirectA, kRowsB, true>(kfull, ap, ae, bp, off, B.off, m0, m1, c0, c1);
  const __m512 bias0 = bias ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps();
  const __m512 bias1 = bias ? _mm512_maskz_loadu_ps(m1, bias + 16) : _mm512_setzero_ps();
#pragma GCC unroll 12
  for (int i = 0; i < ROWS; ++i) {
    if (i >= mr) break;
    OutT* c = C + i * ldc;
    __m512 r0 = _mm512_add_ps(c0[i], bias0), r1 = _mm512_add_ps(c1[i], bias1);
    if constexpr (std::is_same_v<OutT, float>)
      if (add_c) {
        r0 = _mm512_add_ps(r0, _mm512_maskz_loadu_ps(m0, c));
        r1 = _mm512_add_ps(r1, _mm512_maskz_loadu_ps(m1, c + 16));
      }
    store16(c, m0, r0);
    store16(c + 16, m1, r1);
  }
}

/// One tile through the micro-kernel for its row count (12, 8 or 4) and operand sources.
template <bool kDirectA, bool kRowsB, class OutT>
KILN_BF16_TARGET void tile(int64_t kp, APanel a, BPanel b, OutT* c, int64_t ldc, int mr, int nr, bool add_c,
                           const float* bias) {
  if (mr > 8) micro_kernel<MR, OutT, kDirectA, kRowsB>(kp, a, b, c, ldc, mr, nr, add_c, bias);
  else if (mr > 4) micro_kernel<8, OutT, kDirectA, kRowsB>(kp, a, b, c, ldc, mr, nr, add_c, bias);
  else micro_kernel<4, OutT, kDirectA, kRowsB>(kp, a, b, c, ldc, mr, nr, add_c, bias);
}

template <class OutT>
KILN_BF16_TARGET void macro_kernel(int64_t mc, int64_t nc, int64_t kp, APanel Ap, const uint32_t* Bp,
                                   OutT* C, int64_t ldc, bool add_c, const float* bias) {
  for (int64_t j0 = 0; j0 < nc; j0 += NR)  // one B panel stays in L1 while the A panels pass
    for (int64_t i0 = 0; i0 < mc; i0 += MR) {
      const int mr = int(std::min<int64_t>(MR, mc - i0)), nr = int(std::min<int64_t>(NR, nc - j0));
      const BPanel b{Bp + j0 * kp};
      OutT* c = C + i0 * ldc + j0;
      const float* bi = bias ? bias + j0 : nullptr;
      if (Ap.a) tile<false, false>(kp, APanel{Ap.a + i0 * kp}, b, c, ldc, mr, nr, add_c, bi);
      else tile<true, false>(kp, APanel{nullptr, Ap.e + i0 * Ap.stride, Ap.stride}, b, c, ldc, mr, nr, add_c, bi);
    }
}

/// c[0, n) = the sum of the T partial rows p + u * stride (in order u = 0, 1, ...) + bias
/// (+ c where beta is 1: float32 c only), 16 columns at a time; a bf16 c gets Tensor::to's bits.
template <class OutT>
KILN_BF16_TARGET void sum_partials(const float* p, int64_t stride, int T, int64_t n, const float* bias, float beta,
                                   OutT* c) {
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 m = n - j >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - j)) - 1);
    __m512 v = _mm512_maskz_loadu_ps(m, p + j);
    for (int u = 1; u < T; ++u) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, p + u * stride + j));
    if (bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, bias + j));
    if constexpr (std::is_same_v<OutT, float>) {
      if (beta != 0.f) v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, c + j), v);
      _mm512_mask_storeu_ps(c + j, m, v);
    } else {
      _mm256_mask_storeu_epi16(c + j, m, simd::bf16x16_from_floats(v));
    }
  }
}

thread_local Buffer tls_a, tls_b, tls_c;  // packed A and B pairs (a float buffer holds 32-bit lanes); float32 C
thread_local Buffer tls_split;  // the K split's partial C's (taken by the calling thread, outside the parallel region)

/// The whole loop nest on the calling thread. A (element EA) and B (EB, through its rows)
/// are bf16 bits or float32 rounded as they are packed; C is float32, or bf16 (OutT
/// uint16_t, beta 0), rounded as each tile is stored when K fits one slice, else summed in
/// a float32 buffer first.
template <class EA, class EB, class OutT>
KILN_BF16_TARGET void gemm_serial(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const EA* A,
                                  int64_t lda, const RowsOf<EB>& B, float beta, OutT* C, int64_t ldc,
                                  const float* bias) {
  // K in equal even slices of at most 2 KP (the last may be odd)
  const int64_t kslices = (K + 2 * KP - 1) / (2 * KP);
  if constexpr (std::is_same_v<OutT, uint16_t>) {
    if (kslices > 1) {
      float* s = tls_c.get(M * N);
      gemm_serial<EA, EB, float>(trans_a, trans_b, M, N, K, A, lda, B, 0.f, s, N, bias);
      for (int64_t i = 0; i < M; ++i) sum_partials(s + i * N, 0, 1, N, nullptr, 0.f, C + i * ldc);
      return;
    }
  }
  const int64_t kcmax = ((K + kslices - 1) / kslices + 1) / 2 * 2, kpmax = kcmax / 2;
  auto* Bp = reinterpret_cast<uint32_t*>(tls_b.get((std::min(N, NC) + NR - 1) / NR * NR * kpmax));
  // bf16 A stored (M, K) with K and the row stride even is read in place (APanel)
  bool direct_a = false;
  if constexpr (std::is_same_v<EA, uint16_t>) direct_a = !trans_a && K % 2 == 0 && lda % 2 == 0;
  auto* Ap = direct_a ? nullptr : reinterpret_cast<uint32_t*>(tls_a.get((std::min(M, MC) + MR - 1) / MR * MR * kpmax));
  for (int64_t jc = 0; jc < N; jc += NC) {
    const int64_t nc = std::min(NC, N - jc);
    for (int64_t pc = 0; pc < K; pc += kcmax) {
      const int64_t kc = std::min(kcmax, K - pc), kp = (kc + 1) / 2;
      pack_b(trans_b, trans_b ? B.from_row(jc).from_col(pc) : B.from_row(pc).from_col(jc), kc, nc, Bp);
      const bool add_c = pc > 0 || beta != 0.f;  // later slices add to what the first wrote
      for (int64_t ic = 0; ic < M; ic += MC) {
        const int64_t mc = std::min(MC, M - ic);
        APanel a{Ap};
        if (direct_a)
          a = APanel{nullptr, reinterpret_cast<const uint16_t*>(A + ic * lda + pc), lda};
        else
          pack_a(trans_a, trans_a ? A + pc * lda + ic : A + ic * lda + pc, lda, mc, kc, Ap);
        macro_kernel(mc, nc, kp, a, Bp, C + ic * ldc + jc, ldc, add_c, pc == 0 && bias ? bias + jc : nullptr);
      }
    }
  }
}

/// The checks and the threading of every entry point: threads take independent blocks of
/// C (split_c, sgemm_pack.h), as sgemm_packed does.
template <class EA, class EB, class OutT>
void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const EA* A, int64_t lda,
               const RowsOf<EB>& B, float beta, OutT* C, int64_t ldc, int threads, const float* bias) {
  KILN_CHECK(sgemm_bf16_available(), "matmul (cpu bf16 gemm): this CPU has no AVX512_BF16 (called for M=", M,
             " N=", N, " K=", K, ")");
  if (bf16_gemm_trivial("matmul (cpu bf16 gemm)", M, N, K, beta, C, ldc, bias)) return;
  const int want = omp_in_parallel() ? 1 : std::max(1, threads);
  // A deep product with a small C (a weight gradient: dW = dY^T X over 2048 tokens) splits K
  // as sgemm_packed does: each thread packs its own share of both operands into a float32
  // partial C, summed in thread order after (a split of C would have every thread pack
  // all of one operand).
  if (want > 1 && K >= 2 * std::max(M, N) && K >= 512 * want && M * N <= (int64_t(1) << 18)) {
    const int nt = int(std::min<int64_t>(want, K / 256));
    float* part = tls_split.get(nt * M * N);
#pragma omp parallel num_threads(nt)
    {
      const int t = omp_get_thread_num(), T = omp_get_num_threads();
      const int64_t per = (K + T - 1) / T / 2 * 2, k0 = std::min(K, t * per), kn = t == T - 1 ? K - k0 : per;
      if (kn > 0)
        gemm_serial<EA, EB, float>(trans_a, trans_b, M, N, kn, trans_a ? A + k0 * lda : A + k0, lda,
                                   trans_b ? B.from_col(k0) : B.from_row(k0), 0.f, part + t * M * N, N, nullptr);
      else
        std::fill_n(part + t * M * N, M * N, 0.f);
#pragma omp barrier
#pragma omp for schedule(static)
      for (int64_t i = 0; i < M; ++i)
        sum_partials(part + i * N, M * N, T, N, bias, beta, C + i * ldc);
    }
    return;
  }
  split_c(want, M, N, NR, [&](int64_t r0, int64_t rows, int64_t c0, int64_t cols) {
    gemm_serial<EA, EB, OutT>(trans_a, trans_b, rows, cols, K, trans_a ? A + r0 : A + r0 * lda, lda,
                              trans_b ? B.from_row(c0) : B.from_col(c0), beta, C + r0 * ldc + c0, ldc,
                              bias ? bias + c0 : nullptr);
  });
}

/// The loop of the two unpacked entries below: depth in equal slices of at most 160 pairs
/// (a 32-column strip of B's pairs is then 20 KiB and stays in L1 while the row tiles of A
/// pass), each slice's tiles through tile<true, kRowsB>; a(i0, p0, n) and b(j0, p0) give a
/// tile's operands, slices after the first (or all, with add_c) add to C.
template <bool kRowsB, class AOf, class BOf>
KILN_BF16_TARGET void unpacked_gemm(int64_t M, int64_t N, int64_t Kp, const AOf& a, const BOf& b, float* C,
                                    int64_t ldc, bool add_c) {
  const int64_t slices = (Kp + 159) / 160, ks = (Kp + slices - 1) / slices;
  for (int64_t p0 = 0; p0 < Kp; p0 += ks) {
    const int64_t n = std::min(ks, Kp - p0);
    for (int64_t j0 = 0; j0 < N; j0 += NR)
      for (int64_t i0 = 0; i0 < M; i0 += MR) {
        const int mr = int(std::min<int64_t>(MR, M - i0)), nr = int(std::min<int64_t>(NR, N - j0));
        tile<true, kRowsB>(n, a(i0, p0, n), b(j0, p0), C + i0 * ldc + j0, ldc, mr, nr, add_c || p0 > 0,
                           static_cast<const float*>(nullptr));
      }
  }
}

/// sgemm_bf16_pair_rows on this kernel: neither operand packed.
KILN_BF16_TARGET void pair_rows_gemm(int64_t M, int64_t N, int64_t Kp, const uint32_t* A, int64_t lda,
                                     const uint32_t* B, const int64_t* b_off, float* C, int64_t ldc) {
  unpacked_gemm<true>(
      M, N, Kp, [&](int64_t i0, int64_t p0, int64_t) {
        return APanel{nullptr, reinterpret_cast<const uint16_t*>(A + i0 * lda + p0), 2 * lda};
      },
      [&](int64_t j0, int64_t p0) { return BPanel{B + j0, b_off + p0}; }, C, ldc, false);
}

/// sgemm_bf16_a_rows on this kernel: B packed once (all of it: a weight gradient's few
/// output channels), A never.
KILN_BF16_TARGET void a_rows_gemm(int64_t M, int64_t N, int64_t K, const uint16_t* A, const int64_t* a_off,
                                  const float* Bt, int64_t ldb, float beta, float* C, int64_t ldc) {
  const int64_t kp = (K + 1) / 2;
  auto* Bp = reinterpret_cast<uint32_t*>(tls_b.get((N + NR - 1) / NR * NR * kp));
  pack_b(true, RowsOf<float>{Bt, ldb}, K, N, Bp);
  unpacked_gemm<false>(
      M, N, kp,
      [&](int64_t i0, int64_t p0, int64_t n) {  // an odd K's last pair is read half
        return APanel{nullptr, A + 2 * p0, 0, a_off + i0, K % 2 == 1 && p0 + n == kp};
      },
      [&](int64_t j0, int64_t p0) { return BPanel{Bp + j0 * kp + p0 * NR}; }, C, ldc, beta != 0.f);
}

void avx512_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda,
                const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc, int threads, const float* bias) {
  gemm_bf16(trans_a, trans_b, M, N, K, A, lda, RowsOf<uint16_t>{B, ldb}, beta, C, ldc, threads, bias);
}

void avx512_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda,
                const uint16_t* B, int64_t ldb, uint16_t* C, int64_t ldc, int threads, const float* bias) {
  gemm_bf16(trans_a, trans_b, M, N, K, A, lda, RowsOf<uint16_t>{B, ldb}, 0.f, C, ldc, threads, bias);
}

void avx512_gemm_rounding(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                         const float* B, int64_t ldb, const int64_t* b_rows, float beta, float* C, int64_t ldc,
                         int threads) {
  gemm_bf16(trans_a, trans_b, M, N, K, A, lda, RowsOf<float>{B, ldb, b_rows}, beta, C, ldc, threads, nullptr);
}

void avx512_gemm_rounding(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                         const uint16_t* B, int64_t ldb, const int64_t* b_rows, float beta, float* C, int64_t ldc,
                         int threads) {
  gemm_bf16(trans_a, trans_b, M, N, K, A, lda, RowsOf<uint16_t>{B, ldb, b_rows}, beta, C, ldc, threads, nullptr);
}
}  // namespace

#else  // no AVX-512 in this build

bool sgemm_bf16_available() { return false; }

namespace {
bool avx512_bf16_pays() { return false; }
[[noreturn]] void no_kernel(int64_t M, int64_t N, int64_t K) {
  KILN_FAIL("matmul (cpu bf16 gemm): the AVX512_BF16 GEMM is not compiled into this build (no AVX-512); called for M=",
            M, " N=", N, " K=", K);
}
void avx512_gemm(bool, bool, int64_t M, int64_t N, int64_t K, const uint16_t*, int64_t, const uint16_t*, int64_t,
                 float, float*, int64_t, int, const float*) {
  no_kernel(M, N, K);
}
void avx512_gemm(bool, bool, int64_t M, int64_t N, int64_t K, const uint16_t*, int64_t, const uint16_t*, int64_t,
                 uint16_t*, int64_t, int, const float*) {
  no_kernel(M, N, K);
}
void avx512_gemm_rounding(bool, bool, int64_t M, int64_t N, int64_t K, const float*, int64_t, const float*, int64_t,
                          const int64_t*, float, float*, int64_t, int) {
  no_kernel(M, N, K);
}
void avx512_gemm_rounding(bool, bool, int64_t M, int64_t N, int64_t K, const float*, int64_t, const uint16_t*,
                          int64_t, const int64_t*, float, float*, int64_t, int) {
  no_kernel(M, N, K);
}
void pair_rows_gemm(int64_t M, int64_t N, int64_t Kp, const uint32_t*, int64_t, const uint32_t*, const int64_t*, float*,
                    int64_t) {
  no_kernel(M, N, 2 * Kp);
}
void a_rows_gemm(int64_t M, int64_t N, int64_t K, const uint16_t*, const int64_t*, const float*, int64_t, float, float*,
                 int64_t) {
  no_kernel(M, N, K);
}
}  // namespace

#endif

// ---- which kernel serves sgemm_bf16 ----

namespace {

enum class Bf16Kernel { none, avx512_bf16, amx, amx_model };

/// KILN_CPU_BF16_GEMM, read once: 0 (bf16 matmul widens to float32), 1 (the AVX512_BF16
/// kernel where the CPU has it), amx (the AMX kernel; an error without AMX), amx_model (the
/// AMX loop nest on the C++ model of the tiles: tests, any CPU). Unset: the AVX512_BF16
/// kernel where it pays (AMD), else none. AMX is not the default anywhere until it has been
/// measured on a CPU that has it.
Bf16Kernel bf16_kernel() {
  static const Bf16Kernel k = [] {
    const char* var = std::getenv("KILN_CPU_BF16_GEMM");
    const std::string env = var ? var : "";
    if (env.empty()) return avx512_bf16_pays() ? Bf16Kernel::avx512_bf16 : Bf16Kernel::none;
    if (env == "0") return Bf16Kernel::none;
    if (env == "1") return sgemm_bf16_available() ? Bf16Kernel::avx512_bf16 : Bf16Kernel::none;
#if defined(KILN_SGEMM_AVX512) || defined(KILN_SGEMM_AVX2)
    if (env == "amx_model") return Bf16Kernel::amx_model;
    if (env == "amx") {
      KILN_CHECK(sgemm_amx_available(), "KILN_CPU_BF16_GEMM=amx: this CPU has no AMX-BF16, or Linux did not grant "
                                        "the tile state");
      return Bf16Kernel::amx;
    }
#endif
    KILN_FAIL("KILN_CPU_BF16_GEMM: '", env, "' is not one of 0, 1, amx, amx_model (amx needs a build with the packed "
              "kernels: AVX2 or AVX-512)");
  }();
  return k;
}

/// When KILN_CPU_BF16_GEMM chose AMX: whether it is the model (sgemm_amx's first argument).
std::optional<bool> amx_choice() {
  const Bf16Kernel k = bf16_kernel();
  if (k != Bf16Kernel::amx && k != Bf16Kernel::amx_model) return std::nullopt;
  return k == Bf16Kernel::amx_model;
}

}  // namespace

bool sgemm_bf16_preferred() { return bf16_kernel() != Bf16Kernel::none; }

const char* sgemm_bf16_kernel() {
  switch (bf16_kernel()) {
    case Bf16Kernel::amx: return "amx";
    case Bf16Kernel::amx_model: return "amx_model";
    default: return sgemm_bf16_available() ? "avx512_bf16" : nullptr;
  }
}

void sgemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda,
                const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc, int threads, const float* bias) {
  if (const auto model = amx_choice())
    return sgemm_amx(*model, trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc, threads, bias);
  avx512_gemm(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc, threads, bias);
}

void sgemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda,
                const uint16_t* B, int64_t ldb, uint16_t* C, int64_t ldc, int threads, const float* bias) {
  if (const auto model = amx_choice())
    return sgemm_amx(*model, trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc, threads, bias);
  avx512_gemm(trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc, threads, bias);
}

void sgemm_bf16_rounding(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                         const float* B, int64_t ldb, const int64_t* b_rows, float beta, float* C, int64_t ldc,
                         int threads) {
  if (const auto model = amx_choice())
    return sgemm_amx_rounding(*model, trans_a, trans_b, M, N, K, A, lda, B, ldb, b_rows, beta, C, ldc, threads);
  avx512_gemm_rounding(trans_a, trans_b, M, N, K, A, lda, B, ldb, b_rows, beta, C, ldc, threads);
}

void sgemm_bf16_rounding(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                         const uint16_t* B, int64_t ldb, const int64_t* b_rows, float beta, float* C, int64_t ldc,
                         int threads) {
  if (const auto model = amx_choice())
    return sgemm_amx_rounding(*model, trans_a, trans_b, M, N, K, A, lda, B, ldb, b_rows, beta, C, ldc, threads);
  avx512_gemm_rounding(trans_a, trans_b, M, N, K, A, lda, B, ldb, b_rows, beta, C, ldc, threads);
}

bool sgemm_bf16_pair_rows_available() { return bf16_kernel() == Bf16Kernel::avx512_bf16; }

void sgemm_bf16_pair_rows(int64_t M, int64_t N, int64_t Kp, const uint32_t* A, int64_t lda, const uint32_t* B,
                          const int64_t* b_off, float* C, int64_t ldc) {
  KILN_CHECK(sgemm_bf16_pair_rows_available(), "sgemm_bf16_pair_rows: needs the AVX512_BF16 kernel (this CPU or ",
             "KILN_CPU_BF16_GEMM chose another; called for M=", M, " N=", N, " pairs=", Kp, ")");
  if (M <= 0 || N <= 0) return;
  if (Kp <= 0) {
    for (int64_t i = 0; i < M; ++i) std::fill_n(C + i * ldc, N, 0.f);
    return;
  }
  pair_rows_gemm(M, N, Kp, A, lda, B, b_off, C, ldc);
}

void sgemm_bf16_a_rows(int64_t M, int64_t N, int64_t K, const uint16_t* A, const int64_t* a_off, const float* Bt,
                       int64_t ldb, float beta, float* C, int64_t ldc) {
  KILN_CHECK(sgemm_bf16_pair_rows_available(), "sgemm_bf16_a_rows: needs the AVX512_BF16 kernel (this CPU or ",
             "KILN_CPU_BF16_GEMM chose another; called for M=", M, " N=", N, " K=", K, ")");
  KILN_CHECK(beta == 0.f || beta == 1.f, "sgemm_bf16_a_rows: beta must be 0 or 1, got ", beta);
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    if (beta == 0.f)
      for (int64_t i = 0; i < M; ++i) std::fill_n(C + i * ldc, N, 0.f);
    return;
  }
  a_rows_gemm(M, N, K, A, a_off, Bt, ldb, beta, C, ldc);
}

}  // namespace kiln
