// 16-bit float storage types: Half (IEEE binary16) and BFloat16 (bfloat16).
// Stored as uint16_t bits; converted to/from float with round-to-nearest-even.
// The conversions are plain bit manipulation, usable on host and device alike; on an x86
// CPU with F16C (the build's -march) the binary16 ones use its conversion instructions,
// which give the same bits (tests/core/test_half.cpp) about ten times faster; on the GPU
// they use CUDA's conversion instructions (__float2half_rn and __half2float, RNE as well).
#pragma once
#include <cstdint>
#include <cstring>
#include "kiln/core/macros.h"
#ifdef __CUDACC__
#include <cuda_fp16.h>
#endif
#if defined(__F16C__) && !defined(__CUDA_ARCH__)
#include <immintrin.h>
#define KILN_HAVE_F16C 1
#endif

namespace kiln {

KILN_HD_INLINE uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u; std::memcpy(&u, &f, 4); return u;
#endif
}
KILN_HD_INLINE float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f; std::memcpy(&f, &u, 4); return f;
#endif
}

/// float -> binary16 bits, round to nearest even; overflow gives inf, NaN stays NaN (the
/// portable definition; float_to_half_bits below may use the CPU's instruction instead).
KILN_HD_INLINE uint16_t float_to_half_bits_soft(float f) {
  uint32_t x = float_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) {                     // inf or NaN
    return uint16_t(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0u));
  }
  if (absx >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520 -> inf
  if (absx < 0x38800000u) {                      // result is subnormal or zero (|f| < 2^-14)
    // value in units of 2^-24, rounded to nearest even
    uint32_t exp = absx >> 23;
    if (exp < 102) return uint16_t(sign);        // < 2^-25: rounds to zero
    uint32_t mant = (absx & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - exp;                  // mant * 2^(exp-150) / 2^-24 = mant >> (126-exp)
    uint32_t q = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return uint16_t(sign | q);
  }
  // normal: rebias exponent 127 -> 15, keep 10 mantissa bits with RNE
  uint32_t r = absx - 0x38000000u;               // exponent -= 112
  uint32_t q = r >> 13;
  uint32_t rem = r & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) ++q;
  return uint16_t(sign | q);
}

/// binary16 bits -> float, exact (the portable definition).
KILN_HD_INLINE float half_bits_to_float_soft(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return bits_float(sign);
    // subnormal: mant * 2^-24
    float v = float(mant) * 5.9604644775390625e-08f;
    return sign ? -v : v;
  }
  return bits_float(sign | ((exp + 112) << 23) | (mant << 13));
}

/// float -> binary16 bits: VCVTPS2PH (round to nearest even) where the CPU has F16C, else
/// float_to_half_bits_soft. The same bits for every float, except that a NaN keeps the top
/// of its payload instead of becoming the canonical quiet NaN.
KILN_HD_INLINE uint16_t float_to_half_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __half_as_ushort(__float2half_rn(f));
#elif defined(KILN_HAVE_F16C)
  return uint16_t(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
#else
  return float_to_half_bits_soft(f);
#endif
}
/// binary16 bits -> float: VCVTPH2PS where the CPU has F16C, else the portable definition.
KILN_HD_INLINE float half_bits_to_float(uint16_t h) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(h));
#elif defined(KILN_HAVE_F16C)
  return _cvtsh_ss(h);
#else
  return half_bits_to_float_soft(h);
#endif
}

/// float -> bfloat16 bits, round to nearest even; NaN stays a quiet NaN.
KILN_HD_INLINE uint16_t float_to_bf16_bits(float f) {
  uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);
  uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return uint16_t((x + rounding) >> 16);
}
KILN_HD_INLINE float bf16_bits_to_float(uint16_t b) { return bits_float(uint32_t(b) << 16); }

/// IEEE binary16 value. Arithmetic goes through float.
struct Half {
  uint16_t bits = 0;
  Half() = default;
  KILN_HD_INLINE Half(float f) : bits(float_to_half_bits(f)) {}
  KILN_HD_INLINE operator float() const { return half_bits_to_float(bits); }
  static KILN_HD Half from_bits(uint16_t b) { Half h; h.bits = b; return h; }
};

/// bfloat16 value (8-bit exponent, 7-bit mantissa). Arithmetic goes through float.
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  KILN_HD_INLINE BFloat16(float f) : bits(float_to_bf16_bits(f)) {}
  KILN_HD_INLINE operator float() const { return bf16_bits_to_float(bits); }
  static KILN_HD BFloat16 from_bits(uint16_t b) { BFloat16 h; h.bits = b; return h; }
};

/// Rounds a float to the nearest value representable in the 16-bit type (RNE).
KILN_HD_INLINE float round_to_half(float f) { return half_bits_to_float(float_to_half_bits(f)); }
KILN_HD_INLINE float round_to_bf16(float f) { return bf16_bits_to_float(float_to_bf16_bits(f)); }

}  // namespace kiln
