// The pieces of kiln's packed CPU GEMMs that the float32 kernel (ops/cpu/sgemm.cpp) and the
// bf16 kernel (ops/cpu/sgemm_bf16.cpp) share: growing aligned buffers, the row addressing
// of an operand, the vector operations of each instruction set the float32 kernel is
// written for (Avx512: 16 lanes, Avx2: 8 lanes with FMA and F16C; loads that widen 16-bit
// values and stores that round to them, with core/simd_half.h), and the W x W transpose
// that packs a transposed operand. The transpose moves 32-bit lanes without arithmetic,
// so it packs float32 values and bf16 pairs alike.
#pragma once
#if defined(__AVX512F__)
#define KILN_SGEMM_AVX512 1
#endif
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define KILN_SGEMM_AVX2 1
#endif
#if defined(KILN_SGEMM_AVX512) || defined(KILN_SGEMM_AVX2)
// GCC 12's shuffle intrinsics start from _mm512_undefined_ps(), which -Wmaybe-uninitialized
// reports (GCC bug 105593, fixed in GCC 13).
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <type_traits>
#include <omp.h>
#include "kiln/core/error.h"
#include "kiln/core/half.h"
#include "kiln/core/simd_half.h"

namespace kiln::sgemm_detail {

/// A 64-byte aligned float buffer that only grows (one per thread and role, kept between
/// calls), with 16 floats to spare past what was asked: packing may store a whole vector
/// past its last value (Avx2::store_lanes).
struct Buffer {
  std::unique_ptr<float, decltype(&std::free)> p{nullptr, &std::free};
  int64_t n = 0;
  float* get(int64_t want) {
    if (want > n) {
      int64_t bytes = ((want + 16) * int64_t(sizeof(float)) + 63) / 64 * 64;
      float* q = static_cast<float*>(std::aligned_alloc(64, size_t(bytes)));
      KILN_CHECK(q != nullptr, "matmul (cpu sgemm): could not allocate a ", bytes, "-byte packing buffer");
      p.reset(q);
      n = want;
    }
    return p.get();
  }
};

/// How an operand's stored rows are found: row r starts at base + r * ld, or at
/// base + rows[r] when a row table is given (an im2col without the copy: a convolution's
/// input plane at each tap's offset). E is float, or uint16_t for bf16 bits.
template <class E>
struct RowsOf {
  const E* base;
  int64_t ld;
  const int64_t* rows = nullptr;
  const E* row(int64_t r) const { return rows ? base + rows[r] : base + r * ld; }
  RowsOf from_row(int64_t r) const { return rows ? RowsOf{base, ld, rows + r} : RowsOf{base + r * ld, ld, nullptr}; }
  RowsOf from_col(int64_t c) const { return {base + c, ld, rows}; }
};
using Rows = RowsOf<float>;

/// The stored element types the float32 kernel packs: float32 itself, or float16 / bfloat16
/// (their raw bits in F16 / BF16 below), widened to float32 as a panel is packed, once per
/// panel (F16C's VCVTPH2PS; a bf16 value is the top half of its float32).
struct F16 {
  uint16_t bits;
};
struct BF16 {
  uint16_t bits;
};
inline float to_f32(float v) { return v; }
inline float to_f32(F16 h) { return half_bits_to_float(h.bits); }
inline float to_f32(BF16 h) { return bf16_bits_to_float(h.bits); }

// ---- the bf16 GEMMs' shared pieces (sgemm_bf16.cpp: AVX512_BF16; sgemm_amx.cpp: AMX) ----

/// The pair (lo, hi) of bf16 values as one 32-bit lane (the low half is the even k).
inline uint32_t bf16_pair(uint16_t lo, uint16_t hi) { return uint32_t(lo) | uint32_t(hi) << 16; }

/// One operand value as bf16 bits: bf16 as stored, float32 rounded to nearest even.
inline uint16_t bf16_of(uint16_t v) { return v; }
inline uint16_t bf16_of(float v) { return float_to_bf16_bits(v); }

/// A float32 result stored into C: as it is, or rounded to bf16 bits.
inline void store_c(float* c, float v) { *c = v; }
inline void store_c(uint16_t* c, float v) { *c = float_to_bf16_bits(v); }

/// The checks every bf16 GEMM makes, and the products with nothing to multiply: beta is 0
/// or (float32 C only) 1; K = 0 stores beta * C + bias. True when nothing is left to do.
template <class OutT>
bool bf16_gemm_trivial(const char* op, int64_t M, int64_t N, int64_t K, float beta, OutT* C, int64_t ldc,
                       const float* bias) {
  KILN_CHECK(beta == 0.f || (beta == 1.f && std::is_same_v<OutT, float>), op,
             ": beta must be 0 or (with a float32 C) 1, got ", beta);
  if (M <= 0 || N <= 0) return true;
  if (K > 0) return false;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j)
      store_c(C + i * ldc + j, (beta == 0.f ? 0.f : float(C[i * ldc + j])) + (bias ? bias[j] : 0.f));
  return true;
}
#if defined(KILN_SGEMM_AVX512)
/// Transposes the 16 x 16 block held in r[0..15] (r[i] = row i) in place: afterwards r[j]
/// is column j. Three rounds of shuffles: pairs of floats, then quadruples, then 128-bit lanes.
inline void transpose16(__m512 r[16]) {
  __m512 t[16];
#pragma GCC unroll 8
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);      // lane L: r_i[4L], r_i+1[4L], r_i[4L+1], r_i+1[4L+1]
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);  //         the same for 4L+2, 4L+3
  }
  __m512 u[16];  // u[4g + c], lane L: column 4L + c of rows 4g .. 4g+3
