// The width in bytes of the widest vector registers this build targets, for types of GCC's
// vector extension: GCC keeps a vector type wider than the registers in memory and runs each
// operation through the stack (ops/cpu/norm.cpp's Vec16 splits 16 lanes by it).
#pragma once

namespace kiln::simd {

#if defined(__AVX512F__)
inline constexpr int kRegBytes = 64;
#elif defined(__AVX__)
inline constexpr int kRegBytes = 32;
#else
inline constexpr int kRegBytes = 16;
#endif

}  // namespace kiln::simd
