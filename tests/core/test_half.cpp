// The 16-bit float conversions of core/half.h: the ones kiln uses (F16C instructions on
// CPUs that have them) against the portable bit-manipulation definitions, on every
// binary16 value and on floats around every binary16 rounding boundary, and known values.
#include <doctest/doctest.h>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include "kiln/core/half.h"

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
