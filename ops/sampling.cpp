// topk and multinomial (see sampling.h): the index search is plain C++ over the rows of
// a contiguous float64 copy, the values of topk a gather (so autograd differentiates them).
#include "kiln/ops/sampling.h"
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>
#include "kiln/core/autograd.h"
#include "kiln/core/error.h"
#include "kiln/core/rng.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/helpers.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape_ops.h"

namespace kiln {

std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest) {
  KILN_CHECK(x.defined(), "topk: input is undefined");
  KILN_CHECK(x.dim() >= 1, "topk: expected a tensor with at least one dimension, got a 0-d tensor");
  dim = wrap_dim(dim, x.dim(), "topk");
  const int64_t S = x.size(dim);
  KILN_CHECK(k >= 0 && k <= S, "topk: k = ", k, " is out of range for dimension ", dim, " of size ", S, " (input ",
             describe(x), ")");
  Tensor idx;
  {
    NoGradGuard ng;
    // rows along `dim`, last: (R, S) on the CPU in float64, or int64 for integers (int64
    // values above 2^53 would tie in float64)
    const DType rank_dt = x.is_floating_point() ? DType::float64 : DType::int64;
    const Tensor rows = x.detach().transpose(dim, x.dim() - 1).contiguous().to(Device::cpu()).to(rank_dt);
    const int64_t R = S == 0 ? 0 : rows.numel() / S;
    Shape out_shape = rows.shape();
    out_shape.back() = k;
    Tensor out = Tensor::empty(out_shape, DType::int64);
    int64_t* o = out.data<int64_t>();
    auto rank = [&]<class T>(const T* v) {
      // "before": the order topk returns; NaN first when largest (last when smallest), ties by index
      auto before = [largest](T a, int64_t ia, T b, int64_t ib) {
        const bool na = a != a, nb = b != b;
        if (na || nb) {
          if (na && nb) return ia < ib;
          return largest ? na : nb;
        }
        if (a != b) return largest ? a > b : a < b;
        return ia < ib;
      };
      std::vector<int64_t> order(static_cast<size_t>(S));
      for (int64_t r = 0; r < R; ++r) {
        const T* row = v + r * S;
        std::iota(order.begin(), order.end(), int64_t(0));
        std::partial_sort(order.begin(), order.begin() + k, order.end(),
                          [&](int64_t a, int64_t b) { return before(row[a], a, row[b], b); });
        std::copy(order.begin(), order.begin() + k, o + r * k);
      }
    };
    if (rank_dt == DType::float64) rank(rows.data<double>());
    else rank(rows.data<int64_t>());
    idx = out.transpose(dim, x.dim() - 1).contiguous().to(x.device());
  }
  return {gather(x, dim, idx), idx};
}

std::pair<Tensor, Tensor> sort(const Tensor& x, int64_t dim, bool descending) {
  KILN_CHECK(x.defined(), "sort: input is undefined");
  if (x.dim() == 0) {  // one element: itself at index 0
    wrap_dim(dim, 0, "sort");
    auto [v, i] = topk(x.reshape({1}), 1, 0, descending);
    return {v.reshape({}), i.reshape({})};
  }
  const int64_t d = wrap_dim(dim, x.dim(), "sort");
  return topk(x, x.size(d), d, descending);
}

Tensor argsort(const Tensor& x, int64_t dim, bool descending) { return sort(x, dim, descending).second; }

// ---------------------------------------------------------------- order statistics

namespace {
/// The entries of x1 (x, made at least 1-D) at idx (size 1 along d) and idx itself, with dim d
/// kept only when keepdim asks for it and x had one.
ValuesIndices picked(const Tensor& x, const Tensor& x1, int64_t d, const Tensor& idx, bool keepdim) {
  ValuesIndices r{gather(x1, d, idx), idx};
  if (!keepdim || x.dim() == 0) {
    r.values = r.values.squeeze(d);
    r.indices = r.indices.squeeze(d);
  }
  return r;
}
}  // namespace

ValuesIndices kthvalue(const Tensor& x, int64_t k, int64_t dim, bool keepdim) {
  KILN_CHECK(x.defined(), "kthvalue: input is undefined");
  const Tensor x1 = x.dim() == 0 ? x.reshape({1}) : x;
  const int64_t d = wrap_dim(dim, x1.dim(), "kthvalue");
  KILN_CHECK(k >= 1 && k <= x1.size(d), "kthvalue: k = ", k, " is out of range for dim ", d, " of size ",
             x1.size(d), " (input ", describe(x), "; expected 1 <= k <= the size)");
  const Tensor idx = topk(x1, k, d, false).second.narrow(d, k - 1, 1);  // the k smallest, NaN last
  return picked(x, x1, d, idx, keepdim);
}

