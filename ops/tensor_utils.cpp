// PyTorch's smaller tensor utilities (see tensor_utils.h): compositions of kiln's ops, with
// the data-dependent searches and counts done on a host copy (their outputs go back to the
// input's device).
#include "kiln/ops/tensor_utils.h"
#include <algorithm>
#include <cmath>
#include <numeric>
#include "kiln/core/autograd.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/helpers.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape_ops.h"

namespace kiln {

namespace {

/// x's entries on the host as doubles (or int64 for integer dtypes, through the callback's type).
template <class F>
decltype(auto) with_host_values(const Tensor& x, F&& f) {
  const Tensor h = x.detach().to(Device::cpu()).contiguous();
  if (x.is_floating_point()) return f(h.to(DType::float64).to_vector<double>());
  return f(h.to(DType::int64).to_vector<int64_t>());
}

std::string undefined_or(const Tensor& t) { return t.defined() ? describe(t) : std::string("undefined"); }

}  // namespace

// ---------------------------------------------------------------- repetition

namespace {
/// x's entries along dim (flattened without one) repeated r[i] times each (one count: all).
Tensor repeat_counts(const Tensor& x, const std::vector<int64_t>& r, std::optional<int64_t> dim) {
  KILN_CHECK(x.defined(), "repeat_interleave: input is undefined");
  const Tensor y = dim ? (x.dim() == 0 ? x.reshape({1}) : x) : x.reshape({x.numel()});
  const int64_t d = dim ? wrap_dim(*dim, y.dim(), "repeat_interleave") : 0;
  const int64_t n = y.size(d);
  KILN_CHECK(r.size() == 1 || int64_t(r.size()) == n, "repeat_interleave: repeats has ", r.size(),
             " entries but dim ", d, " of input ", describe(x), " has ", n);
  std::vector<int64_t> idx;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t c = r[r.size() == 1 ? 0 : size_t(i)];
    KILN_CHECK(c >= 0, "repeat_interleave: repeats must be >= 0, got ", c);
    idx.insert(idx.end(), size_t(c), i);
  }
  return index_select(y, d, from_vector(idx, {int64_t(idx.size())}, {.dtype = DType::int64, .device = x.device()}));
}
}  // namespace

Tensor repeat_interleave(const Tensor& x, int64_t repeats, std::optional<int64_t> dim) {
  KILN_CHECK(repeats >= 0, "repeat_interleave: repeats must be >= 0, got ", repeats);
  return repeat_counts(x, {repeats}, dim);
}

Tensor repeat_interleave(const Tensor& x, const Tensor& repeats, std::optional<int64_t> dim) {
  KILN_CHECK(repeats.defined() && !repeats.is_floating_point() && repeats.dtype() != DType::bool_ &&
                 repeats.dim() <= 1,
             "repeat_interleave: repeats must be a 0-D or 1-D integer tensor, got ",
             repeats.defined() ? describe(repeats) : "undefined");
  return repeat_counts(x, repeats.detach().to(Device::cpu()).to(DType::int64).contiguous().to_vector<int64_t>(), dim);
}

Tensor tile(const Tensor& x, const std::vector<int64_t>& dims) {
  KILN_CHECK(x.defined(), "tile: input is undefined");
  std::vector<int64_t> reps = dims;
  while (int64_t(reps.size()) < x.dim()) reps.insert(reps.begin(), 1);
  return repeat(x, reps);
}

// ---------------------------------------------------------------- searching and counting

