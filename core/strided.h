// Strided iteration on the CPU: visit every element of an N-d index space shared by
// N operands with their own strides (broadcast operands have stride 0). Adjacent dims
// that are contiguous for every operand are merged first, so a contiguous tensor is
// one long row. Rows are split across OpenMP threads.
#pragma once
#include <array>
#include <cstdint>
#include <vector>
#include "kiln/core/error.h"
#include "kiln/core/parallel.h"

namespace kiln {

/// A shape plus one stride vector per operand, after merging compatible dims.
template <int N>
struct StridedLayout {
  std::vector<int64_t> shape;                       // merged shape (at least 1 dim)
  std::array<std::vector<int64_t>, N> strides;      // merged strides per operand

  StridedLayout(const std::vector<int64_t>& in_shape, const std::array<std::vector<int64_t>, N>& in_strides) {
    // drop size-1 dims, then merge dim d into d+1 when stride[d] == stride[d+1]*size[d+1]
    for (size_t d = 0; d < in_shape.size(); ++d) {
      if (in_shape[d] == 1) continue;
      if (!shape.empty()) {
        bool merge = true;
        for (int k = 0; k < N; ++k)
          if (strides[k].back() != in_strides[k][d] * in_shape[d]) { merge = false; break; }
        if (merge) {
          shape.back() *= in_shape[d];
          for (int k = 0; k < N; ++k) strides[k].back() = in_strides[k][d];
          continue;
        }
      }
      shape.push_back(in_shape[d]);
      for (int k = 0; k < N; ++k) strides[k].push_back(in_strides[k][d]);
    }
    if (shape.empty()) {
      shape.push_back(1);
      for (int k = 0; k < N; ++k) strides[k].push_back(0);
    }
  }
};

/// Calls row(offsets, n, inner_strides) for every innermost row of the index space:
/// offsets[k] is operand k's element offset of the row start, n the row length and
/// inner_strides[k] operand k's stride along the row. Parallel when numel >= grain: over
/// rows, and with split_rows also within rows of at least 2 grain elements (a contiguous
/// tensor merges into one row), each piece then a call of its own. Only for loops whose
/// elements are independent: a row's pieces may run on different threads.
template <int N, class F>
void for_each_row(const std::vector<int64_t>& shape, const std::array<std::vector<int64_t>, N>& strides,
                  const F& row, int64_t grain = 32768, bool split_rows = false) {
  StridedLayout<N> L(shape, strides);
  const int nd = int(L.shape.size());
  KILN_CHECK(nd <= 16, "strided loop: at most 16 non-mergeable dims are supported, got ", nd);
  const int64_t inner = L.shape[nd - 1];
  std::array<int64_t, N> inner_strides;
  for (int k = 0; k < N; ++k) inner_strides[k] = L.strides[k][nd - 1];
  int64_t rows = 1;
  for (int d = 0; d < nd - 1; ++d) rows *= L.shape[d];
  for (int64_t s : L.shape) if (s == 0) return;
  if (split_rows && inner >= 2 * grain) {  // pieces of at least `grain` elements, in any order
    const int64_t pieces = inner / grain;
    parallel_for(0, rows * pieces, 1, [&](int64_t i0, int64_t i1) {
      for (int64_t it = i0; it < i1; ++it) {
        const int64_t p = it % pieces, begin = p * inner / pieces, end = (p + 1) * inner / pieces;
        std::array<int64_t, N> off{};
        int64_t r = it / pieces;
        for (int d = nd - 2; d >= 0; --d) {
          const int64_t i = r % L.shape[d];
          r /= L.shape[d];
          for (int k = 0; k < N; ++k) off[k] += i * L.strides[k][d];
        }
        for (int k = 0; k < N; ++k) off[k] += begin * inner_strides[k];
        row(off, end - begin, inner_strides);
      }
    });
    return;
  }
  int64_t row_grain = grain / (inner > 0 ? inner : 1);
  if (row_grain < 1) row_grain = 1;
  parallel_for(0, rows, row_grain, [&](int64_t r0, int64_t r1) {
    // decompose r0 into a multi-index over dims [0, nd-1)
    std::array<int64_t, 16> idx{};
    std::array<int64_t, N> off{};
    int64_t r = r0;
    for (int d = nd - 2; d >= 0; --d) {
      idx[d] = r % L.shape[d];
      r /= L.shape[d];
      for (int k = 0; k < N; ++k) off[k] += idx[d] * L.strides[k][d];
    }
    for (int64_t rr = r0; rr < r1; ++rr) {
      row(off, inner, inner_strides);
      // odometer increment
      for (int d = nd - 2; d >= 0; --d) {
        ++idx[d];
        for (int k = 0; k < N; ++k) off[k] += L.strides[k][d];
        if (idx[d] < L.shape[d]) break;
        for (int k = 0; k < N; ++k) off[k] -= L.strides[k][d] * L.shape[d];
        idx[d] = 0;
      }
    }
  });
}

}  // namespace kiln