#pragma GCC unroll 4
  for (int g = 0; g < 16; g += 4) {
    u[g] = _mm512_shuffle_ps(t[g], t[g + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[g + 1] = _mm512_shuffle_ps(t[g], t[g + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[g + 2] = _mm512_shuffle_ps(t[g + 1], t[g + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[g + 3] = _mm512_shuffle_ps(t[g + 1], t[g + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {  // column 4L + c gathers lane L of u[c], u[4+c], u[8+c], u[12+c]
    const __m512 x02 = _mm512_shuffle_f32x4(u[c], u[4 + c], _MM_SHUFFLE(2, 0, 2, 0));
    const __m512 y02 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], _MM_SHUFFLE(2, 0, 2, 0));
    const __m512 x13 = _mm512_shuffle_f32x4(u[c], u[4 + c], _MM_SHUFFLE(3, 1, 3, 1));
    const __m512 y13 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], _MM_SHUFFLE(3, 1, 3, 1));
    r[c] = _mm512_shuffle_f32x4(x02, y02, _MM_SHUFFLE(2, 0, 2, 0));
    r[8 + c] = _mm512_shuffle_f32x4(x02, y02, _MM_SHUFFLE(3, 1, 3, 1));
    r[4 + c] = _mm512_shuffle_f32x4(x13, y13, _MM_SHUFFLE(2, 0, 2, 0));
    r[12 + c] = _mm512_shuffle_f32x4(x13, y13, _MM_SHUFFLE(3, 1, 3, 1));
  }
}

/// 16 values from p as float32; `n` < 16 reads only the first n (the others are 0).
inline __m512 load16(const float* p, int n = 16) {
  return _mm512_maskz_loadu_ps(n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1), p);
}
/// The first n < 16 16-bit values at p, the rest 0 (a masked load where AVX512BW/VL are
/// compiled in: a transposed A panel of MR = 12 rows takes this on every k).
template <class E>
inline __m256i load16_bits_partial(const E* p, int n) {
#if defined(__AVX512BW__) && defined(__AVX512VL__)
  return _mm256_maskz_loadu_epi16(__mmask16((1u << n) - 1), p);
#else
  alignas(32) uint16_t t[16] = {};
  for (int i = 0; i < n; ++i) t[i] = p[i].bits;
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(t));
#endif
}
inline __m512 load16(const F16* p, int n = 16) {
  return simd::floats_from_half16(n >= 16 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))
                                          : load16_bits_partial(p, n));
}
inline __m512 load16(const BF16* p, int n = 16) {
  return simd::floats_from_bf16x16(n >= 16 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))
                                           : load16_bits_partial(p, n));
}

