// Vector conversions between float32 and the 16-bit floats on x86 CPUs: 16 values per
// instruction sequence with AVX-512, 8 with AVX2 + F16C. Tensor::to's CPU copies
// (core/tensor.cpp) and the packed GEMM's panels and rounded results (ops/cpu/sgemm_pack.h)
// both use these, so a 16-bit GEMM result has exactly the bits of its float32 sum rounded
// by Tensor::to.
//
// float16: VCVTPS2PH (round to nearest even) and VCVTPH2PS. bfloat16: a bf16 value is the top
// half of its float32, so widening is a 16-bit shift; narrowing is float_to_bf16_bits
// (core/half.h) in integer lanes: add 0x7fff plus the lowest kept bit (to nearest even),
// keep the top half, and a NaN becomes its top half with the quiet bit set; with
// AVX512_BF16, VCVTNEPS2BF16 gives the same bits for every vector without a subnormal.
#pragma once
#include <cstdint>
#if defined(__AVX2__) && defined(__F16C__)
#include <immintrin.h>

namespace kiln::simd {

inline __m128i half8_from_floats(__m256 v) { return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
inline __m256 floats_from_half8(__m128i h) { return _mm256_cvtph_ps(h); }

/// v rounded to bf16, each value in the low half of its 32-bit lane.
inline __m256i bf16_round_lanes(__m256 v) {
  const __m256i x = _mm256_castps_si256(v);
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  const __m256i hi = _mm256_srli_epi32(x, 16);
  const __m256i up = _mm256_add_epi32(_mm256_set1_epi32(0x7fff), _mm256_and_si256(hi, _mm256_set1_epi32(1)));
  const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(x, up), 16);
  return _mm256_blendv_epi8(r, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
}
// 32 -> 16 bits (every lane <= 0xFFFF): packus works within 128-bit halves, the permutes
// put the halves' results in order.
inline __m128i bf16x8_from_floats(__m256 v) {
  const __m256i r = bf16_round_lanes(v);
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08));
}
/// a then b rounded to bf16: 16 values, one pack for both.
inline __m256i bf16x16_from_floats(__m256 a, __m256 b) {
  return _mm256_permute4x64_epi64(_mm256_packus_epi32(bf16_round_lanes(a), bf16_round_lanes(b)), 0xD8);
}
inline __m256 floats_from_bf16x8(__m128i h) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

#if defined(__AVX512F__)
inline __m256i half16_from_floats(__m512 v) { return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
inline __m512 floats_from_half16(__m256i h) { return _mm512_cvtph_ps(h); }

inline __m256i bf16x16_from_floats(__m512 v) {
#if defined(__AVX512BF16__) && defined(__AVX512DQ__)
  // VCVTNEPS2BF16 rounds to nearest even and quiets a NaN exactly as the integer lanes
  // below do, in one instruction, but flushes a subnormal input to a signed zero: a vector
  // holding one (fpclass 0x20) takes the integer lanes.
  if (_mm512_fpclass_ps_mask(v, 0x20) == 0) return (__m256i)_mm512_cvtneps_pbh(v);
#endif
  const __m512i x = _mm512_castps_si512(v);
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  const __m512i hi = _mm512_srli_epi32(x, 16);
  const __m512i up = _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(hi, _mm512_set1_epi32(1)));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(x, up), 16);
  r = _mm512_mask_or_epi32(r, nan, hi, _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(r);
}
inline __m512 floats_from_bf16x16(__m256i h) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

#if defined(__AVX512BW__) && defined(__AVX512VL__)
#define KILN_SIMD_BF16_ROWS 1
/// Lanes [0, n) of a vector, n <= 16.
inline __mmask16 lanes16(int64_t n) { return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1); }
/// d[0, n) = s[0, n) rounded to bf16 bits (Tensor::to's), the last n % 16 through masked
/// loads and stores. Inline, so that the short rows of a kernel's inner loop (an attention
/// row of 32 values) cost no call and no set-up per row.
inline void bf16_from_floats(const float* s, uint16_t* d, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = lanes16(n - i);
    _mm256_mask_storeu_epi16(d + i, m, bf16x16_from_floats(_mm512_maskz_loadu_ps(m, s + i)));
  }
}
/// d[0, n) = s[0, n) widened from bf16 bits (exact).
inline void floats_from_bf16(const uint16_t* s, float* d, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = lanes16(n - i);
    _mm512_mask_storeu_ps(d + i, m, floats_from_bf16x16(_mm256_maskz_loadu_epi16(m, s + i)));
  }
}
/// d[i] = lo[i] | hi[i] << 16 for i in [0, n): two rows of 16-bit values interleaved into
/// 32-bit pairs (the layout of VDPBF16PS's operands), tails masked.
inline void interleave_pairs(const uint16_t* lo, const uint16_t* hi, uint32_t* d, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = lanes16(n - i);
    const __m512i a = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, lo + i));
    const __m512i b = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, hi + i));
    _mm512_mask_storeu_epi32(d + i, m, _mm512_or_si512(a, _mm512_slli_epi32(b, 16)));
  }
}
#endif
#endif

}  // namespace kiln::simd
#endif