ValuesIndices median(const Tensor& x, int64_t dim, bool keepdim) {
  KILN_CHECK(x.defined(), "median: input is undefined");
  const Tensor x1 = x.dim() == 0 ? x.reshape({1}) : x;
  const int64_t d = wrap_dim(dim, x1.dim(), "median");
  const int64_t n = x1.size(d);
  KILN_CHECK(n > 0, "median: dim ", d, " of input ", describe(x), " is empty");
  Tensor idx = topk(x1, (n - 1) / 2 + 1, d, false).second.narrow(d, (n - 1) / 2, 1);  // the lower median
  if (x.is_floating_point()) {  // a row with NaN gives NaN, at its first NaN (PyTorch's)
    NoGradGuard ng;
    const ValuesIndices nan = max(isnan(x1.detach()).to(DType::uint8), d, true);
    idx = where(gt(nan.values, 0.0), nan.indices, idx);
  }
  return picked(x, x1, d, idx, keepdim);
}

Tensor median(const Tensor& x) {
  KILN_CHECK(x.defined(), "median: input is undefined");
  KILN_CHECK(x.numel() > 0, "median: input ", describe(x), " is empty");
  return median(x.reshape({x.numel()}), 0).values;
}

namespace {

/// quantile and nanquantile, PyTorch's quantile_compute in tensor ops: the ranks
/// q * (count - 1) in x's dtype per row (count: the row's length, or its non-NaN entries
/// when ignore_nan), a row that gives NaN (any NaN; all NaN when ignoring them) reads its
/// last sorted entry (NaN).
Tensor quantile_impl(const char* op, const Tensor& x, const Tensor& q, std::optional<int64_t> dim, bool keepdim,
                     QuantileInterpolation interpolation, bool ignore_nan) {
  KILN_CHECK(x.defined() && q.defined(), op, ": input or q is undefined");
  KILN_CHECK(x.dtype() == DType::float32 || x.dtype() == DType::float64, op, ": expected a float32 or float64 input, "
             "got ", describe(x));
  KILN_CHECK(q.dim() <= 1 && q.dtype() == x.dtype(), op, ": q must be a 0-D or 1-D tensor of the input's dtype, got ",
             describe(q), " for input ", describe(x));
  check_same_device(op, {x, q});
  // q is read on the host (its range is checked, as PyTorch's check does with a sync)
  for (double v : q.detach().to(Device::cpu()).to(DType::float64).contiguous().to_vector<double>())
    KILN_CHECK(v >= 0 && v <= 1, op, ": q must be in [0, 1], got ", v);
  // the reduced dim last: (..., n), sorted with NaN last
  Tensor y = dim ? x.dim() == 0 ? x.reshape({1}) : x : x.reshape({x.numel()});
  const int64_t d = dim ? wrap_dim(*dim, y.dim(), op) : 0;
  const int64_t n = y.size(d);
  KILN_CHECK(n > 0, op, ": the reduced dim of input ", describe(x), " is empty");
  y = movedim(y, d, -1);
  const Tensor sorted = sort(y, -1).first;
  const int64_t Q = q.numel();
  Tensor ranks, nan_row;
  {
    NoGradGuard ng;
    const Tensor isn = isnan(sorted.detach());
    const Tensor qv = q.detach().reshape({Q});
    if (ignore_nan) {
      const Tensor count = sum(logical_not(isn), {-1}, true).to(x.dtype());  // (..., 1)
      ranks = mul(qv, sub(count, 1.0));
      nan_row = all(isn, {-1}, true);
    } else {
      ranks = mul(qv, double(n - 1));
      nan_row = any(isn, {-1}, true);
    }
    Shape rows = sorted.shape();
    rows.back() = Q;
    ranks = where(nan_row, full({}, double(n - 1), {.dtype = x.dtype(), .device = x.device()}), ranks.expand(rows));
    switch (interpolation) {
      case QuantileInterpolation::lower: ranks = floor(ranks); break;
      case QuantileInterpolation::higher: ranks = ceil(ranks); break;
      case QuantileInterpolation::nearest: ranks = round(ranks); break;  // half to even, as torch.round
      default: break;
    }
  }
  const Tensor below = floor(ranks).to(DType::int64);
  Tensor out = gather(sorted, -1, below);
  if (interpolation == QuantileInterpolation::linear || interpolation == QuantileInterpolation::midpoint) {
    const Tensor weights = interpolation == QuantileInterpolation::midpoint ? full_like(ranks, 0.5)
                                                                              : sub(ranks, floor(ranks));
    out = lerp(out, gather(sorted, -1, ceil(ranks).to(DType::int64)), weights);
  }
  // (..., Q) -> (Q, ...) for a 1-D q, (...) for a 0-D one; keepdim puts back size-1 dims
  out = q.dim() == 0 ? out.squeeze(-1) : movedim(out, -1, 0);
  if (keepdim) {
    const int64_t lead = q.dim() == 0 ? 0 : 1;
    if (dim) {
      out = out.unsqueeze(lead + (x.dim() == 0 ? 0 : d));
      if (x.dim() == 0) out = out.squeeze(lead);
    } else {
      Shape sh;
      if (lead) sh.push_back(Q);
      for (int64_t e = 0; e < x.dim(); ++e) sh.push_back(1);
      out = out.reshape(sh);
    }
  }
  return out;
}

Tensor scalar_q(const Tensor& x, double q) {
  KILN_CHECK(x.defined(), "quantile: input is undefined");
  return scalar_tensor(q, {.dtype = x.dtype(), .device = x.device()});
}

}  // namespace