/// The float32 kernel's vector operations with AVX-512: 16 lanes, masks in k registers.
struct Avx512 {
  using V = __m512;
  using Mask = __mmask16;
  static constexpr int W = 16;                      // float lanes
  static constexpr int MR = 12, NR = 32;            // C tile in registers: 12 x 2 zmm of the 32
  // A panel 18 KiB (L1), A block 288 KiB and B block 768 KiB (L2). A B panel would be 48
  // KiB, all of a 48 KiB L1, so the A panel is the one kept there (kAPanelInL1).
  static constexpr int64_t KC = 384, MC = 192, NC = 512;
  static constexpr bool kAPanelInL1 = true;
  static constexpr const char* name = "AVX-512";
  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float x) { return _mm512_set1_ps(x); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static Mask mask(int n) { return n >= 16 ? Mask(0xFFFF) : Mask((1u << std::max(n, 0)) - 1); }
  template <class E>
  static V load(const E* p, int n = W) { return load16(p, n); }
  static V load(const float* p, Mask m) { return _mm512_maskz_loadu_ps(m, p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static void store(float* p, V v, Mask m) { _mm512_mask_storeu_ps(p, m, v); }
  static void store(float* p, V v, int n) { store(p, v, mask(n)); }
  /// v rounded to E (F16 / BF16) as Tensor::to rounds, into the first n values at p (n <= 0:
  /// none): a 16-bit GEMM's finished tile.
  template <class E>
  static void store(E* p, V v, int n) {
    const __m256i h = std::is_same_v<E, F16> ? simd::half16_from_floats(v) : simd::bf16x16_from_floats(v);
    if (n >= W) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), h);
    } else if (n > 0) {
#if defined(__AVX512BW__) && defined(__AVX512VL__)
      _mm256_mask_storeu_epi16(p, __mmask16((1u << n) - 1), h);
#else
      alignas(32) uint16_t t[16];
      _mm256_store_si256(reinterpret_cast<__m256i*>(t), h);
      for (int i = 0; i < n; ++i) p[i].bits = t[i];
#endif
    }
  }
  /// a then b (2 W values) rounded to E at p.
  template <class E>
  static void store2(E* p, V a, V b) {
    store(p, a, W);
    store(p + W, b, W);
  }
  /// Packing's store of the lanes in m (see Avx2::store_lanes).
  static void store_lanes(float* p, V v, Mask m) { _mm512_mask_storeu_ps(p, m, v); }
  static void transpose(V r[W]) { transpose16(r); }
};
#endif

#if defined(KILN_SGEMM_AVX2)
/// Transposes the 8 x 8 block held in r[0..7] in place (r[j] becomes column j): pairs, then
/// quadruples within each 128-bit half, then the halves.
inline void transpose8(__m256 r[8]) {
  __m256 t[8], u[8];
#pragma GCC unroll 4
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);      // half h: r_i[4h], r_i+1[4h], r_i[4h+1], r_i+1[4h+1]
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);  //         the same for 4h+2, 4h+3
  }
