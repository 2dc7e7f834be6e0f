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
#include "kiln/ops/helpers.h"
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
