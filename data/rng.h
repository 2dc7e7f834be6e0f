// data::Rng: a small seeded random generator for data pipelines (shuffling, random
// augmentations, random text windows), built on the same Philox-4x32-10 as core/rng.h.
// A (seed, stream) pair names one independent stream, so results never depend on threads.
#pragma once
#include <cstdint>
#include "kiln/core/rng.h"

namespace kiln::data {

/// splitmix64 finalizer: mixes 64 bits (used to derive per-epoch keys from a seed).
inline uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// A Philox stream keyed by `seed`; `stream` selects one of 2^64 independent substreams.
/// Same (seed, stream) -> same numbers on every machine and thread. Satisfies
/// UniformRandomBitGenerator, so it also works with <random> and std::shuffle.
class Rng {
 public:
  using result_type = uint64_t;
  explicit Rng(uint64_t seed = 0, uint64_t stream = 0) : key_(seed), stream_(stream) {}

  static constexpr uint64_t min() { return 0; }
  static constexpr uint64_t max() { return ~uint64_t(0); }
  /// Next 64 random bits.
  uint64_t operator()() {
    if (pos_ >= 4) refill();
    uint64_t v = (uint64_t(buf_.x[pos_]) << 32) | buf_.x[pos_ + 1];
    pos_ += 2;
    return v;
  }
  /// Uniform double in [0, 1) (53 random bits).
  double uniform() { return double((*this)() >> 11) * (1.0 / 9007199254740992.0); }
  /// Uniform integer in [0, n) without modulo bias (n >= 1).
  uint64_t below(uint64_t n) {
    if (n <= 1) return 0;
    const uint64_t limit = max() - max() % n;  // reject the incomplete last block
    uint64_t v;
    do { v = (*this)(); } while (v >= limit);
    return v % n;
  }
  /// Uniform integer in [low, high) (high > low).
  int64_t randint(int64_t low, int64_t high) { return low + int64_t(below(uint64_t(high - low))); }
  /// True with probability p.
  bool bernoulli(double p) { return uniform() < p; }

 private:
  void refill() {
    buf_ = philox4x32(counter_++, stream_, key_);
    pos_ = 0;
  }
  uint64_t key_, stream_;
  uint64_t counter_ = 0;
  Philox4 buf_{};
  int pos_ = 4;
};

}  // namespace kiln::data
