// Counter-based random numbers: Philox-4x32-10 (Salmon et al., SC'11).
// Element i of a random tensor depends only on (seed, offset, i), so CPU threads and
// CUDA threads draw the same numbers in any order, and a seed makes a run repeatable.
#pragma once
#include <cstdint>
#include "kiln/core/macros.h"

namespace kiln {

struct Philox4 { uint32_t x[4]; };

/// One Philox-4x32-10 block: 4 random words for a 128-bit counter and a 64-bit key.
KILN_HD_INLINE Philox4 philox4x32(uint64_t counter_lo, uint64_t counter_hi, uint64_t key) {
  uint32_t c0 = uint32_t(counter_lo), c1 = uint32_t(counter_lo >> 32);
  uint32_t c2 = uint32_t(counter_hi), c3 = uint32_t(counter_hi >> 32);
  uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
  for (int r = 0; r < 10; ++r) {
    uint64_t p0 = uint64_t(0xD2511F53u) * c0;
    uint64_t p1 = uint64_t(0xCD9E8D57u) * c2;
    uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0;
    uint32_t n1 = uint32_t(p1);
    uint32_t n2 = uint32_t(p0 >> 32) ^ c3 ^ k1;
    uint32_t n3 = uint32_t(p0);
    c0 = n0; c1 = n1; c2 = n2; c3 = n3;
    k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
  }
  return {{c0, c1, c2, c3}};
}

/// uint32 -> float uniform in [0, 1) with 24 random bits.
KILN_HD_INLINE float uint_to_uniform_float(uint32_t u) { return float(u >> 8) * (1.0f / 16777216.0f); }
/// two uint32 -> double uniform in [0, 1) with 53 random bits.
KILN_HD_INLINE double uint_to_uniform_double(uint32_t a, uint32_t b) {
  uint64_t v = (uint64_t(a) << 21) ^ uint64_t(b >> 11);
  return double(v & ((uint64_t(1) << 53) - 1)) * (1.0 / 9007199254740992.0);
}

/// Generator state: a key (the seed) and the next unused counter.
struct RngState {
  uint64_t seed = 0;
  uint64_t offset = 0;
};

/// Seeds the global generator (CPU and CUDA draw from the same one).
void manual_seed(uint64_t seed);
RngState get_rng_state();
void set_rng_state(const RngState& s);
/// Reserves n counters from the global generator and returns the state to draw with
/// (seed, first counter). Thread-safe.
RngState rng_reserve(uint64_t n_counters);

}  // namespace kiln
