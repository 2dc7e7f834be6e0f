// Index math of kiln's GPU loops, as __host__ __device__ code a CPU test can drive:
// merging the dims of N operands, strided offsets from a linear index (OffsetCalculator,
// with division by invariant integers), the grid-stride split of work across blocks and
// threads, and the choice between the vectorised and the strided loop. The GPU twin of
// core/strided.h. No CUDA header: it compiles as plain C++ too.
#pragma once
#include <cstddef>
#include <cstdint>
#include "kiln/core/macros.h"

// `#pragma unroll` for nvcc, nothing for host compilers (GCC would warn about it).
#if defined(__CUDA_ARCH__)
#define KILN_UNROLL _Pragma("unroll")
#else
#define KILN_UNROLL
#endif

namespace kiln::cuda {

/// Most dims a GPU loop handles after merging (as the CPU's kMaxDims).
constexpr int kMaxLoopDims = 16;

// ---------------------------------------------------------------- integer division

KILN_HD_INLINE uint32_t mul_hi(uint32_t a, uint32_t b) {
#ifdef __CUDA_ARCH__
  return __umulhi(a, b);
#else
  return uint32_t((uint64_t(a) * b) >> 32);
#endif
}

/// n / d and n % d for a fixed divisor 1 <= d < 2^31 and any 32-bit n, by a multiply-high
/// and a shift (Granlund & Montgomery, "Division by invariant integers using
/// multiplication", 1994): q = (mul_hi(n, magic) + n) >> shift, with 2^shift >= d.
template <class IdxT>
struct IntDivider;

template <>
struct IntDivider<uint32_t> {
  uint32_t divisor = 1, magic = 0, shift = 0;
  IntDivider() = default;
  explicit IntDivider(uint32_t d) : divisor(d) {
    shift = 0;
    while ((uint64_t(1) << shift) < d) ++shift;
    magic = uint32_t(((uint64_t(1) << 32) * ((uint64_t(1) << shift) - d)) / d + 1);
  }
  KILN_HD_INLINE uint32_t div(uint32_t n) const { return uint32_t((uint64_t(mul_hi(n, magic)) + n) >> shift); }
  KILN_HD_INLINE void divmod(uint32_t n, uint32_t& q, uint32_t& r) const {
    q = div(n);
    r = n - q * divisor;
  }
};

/// 64-bit indices (tensors of 2^31 elements or more): plain division.
template <>
struct IntDivider<uint64_t> {
  uint64_t divisor = 1;
  IntDivider() = default;
  explicit IntDivider(uint64_t d) : divisor(d) {}
  KILN_HD_INLINE uint64_t div(uint64_t n) const { return n / divisor; }
  KILN_HD_INLINE void divmod(uint64_t n, uint64_t& q, uint64_t& r) const {
    q = n / divisor;
    r = n - q * divisor;
  }
};

// ---------------------------------------------------------------- layouts

/// The index space of an N-operand loop after merging (host side). Operand 0 is the
/// output. Strides are in elements; 0 on broadcast dims. The last dim is innermost.
template <int N>
struct LoopLayout {
  int ndim = 1;
  int64_t sizes[kMaxLoopDims] = {1};
  int64_t strides[N][kMaxLoopDims] = {};
  int64_t numel = 1;
};

/// Drops size-1 dims and merges dim d into the one before when that is contiguous with
/// it for every operand (stride[d-1] == stride[d] * size[d]) - the rule of
/// core/strided.h's StridedLayout, so a contiguous tensor becomes one dim.
/// strides[k] points at operand k's ndim strides. ndim may be 0 (a scalar).
template <int N>
LoopLayout<N> merge_dims(int ndim, const int64_t* shape, const int64_t* const* strides) {
  LoopLayout<N> L;
  L.ndim = 0;
  L.numel = 1;
  for (int d = 0; d < ndim; ++d) L.numel *= shape[d];
  for (int d = 0; d < ndim; ++d) {
    if (shape[d] == 1) continue;
    if (L.ndim > 0) {
      bool merge = true;
      for (int k = 0; k < N; ++k)
        if (L.strides[k][L.ndim - 1] != strides[k][d] * shape[d]) { merge = false; break; }
      if (merge) {
        L.sizes[L.ndim - 1] *= shape[d];
        for (int k = 0; k < N; ++k) L.strides[k][L.ndim - 1] = strides[k][d];
        continue;
      }
    }
    L.sizes[L.ndim] = shape[d];
    for (int k = 0; k < N; ++k) L.strides[k][L.ndim] = strides[k][d];
    ++L.ndim;
  }
  if (L.ndim == 0) {  // a scalar, or every dim of size 1
    L.ndim = 1;
    L.sizes[0] = 1;
    for (int k = 0; k < N; ++k) L.strides[k][0] = 0;
  }
  return L;
}

/// True when every operand walks memory with stride 1 over one merged dim.
template <int N>
bool is_contiguous_loop(const LoopLayout<N>& L) {
  if (L.ndim != 1) return false;
  for (int k = 0; k < N; ++k)
    if (L.strides[k][0] != 1 && L.sizes[0] != 1) return false;
  return true;
}

/// Element offsets of the N operands at one linear index.
template <int N>
struct Offsets {
  int64_t v[N];
};

/// Linear index -> per-operand element offsets over a merged layout. Built on the host,
/// passed to kernels by value. IdxT is uint32_t when numel < 2^31, else uint64_t.
template <int N, class IdxT>
struct OffsetCalculator {
  int ndim = 1;
  IntDivider<IdxT> sizes[kMaxLoopDims];
  int64_t strides[kMaxLoopDims][N];