Tensor quantile(const Tensor& x, const Tensor& q, std::optional<int64_t> dim, bool keepdim,
                QuantileInterpolation interpolation) {
  return quantile_impl("quantile", x, q, dim, keepdim, interpolation, false);
}
Tensor quantile(const Tensor& x, double q, std::optional<int64_t> dim, bool keepdim,
                QuantileInterpolation interpolation) {
  return quantile_impl("quantile", x, scalar_q(x, q), dim, keepdim, interpolation, false);
}
Tensor nanquantile(const Tensor& x, const Tensor& q, std::optional<int64_t> dim, bool keepdim,
                   QuantileInterpolation interpolation) {
  return quantile_impl("nanquantile", x, q, dim, keepdim, interpolation, true);
}
Tensor nanquantile(const Tensor& x, double q, std::optional<int64_t> dim, bool keepdim,
                   QuantileInterpolation interpolation) {
  return quantile_impl("nanquantile", x, scalar_q(x, q), dim, keepdim, interpolation, true);
}

ValuesIndices nanmedian(const Tensor& x, int64_t dim, bool keepdim) {
  KILN_CHECK(x.defined(), "nanmedian: input is undefined");
  if (!x.is_floating_point()) return median(x, dim, keepdim);
  const Tensor x1 = x.dim() == 0 ? x.reshape({1}) : x;
  const int64_t d = wrap_dim(dim, x1.dim(), "nanmedian");
  KILN_CHECK(x1.size(d) > 0, "nanmedian: dim ", d, " of input ", describe(x), " is empty");
  Tensor idx;
  {
    NoGradGuard ng;
    // entry (count - 1) / 2 of the sorted row (NaN last); an all-NaN row takes entry 0 (NaN)
    const Tensor order = argsort(x1.detach(), d);
    const Tensor count = sum(logical_not(isnan(x1.detach())), {d}, true);
    const Tensor k = floor_divide(sub(count, 1), 2.0).to(DType::int64);
    idx = gather(order, d, where(lt(k, 0.0), full({}, 0.0, {.dtype = DType::int64, .device = x.device()}), k));
  }
  return picked(x, x1, d, idx, keepdim);
}

Tensor nanmedian(const Tensor& x) {
  KILN_CHECK(x.defined() && x.numel() > 0, "nanmedian: input is undefined or empty");
  return nanmedian(x.reshape({x.numel()}), 0).values;
}

