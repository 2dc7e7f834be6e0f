// torch.linalg's functions that are compositions of other ops: vecdot, norm, cond, vander,
// tensorinv and tensorsolve, following PyTorch's own compositions (BatchLinearAlgebra.cpp,
// LinearAlgebra.cpp) so the numbers and the gradients are theirs.
#include <cmath>
#include <limits>
#include <numeric>
#include "kiln/core/autograd.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/helpers.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/linalg_host.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape_ops.h"

namespace kiln::linalg {
namespace {
using namespace host;

// x's dims wrapped into [0, x.dim()) in their given order (wrap_dims would sort them).
std::vector<int64_t> norm_dims(const char* op, const Tensor& x, std::vector<int64_t> dims) {
  for (int64_t& d : dims) d = wrap_dim(d, x.dim(), op);
  return dims;
}

// A matrix norm over two dims of x: those dims moved last, then matrix_norm.
template <class Ord>
Tensor matrix_norm_over(const Tensor& x, const Ord& ord, const std::vector<int64_t>& dims, bool keepdim) {
  const std::vector<int64_t> d = norm_dims("linalg.norm", x, dims);
  KILN_CHECK(d[0] != d[1], "linalg.norm: the two dims must differ, got ", d[0], " and ", d[1]);
  Tensor r = matrix_norm(movedim(x, d, {x.dim() - 2, x.dim() - 1}), ord, false);
  if (keepdim) {
    const int64_t lo = std::min(d[0], d[1]), hi = std::max(d[0], d[1]);
    r = r.unsqueeze(lo).unsqueeze(hi);
  }
  return r;
}

// norm(A) norm(A^-1) for square A, inf where A is singular (PyTorch's _linalg_cond_helper).
template <class Ord>
Tensor cond_by_inverse(const Tensor& A, const Ord& ord, const std::string& what) {
  check_square(("linalg.cond(ord=" + what + ")").c_str(), A);
  Tensor singular;
  {
    NoGradGuard ng;
    singular = ne(lu_factor_ex(A.detach()).info, 0.0).unsqueeze(-1).unsqueeze(-1);
  }
  const Tensor safe = where(singular, eye(A.size(-1), -1, {.dtype = A.dtype(), .device = A.device()}), A);
  const Tensor r = mul(matrix_norm(A, ord), matrix_norm(inv(safe), ord));
  return where(singular.squeeze(-1).squeeze(-1), std::numeric_limits<double>::infinity(), r);
}

}  // namespace

Tensor vecdot(const Tensor& x, const Tensor& y, int64_t dim) {
  KILN_CHECK(x.defined() && y.defined() && x.is_floating_point() && x.dtype() == y.dtype(),
             "linalg.vecdot: expected two floating tensors of one dtype, got ", x.defined() ? describe(x) : "undefined",
             " and ", y.defined() ? describe(y) : "undefined");
  return sum(mul(x, y), {dim});
}

Tensor norm(const Tensor& x, std::optional<double> ord, const std::vector<int64_t>& dims, bool keepdim) {
  KILN_CHECK(x.defined() && x.is_floating_point(), "linalg.norm: expected a floating tensor, got ",
             x.defined() ? describe(x) : "undefined");
  KILN_CHECK(dims.size() <= 2, "linalg.norm: if dim is given it must have 1 or 2 entries, got ", dims.size());
  KILN_CHECK(!ord || !dims.empty() || x.dim() == 1 || x.dim() == 2, "linalg.norm: with ord and no dim the input must ",
             "be 1-D or 2-D, got ", describe(x));
  if (ord && (dims.size() == 2 || (dims.empty() && x.dim() == 2)))
    return matrix_norm_over(x, *ord, dims.empty() ? std::vector<int64_t>{0, 1} : dims, keepdim);
  return vector_norm(x, ord.value_or(2.0), norm_dims("linalg.norm", x, dims), keepdim);
}

Tensor norm(const Tensor& x, const std::string& ord, const std::vector<int64_t>& dims, bool keepdim) {
  KILN_CHECK(x.defined() && x.is_floating_point(), "linalg.norm: expected a floating tensor, got ",
             x.defined() ? describe(x) : "undefined");
  KILN_CHECK(dims.size() == 2 || (dims.empty() && x.dim() == 2), "linalg.norm: ord='", ord,
             "' is a matrix norm: give two dims or a 2-D input, got ", describe(x));
  return matrix_norm_over(x, ord, dims.empty() ? std::vector<int64_t>{0, 1} : dims, keepdim);
}

Tensor cond(const Tensor& A, std::optional<double> ord) {
  check_matrix("linalg.cond", A);
  const double p = ord.value_or(2.0);
  if (std::fabs(p) == 2.0) {  // the singular values, descending
    const Tensor S = svdvals(A);
    const int64_t k = S.size(-1);
    KILN_CHECK(k > 0, "linalg.cond: empty matrices have no condition number, got ", describe(A));
    const Tensor s_max = S.narrow(-1, 0, 1), s_min = S.narrow(-1, k - 1, 1);
    return (p == -2.0 ? div(s_min, s_max) : div(s_max, s_min)).squeeze(-1);
  }
  const double inf = std::numeric_limits<double>::infinity();
  KILN_CHECK(p == 1 || p == -1 || p == inf || p == -inf, "linalg.cond: ord must be one of 2, -2, 1, -1, inf, -inf, "
             "'fro' or 'nuc', got ", p);
  return cond_by_inverse(A, p, std::isinf(p) ? (p > 0 ? "inf" : "-inf") : std::to_string(int(p)));
}

Tensor cond(const Tensor& A, const std::string& ord) {
  check_matrix("linalg.cond", A);
  KILN_CHECK(ord == "fro" || ord == "nuc", "linalg.cond: ord must be one of 2, -2, 1, -1, inf, -inf, 'fro' or 'nuc', "
             "got '", ord, "'");
  if (ord == "nuc") {  // PyTorch's definition, straight from the singular values: sum(s) sum(1/s)
    check_square("linalg.cond(ord=nuc)", A);
    const Tensor S = svdvals(A);
    return mul(sum(S, {-1}), sum(reciprocal(S), {-1}));
  }
  return cond_by_inverse(A, ord, ord);
}

Tensor vander(const Tensor& x, std::optional<int64_t> N) {
  KILN_CHECK(x.defined() && (x.is_floating_point() || x.dtype() == DType::int64 || x.dtype() == DType::int32),
             "linalg.vander: expected a floating or integer tensor, got ", x.defined() ? describe(x) : "undefined");
  const Tensor x1 = x.dim() == 0 ? x.unsqueeze(-1) : x;
  const int64_t n = N.value_or(x1.size(-1));
  KILN_CHECK(n > 1, "linalg.vander: N must be greater than 1, got ", n);
  Shape s = x1.shape();
  s.push_back(n - 1);
  const Tensor powers = cumprod(x1.unsqueeze(-1).expand(s), -1);  // x, x^2, ..., x^(N-1)
  s.back() = 1;
  return cat({ones(s, {.dtype = x.dtype(), .device = x.device()}), powers}, -1);
}

Tensor tensorinv(const Tensor& A, int64_t ind) {
  KILN_CHECK(A.defined() && A.is_floating_point(), "linalg.tensorinv: expected a floating tensor, got ",
             A.defined() ? describe(A) : "undefined");
  KILN_CHECK(ind > 0 && ind <= A.dim(), "linalg.tensorinv: expected ind in [1, ", A.dim(), "], got ", ind);
  const Shape head(A.shape().begin(), A.shape().begin() + ind), tail(A.shape().begin() + ind, A.shape().end());
  const int64_t rows = count(head), cols = count(tail);
  KILN_CHECK(rows == cols, "linalg.tensorinv: expected prod(A.shape[ind:]) == prod(A.shape[:ind]), got ", cols,
             " != ", rows, " for ", describe(A), " and ind ", ind);
  Shape out = tail;
  out.insert(out.end(), head.begin(), head.end());
  return inv(A.reshape({rows, cols})).reshape(out);
}

Tensor tensorsolve(const Tensor& A, const Tensor& B, const std::vector<int64_t>& dims) {
  KILN_CHECK(A.defined() && B.defined() && A.is_floating_point() && B.is_floating_point(),
             "linalg.tensorsolve: expected floating tensors, got ", A.defined() ? describe(A) : "undefined", " and ",
             B.defined() ? describe(B) : "undefined");
  Tensor a = A;
  if (!dims.empty()) {
    std::vector<int64_t> dest(dims.size());
    std::iota(dest.begin(), dest.end(), A.dim() - int64_t(dims.size()));
    a = movedim(a, norm_dims("linalg.tensorsolve", A, dims), dest);
  }
  KILN_CHECK(B.dim() <= a.dim(), "linalg.tensorsolve: B ", describe(B), " has more dims than A ", describe(A));
  const Shape result(a.shape().begin() + B.dim(), a.shape().end());
  const int64_t n = count(result), nb = B.numel();
  KILN_CHECK(n == nb, "linalg.tensorsolve: expected prod(A.shape[B.ndim:]) == prod(B.shape), got ", n, " != ", nb,
             " for A ", describe(A), " and B ", describe(B));
  return solve(a.reshape({n, n}), B.reshape({n})).reshape(result);
}

}  // namespace kiln::linalg