Tensor searchsorted(const Tensor& sorted, const Tensor& values, bool right) {
  const char* op = "searchsorted";
  KILN_CHECK(sorted.defined() && values.defined(), "searchsorted: sorted or values is undefined");
  KILN_CHECK(sorted.dim() >= 1, "searchsorted: sorted must have at least one dim, got ", describe(sorted));
  check_same_device(op, {sorted, values});
  bool ok = sorted.dim() == 1 || sorted.dim() == values.dim();
  for (int64_t e = 0; ok && sorted.dim() > 1 && e < sorted.dim() - 1; ++e) ok = sorted.size(e) == values.size(e);
  KILN_CHECK(ok, "searchsorted: sorted must be 1-D or have the values' leading dims, got sorted ", describe(sorted),
             " and values ", describe(values));
  const int64_t S = sorted.size(-1), V = values.dim() == 0 ? 1 : values.size(-1);
  const bool ints = !sorted.is_floating_point() && !values.is_floating_point();
  std::vector<int64_t> out(size_t(values.numel()));
  // PyTorch's binary searches: lower bound keeps going right while !(mid >= v), upper while !(mid > v)
  auto run = [&](const auto& bd, const auto& vs) {
    for (size_t i = 0; i < vs.size(); ++i) {
      const size_t row = sorted.dim() == 1 ? 0 : i / size_t(V);
      int64_t lo = 0, hi = S;
      while (lo < hi) {
        const int64_t mid = lo + ((hi - lo) >> 1);
        const auto m = bd[row * size_t(S) + size_t(mid)];
        if (right ? !(m > vs[i]) : !(m >= vs[i])) lo = mid + 1;
        else hi = mid;
      }
      out[i] = lo;
    }
  };
  auto host = [](const Tensor& t, DType dt) { return t.detach().to(Device::cpu()).to(dt).contiguous(); };
  if (ints) run(host(sorted, DType::int64).to_vector<int64_t>(), host(values, DType::int64).to_vector<int64_t>());
  else run(host(sorted, DType::float64).to_vector<double>(), host(values, DType::float64).to_vector<double>());
  return from_vector(out, values.shape(), {.dtype = DType::int64, .device = values.device()});
}

Tensor bucketize(const Tensor& x, const Tensor& boundaries, bool right) {
  KILN_CHECK(boundaries.defined() && boundaries.dim() == 1, "bucketize: boundaries must be 1-D, got ",
             undefined_or(boundaries));
  return searchsorted(boundaries, x, right);
}

Tensor bincount(const Tensor& x, const Tensor& weights, int64_t minlength) {
  KILN_CHECK(x.defined() && x.dim() == 1 && !x.is_floating_point() && x.dtype() != DType::bool_,
             "bincount: expected a 1-D integer tensor, got ", undefined_or(x));
  KILN_CHECK(minlength >= 0, "bincount: minlength must be >= 0, got ", minlength);
  KILN_CHECK(!weights.defined() || (weights.dim() == 1 && weights.size(0) == x.size(0)),
             "bincount: weights must be 1-D with the input's length ", x.size(0), ", got ", undefined_or(weights));
  const std::vector<int64_t> v = x.detach().to(Device::cpu()).to(DType::int64).contiguous().to_vector<int64_t>();
  int64_t n = minlength;
  for (int64_t e : v) {
    KILN_CHECK(e >= 0, "bincount: entries must be non-negative, got ", e);
    n = std::max(n, e + 1);
  }
  const TensorOptions io{.dtype = DType::int64, .device = x.device()};
  const Tensor idx = from_vector(v, {int64_t(v.size())}, io);
  if (!weights.defined()) return index_add(zeros({n}, io), 0, idx, ones({int64_t(v.size())}, io));
  check_same_device("bincount", {x, weights});
  // PyTorch's result dtype: float32 for float32 weights, float64 for any other
  const DType dt = weights.dtype() == DType::float32 ? DType::float32 : DType::float64;
  NoGradGuard ng;  // not differentiable, as PyTorch's
  return index_add(zeros({n}, {.dtype = dt, .device = x.device()}), 0, idx, weights.detach().to(dt));
}

