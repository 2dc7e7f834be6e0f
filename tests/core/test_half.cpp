// The 16-bit float conversions of core/half.h: the ones kiln uses (F16C instructions on
// CPUs that have them) against the portable bit-manipulation definitions, on every
// binary16 value and on floats around every binary16 rounding boundary, and known values.
#include <doctest/doctest.h>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <vector>
#include "kiln/core/half.h"
#include "kiln/core/tensor.h"

using namespace kiln;

TEST_CASE("binary16 -> float: every one of the 65536 values, exactly") {
  int mismatches = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const float a = half_bits_to_float(uint16_t(h)), b = half_bits_to_float_soft(uint16_t(h));
    const bool same = (std::isnan(a) && std::isnan(b)) || float_bits(a) == float_bits(b);
    if (!same && mismatches++ < 5) FAIL_CHECK("half bits " << h << ": " << a << " vs " << b);
  }
  CHECK(mismatches == 0);
}

TEST_CASE("float -> binary16: round to nearest even at every boundary, subnormals, overflow") {
  // For each binary16 value v: v itself, the float midpoints between it and its
  // neighbours, and the floats one ulp either side of those midpoints.
  int mismatches = 0;
  auto check = [&](float f) {
    const uint16_t a = float_to_half_bits(f), b = float_to_half_bits_soft(f);
    const bool same = std::isnan(f) ? ((a & 0x7c00u) == 0x7c00u && (a & 0x3ffu) != 0) : a == b;
    if (!same && mismatches++ < 5) FAIL_CHECK("float " << f << " (bits " << float_bits(f) << "): " << a << " vs " << b);
  };
  for (uint32_t h = 0; h < 0x7c00u; ++h)
    for (uint32_t sign : {0u, 0x8000u}) {
      const float v = half_bits_to_float_soft(uint16_t(h | sign)), next = half_bits_to_float_soft(uint16_t((h + 1) | sign));
      const float mid = (v + next) / 2;  // exact in float: binary16 values have 11 bits
      for (float f : {v, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, std::numeric_limits<float>::infinity()),
                      std::nextafter(mid, -std::numeric_limits<float>::infinity())})
        check(f);
    }
  for (uint32_t u = 0; u < 0xffffffffu - 4093; u += 4093) check(bits_float(u));  // a spread of all floats
  CHECK(mismatches == 0);
  CHECK(float_to_half_bits(65504.0f) == 0x7bffu);
  CHECK(float_to_half_bits(65520.0f) == 0x7c00u);   // rounds up to inf
  CHECK(float_to_half_bits(5.9604645e-08f) == 1u);  // the smallest subnormal
  CHECK(float_to_half_bits(2.9802322e-08f) == 0u);  // half of it: ties to even, 0
  CHECK(float_to_half_bits(-0.0f) == 0x8000u);
  CHECK(std::isnan(half_bits_to_float(float_to_half_bits(std::numeric_limits<float>::quiet_NaN()))));
}

TEST_CASE("Tensor casts between float32 and float16 / bfloat16: the scalar conversions' bits, any length") {
  // Tensor::to runs 16 values per step where the build has AVX-512 (8 with AVX2;
  // core/tensor.cpp) and the scalar conversions on the tail: both must give
  // float_to_half_bits' / float_to_bf16_bits' bits, for every binary16 and bf16 pattern
  // widened and for a spread of floats (ties, subnormals, overflow, inf, NaN) narrowed, at
  // lengths that end inside a vector.
  std::vector<float> fs;
  for (uint32_t u = 0; u < 0xffffffffu - 65521; u += 65521) fs.push_back(bits_float(u));
  for (uint32_t h = 0; h < 0x7c00u; h += 7) {  // binary16 values and the midpoints above them
    const float v = half_bits_to_float_soft(uint16_t(h)), next = half_bits_to_float_soft(uint16_t(h + 1));
    fs.push_back(v), fs.push_back((v + next) / 2), fs.push_back(-(v + next) / 2);
  }
  for (uint32_t b = 0; b < 0x10000u; b += 3) fs.push_back(bits_float((b << 16) | 0x8000u));  // bf16 ties
  for (float f : {0.f, -0.f, 65504.f, 65520.f, 1e-8f, std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()})
    fs.push_back(f);
  // The 16-bit results are read back through the (exact) widening: a 16-bit value's bits
  // and its float32's determine each other, NaN aside.
  auto same = [](float got, float want) { return std::isnan(want) ? std::isnan(got) : float_bits(got) == float_bits(want); };
  for (size_t n : {fs.size(), fs.size() - 5, size_t(15), size_t(17)}) {
    CAPTURE(n);
    const std::vector<float> part(fs.begin(), fs.begin() + std::ptrdiff_t(n));
    const Tensor t = from_vector(part);
    const auto h = t.to(DType::float16).to(DType::float32).to_vector<float>();
    const auto b = t.to(DType::bfloat16).to(DType::float32).to_vector<float>();
    int bad = 0;
    for (size_t i = 0; i < n; ++i) {
      if (!same(h[i], half_bits_to_float(float_to_half_bits(part[i])))) ++bad;
      // bf16 NaNs too: the vector narrowing keeps float_to_bf16_bits' payload and quiet bit
      if (float_bits(b[i]) != float_bits(bf16_bits_to_float(float_to_bf16_bits(part[i])))) ++bad;
    }
    CHECK(bad == 0);
  }
  // Widening: every 16-bit pattern (as the float32 of its value, narrowed exactly).
  std::vector<float> hv(65536), bv(65536);
  for (uint32_t i = 0; i < 65536; ++i) hv[i] = half_bits_to_float(uint16_t(i)), bv[i] = bf16_bits_to_float(uint16_t(i));
  const auto hw = from_vector(hv).to(DType::float16).to(DType::float32).to_vector<float>();
  const auto bw = from_vector(bv).to(DType::bfloat16).to(DType::float32).to_vector<float>();
  int bad = 0;
  for (uint32_t i = 0; i < 65536; ++i) bad += !same(hw[i], hv[i]) + !same(bw[i], bv[i]);
  CHECK(bad == 0);
}
