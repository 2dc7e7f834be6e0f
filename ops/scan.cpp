// Products, scans and NaN-aware sums composed of existing ops, so every device runs them and
// autograd differentiates them (twice, where the parts are): prod by pairwise halving,
// cumprod / logcumsumexp / cummax / cummin by a Hillis-Steele scan (log2(n) steps, each one
// op on the whole tensor: step s combines entry i with entry i - s), nansum / nanmean /
// count_nonzero by masking. No division anywhere, so a zero in a product has the exact
// gradient (the product of the others), as PyTorch's.
#include <algorithm>
#include <cmath>
#include "kiln/core/autograd.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/helpers.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape_ops.h"

namespace kiln {

namespace {

void check_defined(const char* op, const Tensor& x) { KILN_CHECK(x.defined(), op, ": input is an undefined tensor"); }

/// dim wrapped into [0, ndim); a 0-dim tensor takes 0 and -1, as PyTorch's.
int64_t checked_dim(const char* op, const Tensor& x, int64_t dim) {
  return wrap_dim(dim, std::max<int64_t>(x.dim(), 1), op);
}

/// Integer and bool inputs multiply in int64, as PyTorch's prod and cumprod.
Tensor widen_int(const Tensor& x) { return x.is_floating_point() ? x : x.to(DType::int64); }

/// The Hillis-Steele inclusive scan of x along d with an associative `combine(earlier, later)`.
template <class F>
Tensor scan(const Tensor& x, int64_t d, const F& combine) {
  Tensor y = x;
  const int64_t n = x.size(d);
  for (int64_t s = 1; s < n; s *= 2)
    y = cat({y.narrow(d, 0, s), combine(y.narrow(d, 0, n - s), y.narrow(d, s, n - s))}, d);
  return y;
}

}  // namespace

Tensor prod(const Tensor& x, const Dims& dims, bool keepdim) {
  check_defined("prod", x);
  const Tensor xw = widen_int(x);
  std::vector<int64_t> d = wrap_dims(dims, std::max<int64_t>(x.dim(), 1), "prod");
  if (x.dim() == 0) d.clear();
  // the reduced dims last, flattened into one of n entries, halved until one is left
  std::vector<int64_t> perm;
  Shape kept, ks = x.shape();
  for (int64_t e = 0; e < x.dim(); ++e)
    if (std::find(d.begin(), d.end(), e) == d.end()) {
      perm.push_back(e);
      kept.push_back(x.size(e));
    }
  int64_t n = 1;
  for (int64_t e : d) {
    perm.push_back(e);
    n *= x.size(e);
    ks[size_t(e)] = 1;
  }
  Shape flat = kept;
  flat.push_back(n);
  Tensor y = xw.permute(perm).reshape(flat);
  if (n == 0) y = ones(Shape(kept.begin(), kept.end()), {.dtype = xw.dtype(), .device = x.device()}).unsqueeze(-1);
  for (int64_t m = std::max<int64_t>(n, 1); m > 1; m = (m + 1) / 2) {
    const int64_t h = m / 2;
    Tensor p = mul(y.narrow(-1, 0, h), y.narrow(-1, h, h));
    y = m % 2 ? cat({p, y.narrow(-1, 2 * h, 1)}, -1) : p;
  }
  y = y.reshape(kept);
  return keepdim ? y.reshape(ks) : y;
}

Tensor cumprod(const Tensor& x, int64_t dim) {
  check_defined("cumprod", x);
  if (x.dim() == 0) return widen_int(x).clone();
  const int64_t d = checked_dim("cumprod", x, dim);
  return scan(widen_int(x), d, [](const Tensor& a, const Tensor& b) { return mul(a, b); });
}

Tensor logcumsumexp(const Tensor& x, int64_t dim) {
  check_defined("logcumsumexp", x);
  KILN_CHECK(x.is_floating_point(), "logcumsumexp: expected a floating input, got ", describe(x));
  if (x.dim() == 0) return x.clone();
  const int64_t d = checked_dim("logcumsumexp", x, dim);
  return scan(x, d, [](const Tensor& a, const Tensor& b) { return logaddexp(a, b); });
}

namespace {

/// cummax (largest) / cummin: the scan runs on (value, index) pairs without autograd; a
/// later entry replaces an earlier one when it is >= (<=) or NaN, PyTorch's rule, so ties go
/// to the later index and a NaN, once seen, stays. The values are then gathered from x.
ValuesIndices cum_extreme(const char* op, const Tensor& x, int64_t dim, bool largest) {
  check_defined(op, x);
  if (x.dim() == 0) return {x.clone(), zeros({}, {.dtype = DType::int64, .device = x.device()})};
  const int64_t d = checked_dim(op, x, dim);
  Tensor v = x.detach(), idx;
  {
    NoGradGuard ng;
    const int64_t n = x.size(d);
    Shape is(size_t(x.dim()), 1);
    is[size_t(d)] = n;
    idx = arange(double(n), {.dtype = DType::int64, .device = x.device()}).reshape(is).expand(x.shape());
    for (int64_t s = 1; s < n; s *= 2) {
      const Tensor pv = v.narrow(d, 0, n - s), cv = v.narrow(d, s, n - s);
      Tensor later = largest ? ge(cv, pv) : le(cv, pv);
      if (x.is_floating_point()) later = logical_or(later, isnan(cv));
      v = cat({v.narrow(d, 0, s), where(later, cv, pv)}, d);
      idx = cat({idx.narrow(d, 0, s), where(later, idx.narrow(d, s, n - s), idx.narrow(d, 0, n - s))}, d);
    }
  }
  return {x.is_floating_point() ? gather(x, d, idx) : v, idx};
}

}  // namespace

ValuesIndices cummax(const Tensor& x, int64_t dim) { return cum_extreme("cummax", x, dim, true); }
ValuesIndices cummin(const Tensor& x, int64_t dim) { return cum_extreme("cummin", x, dim, false); }

Tensor nansum(const Tensor& x, const Dims& dims, bool keepdim) {
  check_defined("nansum", x);
  return sum(x.is_floating_point() ? where(isnan(x), 0.0, x) : x, dims, keepdim);
}

Tensor nanmean(const Tensor& x, const Dims& dims, bool keepdim) {
  check_defined("nanmean", x);
  KILN_CHECK(x.is_floating_point(), "nanmean: expected a floating input, got ", describe(x));
  const Tensor n = sum(logical_not(isnan(x)), dims, keepdim).to(x.dtype());
  return div(nansum(x, dims, keepdim), n);  // all NaN: 0 / 0 = NaN, as PyTorch
}

Tensor count_nonzero(const Tensor& x, const Dims& dims) {
  check_defined("count_nonzero", x);
  return sum(ne(x.detach(), 0.0), dims);
}

}  // namespace kiln