Tensor histc(const Tensor& x, int64_t bins, double min, double max) {
  KILN_CHECK(x.defined() && x.is_floating_point(), "histc: expected a floating input, got ", undefined_or(x));
  KILN_CHECK(bins > 0, "histc: bins must be > 0, got ", bins);
  KILN_CHECK(!(min > max), "histc: max (", max, ") must be >= min (", min, ")");
  const std::vector<double> v = x.detach().to(Device::cpu()).to(DType::float64).contiguous().to_vector<double>();
  double lo = min, hi = max;
  if (lo == hi && !v.empty()) {  // the data's range
    lo = INFINITY;
    hi = -INFINITY;
    for (double e : v)
      if (!std::isnan(e)) {
        lo = std::min(lo, e);
        hi = std::max(hi, e);
      }
  }
  if (lo == hi) {  // PyTorch widens an empty range
    lo -= 1;
    hi += 1;
  }
  KILN_CHECK(std::isfinite(lo) && std::isfinite(hi), "histc: range of [", lo, ", ", hi, "] is not finite");
  // PyTorch's edges: linspace(lo, hi, bins + 1) in x's dtype, then a local search around
  // the linear guess (so an entry on an edge lands where the edges say)
  const Tensor edges_t = linspace(lo, hi, bins + 1, {.dtype = x.dtype()}).to(DType::float64);
  const std::vector<double> edges = edges_t.to_vector<double>();
  const double elo = edges.front(), ehi = edges.back();
  std::vector<double> h(size_t(bins), 0.0);
  for (double e : v) {
    if (!(e >= elo && e <= ehi)) continue;  // outside, or NaN
    int64_t pos = int64_t((e - elo) * double(bins) / (ehi - elo));
    const int64_t pmin = std::max<int64_t>(0, pos - 1), pmax = std::min<int64_t>(pos + 2, bins + 1);
    pos = int64_t(std::upper_bound(edges.begin() + pmin, edges.begin() + pmax, e) - edges.begin()) - 1;
    if (pos == bins) pos -= 1;
    h[size_t(pos)] += 1;
  }
  return from_vector(h, {bins}, {.dtype = DType::float64}).to(x.dtype()).to(x.device());
}

namespace {

/// unique / unique_consecutive on a host copy: positions of the kept entries (into the
/// flattened x), the inverse and the counts.
template <class T>
void unique_host(const std::vector<T>& v, bool consecutive, std::vector<int64_t>& keep, std::vector<int64_t>& inverse,
                 std::vector<int64_t>& counts) {
  std::vector<int64_t> order(v.size());
  std::iota(order.begin(), order.end(), int64_t(0));
  if (!consecutive)  // NaN last, each NaN its own entry (NaN != NaN), as PyTorch's sort-based unique
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      const T x = v[size_t(a)], y = v[size_t(b)];
      if (x != x || y != y) return y != y && x == x;
      return x < y;
    });
  inverse.assign(v.size(), 0);
  for (size_t k = 0; k < order.size(); ++k) {
    const int64_t i = order[k];
    if (k == 0 || !(v[size_t(order[k - 1])] == v[size_t(i)])) {
      keep.push_back(i);
      counts.push_back(0);
    }
    ++counts.back();
    inverse[size_t(i)] = int64_t(keep.size()) - 1;
  }
}

std::tuple<Tensor, Tensor, Tensor> unique_impl(const char* op, const Tensor& x, bool consecutive, bool ri, bool rc) {
  KILN_CHECK(x.defined(), op, ": input is undefined");
  std::vector<int64_t> keep, inverse, counts;
  with_host_values(x, [&](const auto& v) { unique_host(v, consecutive, keep, inverse, counts); });
  const TensorOptions io{.dtype = DType::int64, .device = x.device()};
  const Tensor values = index_select(x.detach().reshape({x.numel()}), 0, from_vector(keep, {int64_t(keep.size())}, io));
  return {values, ri ? from_vector(inverse, x.shape(), io) : Tensor(),
          rc ? from_vector(counts, {int64_t(counts.size())}, io) : Tensor()};
}

}  // namespace

std::tuple<Tensor, Tensor, Tensor> unique(const Tensor& x, bool return_inverse, bool return_counts) {
  return unique_impl("unique", x, false, return_inverse, return_counts);
}

std::tuple<Tensor, Tensor, Tensor> unique_consecutive(const Tensor& x, bool return_inverse, bool return_counts) {
  return unique_impl("unique_consecutive", x, true, return_inverse, return_counts);
}

// ---------------------------------------------------------------- indexing