#pragma GCC unroll 2
  for (int g = 0; g < 8; g += 4) {  // u[g + c], half h: column 4h + c of rows g .. g+3
    u[g] = _mm256_shuffle_ps(t[g], t[g + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[g + 1] = _mm256_shuffle_ps(t[g], t[g + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[g + 2] = _mm256_shuffle_ps(t[g + 1], t[g + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[g + 3] = _mm256_shuffle_ps(t[g + 1], t[g + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {  // column c: the low halves of u[c] and u[4 + c]; column 4 + c: the high
    r[c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x20);
    r[4 + c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x31);
  }
}

/// 8 lanes of -1 then 8 of 0: the 32-byte load at kLaneMask + 8 - n has its first n lanes set.
alignas(64) inline constexpr int32_t kLaneMask[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};

/// 8 16-bit values from p; `n` < 8 reads only the first n (the others are 0).
template <class E>
inline __m128i load8_bits(const E* p, int n) {
  if (n >= 8) return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  alignas(16) uint16_t t[8] = {};
  for (int i = 0; i < n; ++i) t[i] = p[i].bits;
  return _mm_load_si128(reinterpret_cast<const __m128i*>(t));
}

/// The float32 kernel's vector operations with AVX2 + FMA (+ F16C for float16): 8 lanes,
/// masks as lane vectors (VMASKMOVPS). 6 x 16 C tile: 12 of the 16 ymm registers hold C,
/// two the B row, one the broadcast A value (the tile of BLIS's Haswell and Zen kernels).
struct Avx2 {
  using V = __m256;
  using Mask = __m256i;
  static constexpr int W = 8;
  static constexpr int MR = 6, NR = 16;
  static constexpr int64_t KC = 256, MC = 144, NC = 512;  // B panel 16 KiB (L1), A block 144 KiB (L2)
  static constexpr bool kAPanelInL1 = false;
  static constexpr const char* name = "AVX2";
  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float x) { return _mm256_set1_ps(x); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static Mask mask(int n) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kLaneMask + 8 - std::clamp(n, 0, 8)));
  }
  static V load(const float* p, int n = W) { return n >= W ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, mask(n)); }
  static V load(const F16* p, int n = W) { return simd::floats_from_half8(load8_bits(p, n)); }
  static V load(const BF16* p, int n = W) { return simd::floats_from_bf16x8(load8_bits(p, n)); }
  static V load(const float* p, Mask m) { return _mm256_maskload_ps(p, m); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static void store(float* p, V v, Mask m) { _mm256_maskstore_ps(p, m, v); }
  static void store(float* p, V v, int n) {
    if (n >= W) _mm256_storeu_ps(p, v);
    else _mm256_maskstore_ps(p, mask(n), v);
  }
  /// v rounded to E (F16 / BF16) as Tensor::to rounds, into the first n values at p (n <= 0:
  /// none): a 16-bit GEMM's finished tile.
  template <class E>
  static void store(E* p, V v, int n) {
    const __m128i h = std::is_same_v<E, F16> ? simd::half8_from_floats(v) : simd::bf16x8_from_floats(v);
    if (n >= W) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(p), h);
    } else if (n > 0) {
      alignas(16) uint16_t t[8];
      _mm_store_si128(reinterpret_cast<__m128i*>(t), h);
      for (int i = 0; i < n; ++i) p[i].bits = t[i];
    }
  }
  /// a then b (2 W values) rounded to E at p: bf16 with one pack for both.
  template <class E>
  static void store2(E* p, V a, V b) {
    const __m256i h = std::is_same_v<E, F16> ? _mm256_set_m128i(simd::half8_from_floats(b), simd::half8_from_floats(a))
                                             : simd::bf16x16_from_floats(a, b);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), h);
  }
  /// Packing's store of the lanes in m: all W of them, as a masked store (VMASKMOVPS) is
  /// microcoded and slow on AMD's AVX2 CPUs. The lanes past m hold junk (zeros or other
  /// values) that the packing overwrites afterwards: it stores in ascending address order,
  /// fills lanes past a panel's rows with zeros after, and its Buffer has slack.
  static void store_lanes(float* p, V v, Mask) { _mm256_storeu_ps(p, v); }
  static void transpose(V r[W]) { transpose8(r); }
};
#endif

/// The AVX-512 kernel's operations spelled out in plain C++, one lane at a time: what each
/// intrinsic of Avx512 does, with its tile geometry (16 lanes, 12 x 32). Not a fast path: an
/// AVX-512 build runs Avx512, and KILN_CPU_SGEMM=scalar16 runs this one, so that the tests
/// exercise the AVX-512 geometry of the shared kernel code on a CPU without AVX-512.
struct Scalar16 {
  struct V {
    float v[16];
  };
  using Mask = uint32_t;  // bit i: lane i
  static constexpr int W = 16;
  static constexpr int MR = 12, NR = 32;
  static constexpr int64_t KC = 384, MC = 192, NC = 512;
  static constexpr bool kAPanelInL1 = true;
  static constexpr const char* name = "scalar model of AVX-512";
  static V zero() { return V{}; }
  static V set1(float x) {
    V r;
    for (float& e : r.v) e = x;
    return r;
  }
  static V fma(V a, V b, V c) {  // one rounding, as VFMADD
    for (int i = 0; i < W; ++i) c.v[i] = std::fma(a.v[i], b.v[i], c.v[i]);
    return c;
  }
  static Mask mask(int n) { return n >= W ? 0xFFFFu : (1u << std::max(n, 0)) - 1; }
  template <class E>
  static V load(const E* p, int n = W) {  // the first n values, zeros after (a masked load)
    V r{};
    for (int i = 0; i < std::min(n, W); ++i) r.v[i] = to_f32(p[i]);
    return r;
  }
  static V load(const float* p, Mask m) {
    V r{};
    for (int i = 0; i < W; ++i)
      if (m >> i & 1u) r.v[i] = p[i];
    return r;
  }
  static void store(float* p, V v) { std::copy(v.v, v.v + W, p); }
  static void store(float* p, V v, Mask m) {
    for (int i = 0; i < W; ++i)
      if (m >> i & 1u) p[i] = v.v[i];
  }
  static void store(float* p, V v, int n) { store(p, v, mask(n)); }
  template <class E>  // rounded to E (F16 / BF16), the first n values
  static void store(E* p, V v, int n) {
    for (int i = 0; i < std::min(n, W); ++i)
      p[i].bits = std::is_same_v<E, F16> ? float_to_half_bits(v.v[i]) : float_to_bf16_bits(v.v[i]);
  }
  template <class E>
  static void store2(E* p, V a, V b) {
    store(p, a, W);
    store(p + W, b, W);
  }
  static void store_lanes(float* p, V v, Mask m) { store(p, v, m); }
  static void transpose(V r[W]) {
    for (int i = 0; i < W; ++i)
      for (int j = i + 1; j < W; ++j) std::swap(r[i].v[j], r[j].v[i]);
  }
};

/// Writes the transpose of stored rows [0, rows) of src over depth [0, kc) into
/// dst[k * step + i] (i < rows <= W): the packing of a transposed operand, W x W blocks at a
/// time. Lanes past `rows` may receive junk (Isa::store_lanes), up to W - 1 floats past the
/// last value written: the caller zero-fills them after, or packs what lies there later.
template <class Isa, class E>
inline void pack_transposed(const RowsOf<E>& src, int rows, int64_t kc, float* dst, int64_t step) {
  constexpr int W = Isa::W;
  const typename Isa::Mask keep = Isa::mask(rows);
  const E* s[W];
  for (int i = 0; i < W; ++i) s[i] = src.row(std::min(i, rows - 1));
  int64_t k = 0;
  for (; k + W <= kc; k += W) {
    typename Isa::V r[W];
#pragma GCC unroll 16
    for (int i = 0; i < W; ++i) r[i] = i < rows ? Isa::load(s[i] + k) : Isa::zero();
    Isa::transpose(r);
#pragma GCC unroll 16
    for (int kk = 0; kk < W; ++kk) Isa::store_lanes(dst + (k + kk) * step, r[kk], keep);
  }
  for (; k < kc; ++k)
    for (int i = 0; i < rows; ++i) dst[k * step + i] = to_f32(s[i][k]);
}

/// Splits C (M x N) into independent blocks, one per thread (at most `want`): rows in
/// multiples of 4 when C is at least as tall as wide, else columns in whole `nr`-wide
/// panels, and calls block(r0, rows, c0, cols) for each (once, with all of C, when one
/// thread is enough). Each block packs what it needs in its thread's own buffers: no
/// thread waits for another, at the price of packing the shared operand once per thread.
template <class Block>
void split_c(int want, int64_t M, int64_t N, int64_t nr, const Block& block) {
  const bool by_rows = M >= N;
  const int64_t unit = by_rows ? 4 : nr, units = ((by_rows ? M : N) + unit - 1) / unit;
  const int nt = int(std::min<int64_t>(want, units));
  if (nt <= 1) return block(int64_t(0), M, int64_t(0), N);
#pragma omp parallel num_threads(nt)
  {
    const int t = omp_get_thread_num(), T = omp_get_num_threads();
    const int64_t per = (units + T - 1) / T * unit, total = by_rows ? M : N;
    const int64_t lo = std::min(total, t * per), n = std::min(total, lo + per) - lo;
    if (n > 0) {
      if (by_rows) block(lo, n, int64_t(0), N);
      else block(int64_t(0), M, lo, n);
    }
  }
}

}  // namespace kiln::sgemm_detail
#endif
