// Selecting and sampling: topk (PyTorch's torch.topk), sort/argsort, kthvalue, median and
// quantile (compositions of topk and gather), and multinomial (torch.multinomial). All find indices on the CPU (a CUDA input is copied to the host and the indices back:
// one synchronisation); topk's values come from gather, so they are differentiable.
#pragma once
#include <cstdint>
#include <optional>
#include <utility>
#include "kiln/core/tensor.h"
#include "kiln/ops/reduce.h"

namespace kiln {

/// The k largest (largest = true) or smallest elements of x along dim, and their indices:
/// values with x's dtype and indices (int64), both of x's shape with size k along dim,
/// sorted (largest first, or smallest first; among equal values the lower index first;
/// NaN counts as larger than any number, as in PyTorch; integers ranked exactly, in int64).
/// The values' gradient flows back
/// to the chosen elements of x. Throws kiln::Error unless 0 <= k <= x.size(dim).
std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true);

/// x sorted along dim, ascending (or descending), and the source indices (int64): topk of the
/// whole dim, so stable (equal values keep their order, torch.sort(stable=True)) with NaN
/// last (first when descending), as PyTorch. Values are differentiable.
std::pair<Tensor, Tensor> sort(const Tensor& x, int64_t dim = -1, bool descending = false);
/// The indices of sort(x, dim, descending).
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false);

/// The k-th smallest entry along dim (k from 1) and its index (torch.kthvalue); NaN counts
/// as the largest. median: the lower median along dim (entry (n - 1) / 2 of the sorted row),
/// NaN (at the row's first NaN) where the row has one, as PyTorch; the all-elements form
/// gives the value. Values differentiable (gathered from x).
ValuesIndices kthvalue(const Tensor& x, int64_t k, int64_t dim = -1, bool keepdim = false);
ValuesIndices median(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor median(const Tensor& x);
enum class QuantileInterpolation { linear, lower, higher, midpoint, nearest };
/// The q-th quantiles of x along dim (all entries when no dim), torch.quantile: entry
/// q * (n - 1) of the sorted row, between two entries interpolated as asked (nearest rounds
/// half to even, as PyTorch). q in [0, 1], a number or a 0-D / 1-D tensor of x's dtype (a 1-D
/// q puts its dim first in the result); a row with NaN gives NaN. float32 / float64;
/// differentiable in x. q is read back to the host to check its range (as PyTorch).
Tensor quantile(const Tensor& x, const Tensor& q, std::optional<int64_t> dim = std::nullopt, bool keepdim = false,
                QuantileInterpolation interpolation = QuantileInterpolation::linear);
Tensor quantile(const Tensor& x, double q, std::optional<int64_t> dim = std::nullopt, bool keepdim = false,
                QuantileInterpolation interpolation = QuantileInterpolation::linear);
/// quantile and median ignoring NaN (torch.nanquantile, nanmedian): the ranks count a row's
/// non-NaN entries; an all-NaN row gives NaN (nanmedian: at index 0).
Tensor nanquantile(const Tensor& x, const Tensor& q, std::optional<int64_t> dim = std::nullopt, bool keepdim = false,
                   QuantileInterpolation interpolation = QuantileInterpolation::linear);
Tensor nanquantile(const Tensor& x, double q, std::optional<int64_t> dim = std::nullopt, bool keepdim = false,
                   QuantileInterpolation interpolation = QuantileInterpolation::linear);
ValuesIndices nanmedian(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor nanmedian(const Tensor& x);
/// The most frequent value along dim and its last position (torch.mode): on a tie the
/// smallest value; NaNs count as one value (PyTorch's index for a NaN mode is arbitrary, kiln's
/// is the last NaN). Values differentiable. Computed on the host.
ValuesIndices mode(const Tensor& x, int64_t dim = -1, bool keepdim = false);

/// num_samples category indices drawn from each row of `weights` ((C) or (N, C),
/// non-negative, finite, not all zero; they need not sum to 1): int64 of shape
/// (num_samples) or (N, num_samples), on weights' device. With replacement each draw is
/// independent; without, an index is drawn at most once per row (so num_samples must not
/// exceed the row's non-zero weights). num_samples must be > 0 (as PyTorch). Each row is
/// divided by its largest weight first, so weights up to the float64 maximum work. Draws
/// from kiln's generator (manual_seed repeats them).
Tensor multinomial(const Tensor& weights, int64_t num_samples, bool replacement = false);

}  // namespace kiln