Tensor take_along_dim(const Tensor& x, const Tensor& indices, std::optional<int64_t> dim) {
  KILN_CHECK(x.defined() && indices.defined(), "take_along_dim: input or indices is undefined");
  if (!dim) return gather(x.reshape({x.numel()}), 0, indices.reshape({indices.numel()}));
  KILN_CHECK(x.dim() == indices.dim(), "take_along_dim: input and indices must have the same number of dims, got ",
             describe(x), " and ", describe(indices));
  const int64_t d = wrap_dim(*dim, std::max<int64_t>(x.dim(), 1), "take_along_dim");
  if (x.dim() == 0) return gather(x, 0, indices);
  Shape xs = x.shape(), is = indices.shape();
  xs[size_t(d)] = 1;
  is[size_t(d)] = 1;
  Shape b = broadcast_shapes(xs, is, "take_along_dim");
  Shape bx = b, bi = b;
  bx[size_t(d)] = x.size(d);
  bi[size_t(d)] = indices.size(d);
  return gather(x.expand(bx), d, indices.expand(bi));
}

namespace {
Tensor triangle_indices(int64_t rows, int64_t cols, int64_t offset, TensorOptions o, bool lower) {
  KILN_CHECK(rows >= 0 && cols >= 0, lower ? "tril_indices" : "triu_indices", ": rows and cols must be >= 0, got ",
             rows, " and ", cols);
  KILN_CHECK(o.dtype == DType::int64 || o.dtype == DType::int32, lower ? "tril_indices" : "triu_indices",
             ": dtype must be int64 or int32, got ", dtype_name(o.dtype));
  std::vector<int64_t> r, c;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      if (lower ? j - i <= offset : j - i >= offset) {
        r.push_back(i);
        c.push_back(j);
      }
  r.insert(r.end(), c.begin(), c.end());
  return from_vector(r, {2, int64_t(c.size())}, {.dtype = DType::int64}).to(o.dtype).to(o.device);
}
}  // namespace

Tensor tril_indices(int64_t rows, int64_t cols, int64_t offset, TensorOptions o) {
  return triangle_indices(rows, cols, offset, o, true);
}
Tensor triu_indices(int64_t rows, int64_t cols, int64_t offset, TensorOptions o) {
  return triangle_indices(rows, cols, offset, o, false);
}

// ---------------------------------------------------------------- geometry and statistics

Tensor cross(const Tensor& a, const Tensor& b, int64_t dim) {
  KILN_CHECK(a.defined() && b.defined(), "cross: an operand is undefined");
  const Shape s = broadcast_shapes(a.shape(), b.shape(), "cross");
  const int64_t n = int64_t(s.size()), d = wrap_dim(dim, n, "cross");
  // the dim in each operand (right-aligned with the broadcast shape)
  const int64_t da = d - (n - a.dim()), db = d - (n - b.dim());
  KILN_CHECK(da >= 0 && db >= 0 && a.size(da) == 3 && b.size(db) == 3, "cross: dim ", d,
             " must have size 3 in both operands, got ", describe(a), " and ", describe(b));
  auto at = [&](const Tensor& t, int64_t i) { return t.narrow(&t == &a ? da : db, i, 1); };
  return cat({sub(mul(at(a, 1), at(b, 2)), mul(at(a, 2), at(b, 1))),
              sub(mul(at(a, 2), at(b, 0)), mul(at(a, 0), at(b, 2))),
              sub(mul(at(a, 0), at(b, 1)), mul(at(a, 1), at(b, 0)))},
             d);
}

Tensor cov(const Tensor& x, int64_t correction) {
  KILN_CHECK(x.defined() && x.dim() <= 2, "cov: expected a 0-D, 1-D or 2-D input (variables x observations), got ",
             undefined_or(x));
  KILN_CHECK(correction >= 0, "cov: correction must be >= 0, got ", correction);
  const Tensor v = x.dim() < 2 ? x.reshape({1, x.numel()}) : x;
  const Tensor f = v.is_floating_point() ? v : v.to(DType::float32);
  const int64_t n = f.size(1);
  const Tensor c = sub(f, mean(f, {1}, true));
  // n - correction <= 0 gives inf / NaN, as PyTorch's (which warns)
  Tensor y = div(matmul(c, c.transpose(0, 1)), double(std::max<int64_t>(n - correction, 0)));
  return x.dim() < 2 ? y.reshape({}) : y;
}

