// Shared op helpers: dims, broadcasting, device/dtype checks (sum_to lives in reduce.cpp).
#include "kiln/ops/helpers.h"
#include <algorithm>
#include <sstream>

namespace kiln {

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  int64_t n = ndim == 0 ? 1 : ndim;  // a 0-dim tensor accepts dim 0 / -1 like PyTorch
  KILN_CHECK(dim >= -n && dim < n, op, ": dim ", dim, " is out of range for a tensor with ", ndim,
             " dims (expected ", -n, " <= dim < ", n, ")");
  return dim < 0 ? dim + n : dim;
}

std::vector<int64_t> wrap_dims(const std::vector<int64_t>& dims, int64_t ndim, const char* op) {
  std::vector<int64_t> out;
  if (dims.empty()) {
    for (int64_t d = 0; d < ndim; ++d) out.push_back(d);
    return out;
  }
  for (auto d : dims) out.push_back(wrap_dim(d, ndim, op));
  std::sort(out.begin(), out.end());
  KILN_CHECK(std::adjacent_find(out.begin(), out.end()) == out.end(), op, ": a dim appears twice in ",
             shape_str(dims));
  if (ndim == 0) out.clear();
  return out;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    KILN_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", shape_str(a), " and ", shape_str(b),
               " cannot be broadcast together (dim ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  shape_numel(out, op);  // the result's element count must fit in int64
  return out;
}

Shape broadcast_strides(const Tensor& t, const Shape& shape, const char* op) {
  const Shape& s = t.shape();
  KILN_CHECK(s.size() <= shape.size(), op, ": cannot broadcast shape ", shape_str(s), " to ", shape_str(shape));
  size_t lead = shape.size() - s.size();
  Shape st(shape.size(), 0);
  for (size_t i = 0; i < s.size(); ++i) {
    KILN_CHECK(s[i] == shape[lead + i] || s[i] == 1, op, ": cannot broadcast shape ", shape_str(s), " to ",
               shape_str(shape));
    st[lead + i] = s[i] == 1 ? 0 : t.strides()[i];
  }
  return st;
}

std::string describe(const Tensor& t) {
  if (!t.defined()) return "undefined";
  std::ostringstream os;
  os << dtype_name(t.dtype()) << shape_str(t.shape()) << " on " << t.device().str();
  return os.str();
}

DType result_type(const Tensor& a, const Tensor& b) {
  auto tier = [](const Tensor& t) { return t.impl().wrapped_number ? 0 : t.dim() == 0 ? 1 : 2; };
  const int ta = tier(a), tb = tier(b);
  if (ta != tb) {
    auto category = [](DType d) { return d == DType::bool_ ? 0 : is_floating(d) ? 2 : 1; };
    const Tensor& high = ta > tb ? a : b;
    const Tensor& low = ta > tb ? b : a;
    if (category(low.dtype()) <= category(high.dtype())) return high.dtype();
  }
  return promote_types(a.dtype(), b.dtype());
}

void check_same_device(const char* op, std::initializer_list<Tensor> ts) {
  const Tensor* first = nullptr;
  for (const auto& t : ts) {
    if (!t.defined()) continue;
    if (!first) { first = &t; continue; }
    if (t.device() != first->device()) {
      std::string list;
      for (const auto& u : ts) list += (list.empty() ? "" : ", ") + describe(u);
      KILN_FAIL(op, ": expected all tensors on one device, got ", list);
    }
  }
}

void check_floating(const char* op, const Tensor& t, const char* what) {
  KILN_CHECK(t.defined(), op, ": ", what, " is an undefined tensor");
  KILN_CHECK(t.is_floating_point(), op, ": expected a floating-point ", what, ", got ", describe(t));
}

}  // namespace kiln