  OffsetCalculator() = default;
  explicit OffsetCalculator(const LoopLayout<N>& L) : ndim(L.ndim) {
    for (int d = 0; d < kMaxLoopDims; ++d) {
      sizes[d] = IntDivider<IdxT>(d < L.ndim ? IdxT(L.sizes[d]) : IdxT(1));
      for (int k = 0; k < N; ++k) strides[d][k] = d < L.ndim ? L.strides[k][d] : 0;
    }
  }

  KILN_HD_INLINE Offsets<N> get(IdxT linear) const {
    Offsets<N> o;
KILN_UNROLL
    for (int k = 0; k < N; ++k) o.v[k] = 0;
    // innermost dim first; the outermost takes what is left without a division
    for (int d = ndim - 1; d > 0; --d) {
      IdxT q, r;
      sizes[d].divmod(linear, q, r);
KILN_UNROLL
      for (int k = 0; k < N; ++k) o.v[k] += int64_t(r) * strides[d][k];
      linear = q;
    }
KILN_UNROLL
    for (int k = 0; k < N; ++k) o.v[k] += int64_t(linear) * strides[0][k];
    return o;
  }
};

/// Largest element count that takes 32-bit indices.
constexpr int64_t kMax32BitIndex = (int64_t(1) << 31) - 1;

// ---------------------------------------------------------------- grid split

/// One thread's place in the grid (blockIdx.x, threadIdx.x, blockDim.x, gridDim.x).
struct GridPos {
  uint32_t block = 0, thread = 0, block_dim = 1, grid_dim = 1;
};

/// Grid and block sizes of a 1-D launch.
struct LaunchConfig {
  uint32_t grid = 1, block = 1;
};

/// Threads per block of kiln's elementwise loops.
constexpr int kLoopBlock = 256;

/// A launch over `items` work items (elements or vector chunks), one per thread per
/// grid-stride step: enough blocks to cover the items, at most `max_blocks` (e.g. 8 per
/// multiprocessor), at least one.
inline LaunchConfig launch_config(int64_t items, int64_t max_blocks, int block = kLoopBlock) {
  LaunchConfig c;
  c.block = uint32_t(block);
  int64_t g = (items + block - 1) / block;
  if (g > max_blocks) g = max_blocks;
  if (g < 1) g = 1;
  c.grid = uint32_t(g);
  return c;
}

/// The grid-stride loop: thread (block, thread) visits items t, t + stride, ... < n with
/// t = block * block_dim + thread and stride = block_dim * grid_dim. Every item is
/// visited by exactly one thread.
template <class IdxT>
struct GridStride {
  IdxT first, step;
  KILN_HD_INLINE explicit GridStride(const GridPos& g)
      : first(IdxT(g.block) * IdxT(g.block_dim) + IdxT(g.thread)), step(IdxT(g.block_dim) * IdxT(g.grid_dim)) {}
};

// ---------------------------------------------------------------- vectorisation

/// Elements per 16-byte access for a loop whose widest operand has `max_elem_size` bytes.
constexpr int vec_width(size_t max_elem_size) {
  return max_elem_size >= 16 ? 1 : int(16 / max_elem_size);
}

/// True when p is a multiple of `bytes` (a vector access of that size is legal).
inline bool is_aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

/// True when each of the N pointers is aligned to `vec` of its elements.
template <int N>
bool all_aligned(void* const* ptrs, const size_t* elem_sizes, int vec) {
  for (int k = 0; k < N; ++k)
    if (!is_aligned(ptrs[k], elem_sizes[k] * size_t(vec))) return false;
  return true;
}

/// How an elementwise loop runs: one vectorised contiguous loop, or the strided loop with
/// 32- or 64-bit indices.
enum class LoopKind { Vectorized, Strided32, Strided64 };

/// Chooses the loop for a merged layout: vectorised when every operand is contiguous and
/// each pointer is aligned to `vec` of its elements; else strided with the narrowest
/// index type that holds numel.
template <int N>
LoopKind choose_loop(const LoopLayout<N>& L, void* const* ptrs, const size_t* elem_sizes, int vec) {
  if (is_contiguous_loop(L) && all_aligned<N>(ptrs, elem_sizes, vec)) return LoopKind::Vectorized;
  return L.numel <= kMax32BitIndex ? LoopKind::Strided32 : LoopKind::Strided64;
}

}  // namespace kiln::cuda