Tensor corrcoef(const Tensor& x) {
  const Tensor c = cov(x);
  if (c.dim() == 0) return div(c, c);
  const Tensor sd = sqrt(diag(c));
  return clamp(div(div(c, sd.unsqueeze(1)), sd.unsqueeze(0)), -1.0, 1.0);
}

Tensor rot90(const Tensor& x, int64_t k, const std::vector<int64_t>& dims) {
  KILN_CHECK(x.defined() && x.dim() >= 2, "rot90: expected a tensor with at least 2 dims, got ", undefined_or(x));
  KILN_CHECK(dims.size() == 2, "rot90: dims must name 2 dims, got ", dims.size());
  const int64_t d0 = wrap_dim(dims[0], x.dim(), "rot90"), d1 = wrap_dim(dims[1], x.dim(), "rot90");
  KILN_CHECK(d0 != d1, "rot90: the two dims must differ, got ", dims[0], " and ", dims[1]);
  switch (((k % 4) + 4) % 4) {
    case 1: return flip(x, {d1}).transpose(d0, d1);
    case 2: return flip(x, {d0, d1});
    case 3: return flip(x, {d0}).transpose(d0, d1);
    default: return x.clone();
  }
}

Tensor block_diag(const std::vector<Tensor>& tensors) {
  std::vector<Tensor> m;
  DType dt = DType::bool_;
  int64_t rows = 0, cols = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    KILN_CHECK(t.defined() && t.dim() <= 2, "block_diag: tensor ", i, " must be 0-D, 1-D or 2-D, got ", undefined_or(t));
    KILN_CHECK(t.device() == tensors[0].device(), "block_diag: all tensors must be on one device, got ",
               describe(tensors[0]), " and ", describe(t));
    m.push_back(t.dim() == 2 ? t : t.reshape({1, t.numel()}));
    dt = i == 0 ? t.dtype() : promote_types(dt, t.dtype());
    rows += m.back().size(0);
    cols += m.back().size(1);
  }
  if (m.empty()) return zeros({1, 0});
  std::vector<Tensor> padded;
  int64_t left = 0;
  for (const Tensor& t : m) {  // each block padded to the full width, then stacked
    padded.push_back(pad(t.to(dt), {left, cols - left - t.size(1)}));
    left += t.size(1);
  }
  (void)rows;
  return cat(padded, 0);
}

Tensor cartesian_prod(const std::vector<Tensor>& tensors) {
  KILN_CHECK(!tensors.empty(), "cartesian_prod: expected at least one tensor");
  for (size_t i = 0; i < tensors.size(); ++i)
    KILN_CHECK(tensors[i].defined() && tensors[i].dim() == 1, "cartesian_prod: tensor ", i, " must be 1-D, got ",
               undefined_or(tensors[i]));
  if (tensors.size() == 1) return tensors[0];
  std::vector<Tensor> cols;
  for (const Tensor& g : meshgrid(tensors, MeshIndexing::ij)) cols.push_back(g.reshape({g.numel()}));
  return stack(cols, 1);
}

// ---------------------------------------------------------------- elementwise

Tensor logit(const Tensor& x, std::optional<double> eps) {
  KILN_CHECK(x.defined() && x.is_floating_point(), "logit: expected a floating input, got ", undefined_or(x));
  const Tensor xd = x.detach();
  Tensor out;
  {
    NoGradGuard ng;
    const Tensor z = eps ? clamp(xd, *eps, 1.0 - *eps) : xd;
    out = log(div(z, neg(sub(z, 1.0))));  // 1 - z, exactly
  }
  // PyTorch's gradient: g / (x (1 - x)); with eps 0 outside [eps, 1 - eps] (its ends
  // included, unlike clamp's), without it NaN outside [0, 1]
  return record(out, "logit", {x}, {xd}, [=](const Tensor& g, const std::vector<bool>&) -> std::vector<Tensor> {
    const Tensor d = div(g, mul(xd, neg(sub(xd, 1.0))));
    const double lo = eps ? *eps : 0.0, hi = eps ? 1.0 - *eps : 1.0;
    return {where(logical_or(lt(xd, lo), gt(xd, hi)), eps ? 0.0 : double(NAN), d)};
  });
}

