// PyTorch's smaller tensor utilities, each a composition of kiln's ops (so every device runs
// them and autograd differentiates what PyTorch differentiates): repetition (repeat_interleave,
// tile), searching and counting (searchsorted, bucketize, bincount, histc, unique,
// unique_consecutive), indexing (take_along_dim, tril_indices, triu_indices), geometry and
// statistics (cross, cov, corrcoef, rot90, block_diag, cartesian_prod), and elementwise odds
// and ends (logit, isclose, clamp with tensor bounds, fmax, fmin, heaviside). Ops whose
// output size depends on the data (repeat_interleave with a tensor of repeats, bincount,
// unique, histc's range from the data) read back to the host, as PyTorch's do.
#pragma once
#include <optional>
#include <tuple>
#include <vector>
#include "kiln/core/tensor.h"

namespace kiln {

/// Each entry of x repeated `repeats` times along dim (torch.repeat_interleave); without a
/// dim, of the flattened x. The tensor form takes one count per entry along dim (0-D or 1-D,
/// integer, >= 0; read back). Differentiable in x.
Tensor repeat_interleave(const Tensor& x, int64_t repeats, std::optional<int64_t> dim = std::nullopt);
Tensor repeat_interleave(const Tensor& x, const Tensor& repeats, std::optional<int64_t> dim = std::nullopt);
/// x tiled: dims counts repetitions per dim, padded with leading 1s to x.dim() (torch.tile).
Tensor tile(const Tensor& x, const std::vector<int64_t>& dims);

/// For each value, the index where it would be inserted into the sorted last dim of
/// `sorted` to keep it sorted (torch.searchsorted): the first position whose entry is >= the
/// value (right: >): int64, values' shape. `sorted` is 1-D or has values' leading dims. NaN
/// counts as larger than every number. Computed on the host (a read back on a GPU).
Tensor searchsorted(const Tensor& sorted, const Tensor& values, bool right = false);
/// The bucket of each entry of x among the 1-D increasing boundaries (torch.bucketize):
/// searchsorted(boundaries, x, right).
Tensor bucketize(const Tensor& x, const Tensor& boundaries, bool right = false);
/// Counts of each value of a 1-D non-negative integer tensor, length max(x) + 1 or minlength
/// (torch.bincount): int64, or the sums of `weights` (x's length; float32 for float32
/// weights, else float64, as PyTorch) when given. Not differentiable.
Tensor bincount(const Tensor& x, const Tensor& weights = {}, int64_t minlength = 0);
/// A histogram of x in `bins` equal bins over [min, max] (torch.histc; min == max takes the
/// data's range), entries outside ignored, the top edge in the last bin; x's float dtype.
Tensor histc(const Tensor& x, int64_t bins = 100, double min = 0, double max = 0);
/// The distinct entries of x, sorted (torch.unique without dim): {values (1-D), inverse
/// (x's shape: the position of each entry in values; int64), counts (int64)}; the inverse
/// and counts are undefined unless asked for.
std::tuple<Tensor, Tensor, Tensor> unique(const Tensor& x, bool return_inverse = false, bool return_counts = false);
/// Collapses runs of equal consecutive entries of the flattened x (torch.unique_consecutive).
std::tuple<Tensor, Tensor, Tensor> unique_consecutive(const Tensor& x, bool return_inverse = false,
                                                      bool return_counts = false);

/// gather with broadcasting (torch.take_along_dim): x and indices broadcast in every dim
/// but dim; without a dim, both are flattened. Differentiable in x.
Tensor take_along_dim(const Tensor& x, const Tensor& indices, std::optional<int64_t> dim = std::nullopt);
/// The (row, col) positions of the lower (upper) triangle of a rows x cols matrix with the
/// diagonal offset, as torch.tril_indices / triu_indices: int64 (2, N), row-major.
Tensor tril_indices(int64_t rows, int64_t cols, int64_t offset = 0, TensorOptions o = {.dtype = DType::int64});
Tensor triu_indices(int64_t rows, int64_t cols, int64_t offset = 0, TensorOptions o = {.dtype = DType::int64});

/// The cross product of 3-vectors along dim (size 3), a and b broadcast (torch.linalg.cross).
Tensor cross(const Tensor& a, const Tensor& b, int64_t dim = -1);
/// The covariance matrix of the variables in x's rows (observations in columns; a 1-D x is
/// one variable), with `correction` (1: Bessel's) (torch.cov without weights); corrcoef is
/// the correlation matrix, clamped to [-1, 1] (torch.corrcoef).
Tensor cov(const Tensor& x, int64_t correction = 1);
Tensor corrcoef(const Tensor& x);
/// x rotated by 90 degrees k times in the plane of dims, from the first towards the second
/// (torch.rot90).
Tensor rot90(const Tensor& x, int64_t k = 1, const std::vector<int64_t>& dims = {0, 1});
/// The matrices (0-D and 1-D inputs count as 1 x n rows) on the diagonal of one zero matrix
/// (torch.block_diag); the dtype promotes them all.
Tensor block_diag(const std::vector<Tensor>& tensors);
/// Every combination of one entry of each 1-D tensor, (N, count) (torch.cartesian_prod; a
/// single tensor is returned as it is).
Tensor cartesian_prod(const std::vector<Tensor>& tensors);

/// log(x / (1 - x)) (torch.logit); with eps, x is clamped to [eps, 1 - eps] first and the
/// gradient is 0 outside it (PyTorch's: g / (x (1 - x)) on the closed interval).
Tensor logit(const Tensor& x, std::optional<double> eps = std::nullopt);
/// |a - b| <= atol + rtol * |b| elementwise (equal infinities too; NaN equal to NaN only
/// with equal_nan), bool (torch.isclose).
Tensor isclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false);
/// clamp with tensor bounds (either may be undefined), broadcast with x: min(max(x, min),
/// max) (torch.clamp); NaN in x stays. Gradient: x's where min <= x <= max, the bounds'
/// where they were taken.
Tensor clamp(const Tensor& x, const Tensor& min, const Tensor& max);
/// max / min ignoring NaN (NaN only where both are), torch.fmax / fmin; PyTorch's
/// gradients (the winner's; halved on a tie).
Tensor fmax(const Tensor& a, const Tensor& b);
Tensor fmin(const Tensor& a, const Tensor& b);
/// 0 where x < 0, values where x == 0, 1 where x > 0 (torch.heaviside; NaN gives 0 on the
/// CPU as PyTorch's). Not differentiable.
Tensor heaviside(const Tensor& x, const Tensor& values);

}  // namespace kiln
