// The pieces of kiln's packed CPU GEMMs that the float32 kernel (ops/cpu/sgemm.cpp) and the
// bf16 kernel (ops/cpu/sgemm_bf16.cpp) share: growing aligned buffers, the row addressing
// of an operand, and the 16 x 16 transpose that packs a transposed operand. The transpose
// moves 32-bit lanes without arithmetic, so it packs float32 values and bf16 pairs alike.
// AVX-512 only (the files that include it compile it under __AVX512F__).
#pragma once
#if defined(__AVX512F__)
// GCC 12's shuffle intrinsics start from _mm512_undefined_ps(), which -Wmaybe-uninitialized
// reports (GCC bug 105593, fixed in GCC 13).
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <omp.h>
#include "kiln/core/error.h"
#include "kiln/core/half.h"

namespace kiln::sgemm_detail {

/// A 64-byte aligned float buffer that only grows (one per thread and role, kept between calls).
struct Buffer {
  std::unique_ptr<float, decltype(&std::free)> p{nullptr, &std::free};
  int64_t n = 0;
  float* get(int64_t want) {
    if (want > n) {
      int64_t bytes = (want * int64_t(sizeof(float)) + 63) / 64 * 64;
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
  return _mm512_cvtph_ps(n >= 16 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)) : load16_bits_partial(p, n));
}
inline __m512 load16(const BF16* p, int n = 16) {
  const __m256i h = n >= 16 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)) : load16_bits_partial(p, n);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/// Writes the transpose of stored rows [0, rows) of src over depth [0, kc) into
/// dst[k * step + i] (i < rows <= 16; lanes past `rows` are not written): the packing of a
/// transposed operand, 16 x 16 blocks at a time.
template <class E>
inline void pack_transposed(const RowsOf<E>& src, int rows, int64_t kc, float* dst, int64_t step) {
  const __mmask16 keep = __mmask16((1u << rows) - 1);
  const E* s[16];
  for (int i = 0; i < 16; ++i) s[i] = src.row(std::min(i, rows - 1));
  int64_t k = 0;
  for (; k + 16 <= kc; k += 16) {
    __m512 r[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) r[i] = i < rows ? load16(s[i] + k) : _mm512_setzero_ps();
    transpose16(r);
#pragma GCC unroll 16
    for (int kk = 0; kk < 16; ++kk) _mm512_mask_storeu_ps(dst + (k + kk) * step, keep, r[kk]);
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