Tensor isclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  KILN_CHECK(a.defined() && b.defined(), "isclose: an operand is undefined");
  KILN_CHECK(a.dtype() == b.dtype(), "isclose: the operands must have one dtype, got ", describe(a), " and ",
             describe(b));
  KILN_CHECK(rtol >= 0 && atol >= 0, "isclose: rtol and atol must be >= 0, got ", rtol, " and ", atol);
  NoGradGuard ng;
  const Tensor ad = a.detach(), bd = b.detach();
  Tensor close = eq(ad, bd);  // equal infinities included
  if (!a.is_floating_point()) {
    const Tensor af = ad.to(DType::float64), bf = bd.to(DType::float64);
    return logical_or(close, le(abs(sub(af, bf)), add(mul(abs(bf), rtol), atol)));
  }
  const Tensor diffs = abs(sub(ad, bd));
  close = logical_or(close, logical_and(isfinite(diffs), le(diffs, add(mul(abs(bd), rtol), atol))));
  if (equal_nan) close = logical_or(close, logical_and(isnan(ad), isnan(bd)));
  return close;
}

Tensor clamp(const Tensor& x, const Tensor& min, const Tensor& max) {
  KILN_CHECK(x.defined() && (min.defined() || max.defined()), "clamp: needs the input and at least one bound");
  Tensor y = x;
  if (min.defined()) y = where(lt(y, min), min, y);
  if (max.defined()) y = where(gt(y, max), max, y);
  return y;
}

namespace {
/// fmax (larger) / fmin: the value from a where it wins, ties or b is NaN; PyTorch's
/// gradients: the winner's, halved between equal operands, a's where both are NaN.
Tensor fextreme(const char* op, const Tensor& a, const Tensor& b, bool larger) {
  KILN_CHECK(a.defined() && b.defined(), op, ": an operand is undefined");
  if (!a.is_floating_point() && !b.is_floating_point()) return larger ? maximum(a, b) : minimum(a, b);
  Tensor ad = a.detach(), bd = b.detach(), out;
  {
    NoGradGuard ng;
    out = where(logical_or(larger ? ge(ad, bd) : le(ad, bd), isnan(bd)), ad, bd);
  }
  const Shape as = a.shape(), bs = b.shape();
  return record(out, op, {a, b}, {ad, bd}, [=](const Tensor& g, const std::vector<bool>&) -> std::vector<Tensor> {
    const Tensor tie = eq(ad, bd), na = isnan(ad), nb = isnan(bd);
    const Tensor a_wins = logical_or(larger ? gt(ad, bd) : lt(ad, bd), nb);
    const Tensor b_wins = logical_or(larger ? gt(bd, ad) : lt(bd, ad), logical_and(na, logical_not(nb)));
    const Tensor half = mul(g, 0.5);
    return {sum_to(where(tie, half, where(a_wins, g, 0.0)), as), sum_to(where(tie, half, where(b_wins, g, 0.0)), bs)};
  });
}
}  // namespace

Tensor fmax(const Tensor& a, const Tensor& b) { return fextreme("fmax", a, b, true); }
Tensor fmin(const Tensor& a, const Tensor& b) { return fextreme("fmin", a, b, false); }

Tensor heaviside(const Tensor& x, const Tensor& values) {
  KILN_CHECK(x.defined() && values.defined(), "heaviside: input or values is undefined");
  KILN_CHECK(x.dtype() == values.dtype(), "heaviside: input and values must have one dtype, got ", describe(x),
             " and ", describe(values));
  NoGradGuard ng;
  const Tensor xd = x.detach();
  return where(eq(xd, 0.0), values.detach(), gt(xd, 0.0).to(x.dtype()));
}

}  // namespace kiln