ValuesIndices mode(const Tensor& x, int64_t dim, bool keepdim) {
  KILN_CHECK(x.defined(), "mode: input is undefined");
  const Tensor x1 = x.dim() == 0 ? x.reshape({1}) : x;
  const int64_t d = wrap_dim(dim, x1.dim(), "mode");
  const int64_t n = x1.size(d);
  KILN_CHECK(n > 0, "mode: dim ", d, " of input ", describe(x), " is empty");
  Tensor idx;
  {
    NoGradGuard ng;
    // per row on the host: the longest run of equal sorted values (the smallest value on a
    // tie, NaNs one value), at its last position in the input
    const Tensor rows = movedim(x1.detach(), d, -1).contiguous();
    const Tensor order = argsort(rows, -1).to(Device::cpu()).contiguous();
    const Tensor vals = rows.to(Device::cpu()).to(x.is_floating_point() ? DType::float64 : DType::int64);
    const int64_t R = rows.numel() / n;
    std::vector<int64_t> out(static_cast<size_t>(R));
    const int64_t* o = order.data<int64_t>();
    auto scan = [&](const auto* v) {
      for (int64_t r = 0; r < R; ++r) {
        const auto* row = v + r * n;
        const int64_t* ord = o + r * n;
        auto same = [&](int64_t a, int64_t b) { return row[a] == row[b] || (row[a] != row[a] && row[b] != row[b]); };
        int64_t best = -1, best_len = 0, start = 0;
        for (int64_t k = 1; k <= n; ++k)
          if (k == n || !same(ord[k], ord[start])) {
            if (k - start > best_len) {
              best_len = k - start;
              best = start;
            }
            start = k;
          }
        int64_t last = ord[best];
        for (int64_t k = best; k < best + best_len; ++k) last = std::max(last, ord[k]);
        out[size_t(r)] = last;
      }
    };
    if (x.is_floating_point()) scan(vals.data<double>());
    else scan(vals.data<int64_t>());
    Shape is = rows.shape();
    is.back() = 1;
    idx = movedim(from_vector(out, is, {.dtype = DType::int64}).to(x.device()), -1, d);
  }
  return picked(x, x1, d, idx, keepdim);
}

Tensor multinomial(const Tensor& weights, int64_t num_samples, bool replacement) {
  KILN_CHECK(weights.defined(), "multinomial: weights are undefined");
  KILN_CHECK(weights.dim() == 1 || weights.dim() == 2, "multinomial: expected weights (C) or (N, C), got ",
             describe(weights));
  KILN_CHECK(weights.is_floating_point(), "multinomial: expected floating-point weights, got ", describe(weights));
  KILN_CHECK(num_samples > 0, "multinomial: num_samples must be > 0, got ", num_samples);
  KILN_CHECK(weights.size(-1) >= 1, "multinomial: a row of weights needs at least one category, got ",
             describe(weights));
  NoGradGuard ng;
  const Tensor w = weights.detach().reshape({-1, weights.size(-1)}).contiguous().to(Device::cpu()).to(DType::float64);
  const int64_t N = w.size(0), C = w.size(1);
  const double* p = w.data<double>();
  std::vector<double> row_max(static_cast<size_t>(N), 0.0);
  for (int64_t r = 0; r < N; ++r) {
    int64_t nonzero = 0;
    for (int64_t c = 0; c < C; ++c) {
      const double q = p[r * C + c];
      KILN_CHECK(std::isfinite(q) && q >= 0, "multinomial: weights must be finite and >= 0; row ", r, " has ", q,
                 " at category ", c);
      row_max[size_t(r)] = std::max(row_max[size_t(r)], q);
      nonzero += q > 0;
    }
    KILN_CHECK(nonzero > 0, "multinomial: row ", r, " of the weights sums to zero");
    KILN_CHECK(replacement || num_samples <= nonzero, "multinomial: cannot draw ", num_samples, " samples without "
               "replacement from row ", r, ", which has ", nonzero, " non-zero weight(s)");
  }
  Tensor out = Tensor::empty({N, num_samples}, DType::int64);
  int64_t* o = out.data<int64_t>();
  const RngState rs = rng_reserve(uint64_t(N * num_samples));  // one Philox block per draw
  std::vector<double> row(static_cast<size_t>(C));
  for (int64_t r = 0; r < N; ++r) {
    // divided by the row's largest weight, so that the sum cannot overflow (1e308 x 3)
    for (int64_t c = 0; c < C; ++c) row[size_t(c)] = p[r * C + c] / row_max[size_t(r)];
    double total = 0;
    for (int64_t s = 0; s < num_samples; ++s) {
      // without replacement the total is summed afresh over the weights left: subtracting a
      // spent weight from it loses the small ones ({1, 1e-17, 3e-17} left a total of 0)
      if (s == 0 || !replacement) total = std::accumulate(row.begin(), row.end(), 0.0);
      const Philox4 b = philox4x32(rs.offset + uint64_t(r * num_samples + s), 0, rs.seed);
      const double target = uint_to_uniform_double(b.x[0], b.x[1]) * total;
      double acc = 0;
      int64_t pick = -1;
      for (int64_t c = 0; c < C; ++c) {  // the first category whose running sum passes target
        if (row[size_t(c)] <= 0) continue;
        acc += row[size_t(c)];
        pick = c;
        if (acc > target) break;
      }
      o[r * num_samples + s] = pick;
      if (!replacement) row[size_t(pick)] = 0;  // this category is spent
    }
  }
  if (weights.dim() == 1) out = out.reshape({num_samples});
  return out.to(weights.device());
}

}  // namespace kiln
