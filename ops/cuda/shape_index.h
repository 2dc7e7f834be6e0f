// Index math of the GPU shape and nn kernels (ops/cuda/shape.cu, ops/cuda/nn.cu) as
// __host__ __device__ per-thread bodies: cat's (outer, inner) split, index_select, gather
// and its scatter-add, and the sorted-run index_add of embedding / index_select backward.
// No CUDA header: tests/cuda/test_cuda_shape_index.cpp runs these bodies over an emulated grid.
#pragma once
#include <cstdint>
#include "kiln/core/half.h"
#include "kiln/core/macros.h"

namespace kiln::cuda {

/// Accumulator type of the scatter-add kernels: float for the 16-bit floats, else T.
template <class T> struct AccTypeOf { using type = T; };
template <> struct AccTypeOf<Half> { using type = float; };
template <> struct AccTypeOf<BFloat16> { using type = float; };
template <class T> using AccType = typename AccTypeOf<T>::type;

// ---------------------------------------------------------------- cat / stack

/// Inputs one cat launch copies (pointers and column offsets travel as a kernel argument).
constexpr int kCatChunk = 64;

/// One cat launch: inputs [0, n) with output columns [col[i], col[i + 1]) of each output
/// row of `total` columns; every input i is contiguous (outer, col[i + 1] - col[i]).
struct CatChunk {
  const void* ptr[kCatChunk];
  int64_t col[kCatChunk + 1];
  int n = 0;
  int64_t total = 0;
};

/// The input i whose columns [col[i], col[i + 1]) hold column c (col[0] <= c < col[n]);
/// empty inputs are skipped (the last i with col[i] <= c). Binary search.
KILN_HD_INLINE int cat_find_input(const int64_t* col, int n, int64_t c) {
  int lo = 0, hi = n - 1;  // answer in [lo, hi]
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (col[mid] <= c) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/// Element t of a chunk's output block (outer, col[n] - col[0]): the input it comes from,
/// its element offset there and the element offset in the output (outer, total).
struct CatPos {
  int input;
  int64_t src, dst;
};
KILN_HD_INLINE CatPos cat_pos(const CatChunk& ch, int64_t t) {
  const int64_t width = ch.col[ch.n] - ch.col[0];
  const int64_t o = t / width, c = ch.col[0] + (t - o * width);
  const int i = cat_find_input(ch.col, ch.n, c);
  const int64_t inner = ch.col[i + 1] - ch.col[i];
  return {i, o * inner + (c - ch.col[i]), o * ch.total + c};
}

// ---------------------------------------------------------------- index_select

/// Element offset in x (outer, S, inner) that out element t of (outer, n, inner) reads.
KILN_HD_INLINE int64_t index_select_src(int64_t t, const int64_t* idx, int64_t S, int64_t n, int64_t inner) {
  const int64_t c = t % inner, ok = t / inner;  // ok = o * n + k
  const int64_t o = ok / n, k = ok - o * n;
  return (o * S + idx[k]) * inner + c;
}

// ------------------------------------------------- index_add over sorted runs (deterministic)
//
// keys (n): the indices sorted stably (cub::DeviceRadixSort), pos (n): their original
// positions. A run is a maximal stretch of equal keys; its positions are in increasing
// (original) order. Thread t of the grid over (outer, n, inner) owns sorted slot i and
// column c of outer row o; when i starts a run it sums the run's source rows in original
// order and stores the sum: every destination is written by exactly one thread, in the
// CPU's order, without atomics.

/// The (outer row, sorted slot, column) of thread item t over (outer, n, inner).
struct RunPos {
  int64_t o, i, c;
};
KILN_HD_INLINE RunPos run_pos(int64_t t, int64_t n, int64_t inner) {
  const int64_t c = t % inner, oi = t / inner;
  return {oi / n, oi % n, c};
}

/// True when sorted slot i starts a run of equal keys.
KILN_HD_INLINE bool run_starts(const int64_t* keys, int64_t i) { return i == 0 || keys[i] != keys[i - 1]; }

/// The body of thread item t: src (outer, n, inner), dst (outer, S, inner). Rows whose key
/// equals `skip_key` (embedding's padding_idx; -1 for none) are left untouched. A is the
/// accumulator type (float for 16-bit T). dst must hold zeros where nothing is added.
template <class T, class A>
KILN_HD_INLINE void index_add_run(int64_t t, const int64_t* keys, const int64_t* pos, const T* src, T* dst,
                                  int64_t S, int64_t n, int64_t inner, int64_t skip_key) {
  const RunPos p = run_pos(t, n, inner);
  if (!run_starts(keys, p.i)) return;
  const int64_t key = keys[p.i];
  if (key == skip_key) return;
  T& d = dst[(p.o * S + key) * inner + p.c];
  A acc = A(d);  // added to what is there (index_add onto a copy of its input), in index order as the CPU's
  for (int64_t j = p.i; j < n && keys[j] == key; ++j) acc += A(src[(p.o * n + pos[j]) * inner + p.c]);
  d = T(acc);
}

// ---------------------------------------------------------------- gather / scatter_add

/// Most dims gather handles on the GPU.
constexpr int kGatherMaxDims = 16;

/// The index shape and the element strides of the three operands (0: out or dout, 1: the
/// index, 2: x or dx), with `dim` the gathered dim.
struct GatherGeom {
  int ndim = 1;
  int dim = 0;
  int64_t shape[kGatherMaxDims] = {};
  int64_t stride[3][kGatherMaxDims] = {};
};

/// Element offsets of the three operands at the index-shape position whose coordinates are
/// linear index t (row-major), not counting the gathered dim of operand 2 (stride 0 there:
/// that offset comes from the index).
struct GatherOff {
  int64_t v[3];
};
KILN_HD_INLINE GatherOff gather_offsets(const GatherGeom& g, int64_t t) {
  GatherOff o{{0, 0, 0}};
  for (int d = g.ndim - 1; d >= 0; --d) {
    const int64_t size = g.shape[d];
    const int64_t q = t / size, r = t - q * size;
    t = q;
    o.v[0] += r * g.stride[0][d];
    o.v[1] += r * g.stride[1][d];
    if (d != g.dim) o.v[2] += r * g.stride[2][d];
  }
  return o;
}

/// gather, element t of the index shape: out[p] = x[p with p[dim] = idx[p]].
template <class U>
KILN_HD_INLINE void gather_one(const GatherGeom& g, int64_t t, const U* x, const int64_t* idx, U* out) {
  const GatherOff o = gather_offsets(g, t);
  out[o.v[0]] = x[o.v[2] + idx[o.v[1]] * g.stride[2][g.dim]];
}

/// Number of scatter-add rows: positions of the index shape with the gathered dim left out.
KILN_HD_INLINE int64_t scatter_rows(const GatherGeom& g) {
  int64_t r = 1;
  for (int d = 0; d < g.ndim; ++d)
    if (d != g.dim) r *= g.shape[d];
  return r;
}

/// Row r of a scatter (every coordinate but the gathered dim): calls f(src_offset,
/// dx_offset) for the positions along the gathered dim, in order. Colliding updates all
/// fall in one row, so one thread per row is deterministic. Operand 0 is the source, 1 the
/// index, 2 dx.
template <class F>
KILN_HD_INLINE void scatter_row(const GatherGeom& g, int64_t r, const int64_t* idx, const F& f) {
  int64_t o0 = 0, o1 = 0, o2 = 0;
  for (int d = g.ndim - 1; d >= 0; --d) {
    if (d == g.dim) continue;
    const int64_t size = g.shape[d];
    const int64_t q = r / size, rem = r - q * size;
    r = q;
    o0 += rem * g.stride[0][d];
    o1 += rem * g.stride[1][d];
    o2 += rem * g.stride[2][d];
  }
  const int64_t n = g.shape[g.dim], s0 = g.stride[0][g.dim], s1 = g.stride[1][g.dim], s2 = g.stride[2][g.dim];
  for (int64_t i = 0; i < n; ++i) f(o0 + i * s0, o2 + idx[o1 + i * s1] * s2);
}

/// scatter_add, row r: dx[p with p[dim] = idx[p]] += dout[p]. A is the accumulator type.
template <class T, class A>
KILN_HD_INLINE void scatter_add_row(const GatherGeom& g, int64_t r, const T* dout, const int64_t* idx, T* dx) {
  scatter_row(g, r, idx, [&](int64_t s, int64_t d) { dx[d] = T(A(dx[d]) + A(dout[s])); });
}

/// scatter (copy), row r: dx[p with p[dim] = idx[p]] = src[p]; the last duplicate wins.
template <class U>
KILN_HD_INLINE void scatter_copy_row(const GatherGeom& g, int64_t r, const U* src, const int64_t* idx, U* dx) {
  scatter_row(g, r, idx, [&](int64_t s, int64_t d) { dx[d] = src[s]; });
}

}  // namespace kiln::cuda
