// Scalar math of the nn op family shared by the CPU loops and the CUDA kernels
// (KILN_HD): dropout's per-element keep rule.
#pragma once
#include <cstdint>
#include "kiln/core/macros.h"
#include "kiln/core/rng.h"

namespace kiln::math {

/// Dropout's keep rule for one random word: u = uint_to_uniform_float(word) in [0, 1)
/// (24 random bits); the element is kept when u >= p, so P(keep) = 1 - p (p = 1 drops all).
KILN_HD_INLINE bool dropout_keep_word(uint32_t word, float p) { return uint_to_uniform_float(word) >= p; }

/// Keep rule for element i (row-major index) of a dropout call that reserved
/// ceil(n / 4) Philox blocks starting at counter `offset` under key `seed`: element i
/// uses word i % 4 of block offset + i / 4. Kernels that walk 4 elements per block
/// compute the block once and call dropout_keep_word on each word.
KILN_HD_INLINE bool dropout_keep(uint64_t seed, uint64_t offset, uint64_t i, float p) {
  return dropout_keep_word(philox4x32(offset + i / 4, 0, seed).x[i % 4], p);
}

}  // namespace kiln::math
