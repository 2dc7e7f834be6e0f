// View ops (Tensor methods): new handles over the same Storage with other shape/strides/
// offset, never a copy, each with its backward. reshape copies only when no view exists.
#include <algorithm>
#include <numeric>
#include <optional>
#include "kiln/core/autograd.h"
#include "kiln/core/checked_math.h"
#include "kiln/ops/helpers.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape_ops.h"

namespace kiln {
namespace {

// A new handle over base's storage. Every view's shape passes shape_numel here, so no
// view (expand included) can describe more elements than int64 counts.
Tensor make_view(const char* op, const Tensor& base, Shape shape, Shape strides, int64_t offset) {
  shape_numel(shape, op);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.storage();
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = base.dtype();
  return Tensor(std::move(impl));
}

// Replaces a single -1 by the size that keeps numel; checks the product.
Shape infer_shape(const Shape& shape, int64_t numel, const char* op, const Shape& from) {
  Shape out = shape;
  int64_t known = 1, neg = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      KILN_CHECK(neg < 0, op, ": only one dimension can be -1, got ", shape_str(shape));
      neg = int64_t(i);
    } else {
      KILN_CHECK(out[i] >= 0, op, ": invalid size ", out[i], " in shape ", shape_str(shape),
                 " (expected sizes >= 0, or a single -1)");
      known = checked_mul(known, out[i], op, shape);
    }
  }
  if (neg >= 0) {
    KILN_CHECK(known != 0 && numel % known == 0, op, ": shape ", shape_str(shape), " is invalid for input of shape ",
               shape_str(from), " (", numel, " elements)");
    out[size_t(neg)] = numel / known;
  }
  KILN_CHECK(shape_numel(out, op) == numel, op, ": shape ", shape_str(shape), " is invalid for input of shape ",
             shape_str(from), " (", numel, " elements)");
  return out;
}

// Strides that let (old shape, old strides) be read as new_shape without a copy, if any
// (the algorithm of PyTorch's computeStride: chunks of contiguous old dims).
std::optional<Shape> view_strides(const Shape& old_shape, const Shape& old_strides, const Shape& new_shape) {
  Shape ns(new_shape.size());
  if (old_shape.empty()) {
    std::fill(ns.begin(), ns.end(), 1);
    return ns;
  }
  int64_t numel = shape_numel(old_shape);
  if (numel == 0) return contiguous_strides(new_shape);
  int64_t view_d = int64_t(new_shape.size()) - 1;
  int64_t chunk_base_stride = old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = int64_t(old_shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= old_shape[d];
    if (d == 0 || (old_shape[d - 1] != 1 && old_strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        ns[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = old_strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return ns;
}

// g (in_shape but end - start long in dim d) at [start, end) of dim d of a zero tensor of
// in_shape, by cat: recorded, so slice and select backwards under create_graph are too.
Tensor pad_with_zeros(const Tensor& g, const Shape& in_shape, int64_t d, int64_t start, int64_t end) {
  auto zero_part = [&](int64_t n) {
    Shape s = in_shape;
    s[d] = n;
    return zeros(s, {.dtype = g.dtype(), .device = g.device()});
  };
  std::vector<Tensor> parts;
  if (start > 0) parts.push_back(zero_part(start));
  parts.push_back(g);
  if (end < in_shape[d]) parts.push_back(zero_part(in_shape[d] - end));
  return parts.size() == 1 ? g : cat(parts, d);
}

Tensor reshape_backward_record(Tensor& out, const char* name, const Tensor& in) {
  Shape s = in.shape();
  return twice_differentiable(record(out, name, {in}, [s](const Tensor& g, const std::vector<bool>&) {
    return std::vector<Tensor>{g.reshape(s)};
  }));
}

// A new handle viewing all of `in` as it is (a no-op transpose, expand or squeeze): never `in`
// itself, so that changing the result's requires_grad leaves `in` alone, as in PyTorch.
Tensor alias_of(const char* op, const Tensor& in) {
  Tensor out = make_view(op, in, in.shape(), in.strides(), in.offset());
  return reshape_backward_record(out, op, in);
}

}  // namespace

Tensor Tensor::view(const Shape& shape) const {
  Shape ns = infer_shape(shape, numel(), "view", this->shape());
  auto st = view_strides(this->shape(), strides(), ns);
  KILN_CHECK(st.has_value(), "view: shape ", shape_str(ns), " is not compatible with input of shape ",
             shape_str(this->shape()), " and strides ", shape_str(strides()),
             " (at least one dimension spans across two contiguous subspaces); use reshape instead");
  Tensor out = make_view("view", *this, ns, *st, offset());
  return reshape_backward_record(out, "view", *this);
}

Tensor Tensor::reshape(const Shape& shape) const {
  Shape ns = infer_shape(shape, numel(), "reshape", this->shape());
  auto st = view_strides(this->shape(), strides(), ns);
  if (st) {
    Tensor out = make_view("reshape", *this, ns, *st, offset());
    return reshape_backward_record(out, "reshape", *this);
  }
  return contiguous().view(ns);
}

Tensor Tensor::flatten(int64_t start, int64_t end) const {
  start = wrap_dim(start, dim(), "flatten");
  end = wrap_dim(end, dim(), "flatten");
  if (dim() == 0) return reshape({1});
  KILN_CHECK(start <= end, "flatten: start_dim ", start, " is after end_dim ", end);
  Shape ns(shape().begin(), shape().begin() + start);
  int64_t m = 1;
  for (int64_t d = start; d <= end; ++d) m *= shape()[d];
  ns.push_back(m);
  ns.insert(ns.end(), shape().begin() + end + 1, shape().end());
  return reshape(ns);
}

Tensor Tensor::permute(const Shape& dims) const {
  KILN_CHECK(int64_t(dims.size()) == dim(), "permute: expected ", dim(), " dims for a tensor of shape ",
             shape_str(shape()), ", got ", shape_str(dims));
  Shape ns(dims.size()), st(dims.size()), inv(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = wrap_dim(dims[i], dim(), "permute");
    KILN_CHECK(!seen[d], "permute: dim ", d, " repeated in ", shape_str(dims));
    seen[d] = true;
    ns[i] = shape()[d];
    st[i] = strides()[d];
    inv[d] = int64_t(i);
  }
  Tensor out = make_view("permute", *this, ns, st, offset());
  return twice_differentiable(record(out, "permute", {*this}, [inv](const Tensor& g, const std::vector<bool>&) {
    return std::vector<Tensor>{g.permute(inv)};
  }));
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  if (dim() < 2) {  // 0-dim (dims 0 and -1) and 1-D: nothing to swap
    wrap_dim(d0, dim(), "transpose");
    wrap_dim(d1, dim(), "transpose");
    return alias_of("transpose", *this);
  }
  d0 = wrap_dim(d0, dim(), "transpose");
  d1 = wrap_dim(d1, dim(), "transpose");
  Shape p(static_cast<size_t>(dim()));
  std::iota(p.begin(), p.end(), 0);
  std::swap(p[d0], p[d1]);
  return permute(p);
}

Tensor Tensor::t() const {
  KILN_CHECK(dim() <= 2, "t: expects a tensor with <= 2 dims, got shape ", shape_str(shape()));
  return transpose(0, dim() < 2 ? 0 : 1);
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  KILN_CHECK(dim() > 0, "slice: cannot slice a 0-dim tensor");
  d = wrap_dim(d, dim(), "slice");
  KILN_CHECK(step > 0, "slice: step must be positive, got ", step);
  int64_t n = shape()[d];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape ns = shape(), st = strides();
  ns[d] = (end - start) / step + ((end - start) % step != 0);
  if (ns[d] > 1) st[d] = checked_mul(strides()[d], step, "slice", shape());  // else any stride reads the same
  const int64_t off = checked_add(offset(), checked_mul(start, strides()[d], "slice", shape()), "slice", shape());
  Tensor out = make_view("slice", *this, ns, st, off);
  Shape in_shape = shape();
  record(out, "slice", {*this}, [in_shape, d, start, end, step](const Tensor& g, const std::vector<bool>&) {
    if (grad_mode_enabled()) {  // create_graph: g between zeros, in recorded ops
      Tensor spread = g;
      if (step > 1) {  // each value followed by step - 1 zeros: [.., m, step, ..] read as [.., m * step, ..]
        Shape zs = g.shape(), fs = g.shape();
        zs.insert(zs.begin() + d + 1, step - 1);
        fs[size_t(d)] = g.size(d) * step;
        spread = cat({g.unsqueeze(d + 1), zeros(zs, {.dtype = g.dtype(), .device = g.device()})}, d + 1)
                     .reshape(fs)
                     .narrow(d, 0, end - start);
      }
      return std::vector<Tensor>{pad_with_zeros(spread, in_shape, d, start, end)};
    }
    Tensor z = zeros(in_shape, {.dtype = g.dtype(), .device = g.device()});
    z.slice(d, start, end, step).copy_(g);
    return std::vector<Tensor>{z};
  });
  return twice_differentiable(out);
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  KILN_CHECK(dim() > 0, "narrow: cannot narrow a 0-dim tensor");
  d = wrap_dim(d, dim(), "narrow");
  int64_t n = shape()[d];
  if (start < 0) start += n;
  KILN_CHECK(start >= 0 && start <= n && length >= 0 && length <= n - start, "narrow: start ", start,
             " + length ", length, " exceeds dim ", d, " of size ", n, " (shape ", shape_str(shape()), ")");
  return slice(d, start, start + length);
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  KILN_CHECK(dim() > 0, "select: cannot select from a 0-dim tensor");
  d = wrap_dim(d, dim(), "select");
  int64_t n = shape()[d];
  KILN_CHECK(index >= -n && index < n, "select: index ", index, " out of range for dim ", d, " of size ", n,
             " (shape ", shape_str(shape()), ")");
  if (index < 0) index += n;
  Shape ns = shape(), st = strides();
  ns.erase(ns.begin() + d);
  st.erase(st.begin() + d);
  const int64_t off = checked_add(offset(), checked_mul(index, strides()[d], "select", shape()), "select", shape());
  Tensor out = make_view("select", *this, ns, st, off);
  Shape in_shape = shape();
  auto backward = [in_shape, d, index](const Tensor& g, const std::vector<bool>&) {
    if (grad_mode_enabled())  // create_graph: g between zeros, recorded
      return std::vector<Tensor>{pad_with_zeros(g.unsqueeze(d), in_shape, d, index, index + 1)};
    Tensor z = zeros(in_shape, {.dtype = g.dtype(), .device = g.device()});
    z.select(d, index).copy_(g);
    return std::vector<Tensor>{z};
  };
  return twice_differentiable(record(out, "select", {*this}, backward));
}

Tensor Tensor::expand(const Shape& shape_in) const {
  KILN_CHECK(shape_in.size() >= size_t(dim()), "expand: target shape ", shape_str(shape_in),
             " has fewer dims than the input shape ", shape_str(shape()));
  size_t lead = shape_in.size() - size_t(dim());
  Shape ns(shape_in.size()), st(shape_in.size(), 0);
  for (size_t i = 0; i < shape_in.size(); ++i) {
    if (i < lead) {
      KILN_CHECK(shape_in[i] >= 0, "expand: new leading dims need explicit sizes, got ", shape_str(shape_in));
      ns[i] = shape_in[i];
      continue;
    }
    int64_t s = shape()[i - lead];
    int64_t t = shape_in[i] == -1 ? s : shape_in[i];
    KILN_CHECK(t >= 0, "expand: invalid size ", shape_in[i], " in target shape ", shape_str(shape_in),
               " (expected sizes >= 0, or -1 to keep a size)");
    KILN_CHECK(s == t || s == 1, "expand: cannot expand shape ", shape_str(shape()), " to ", shape_str(shape_in),
               " (dim ", i, ": ", s, " vs ", t, ")");
    ns[i] = t;
    st[i] = s == t ? strides()[i - lead] : 0;
  }
  if (ns == shape()) return alias_of("expand", *this);
  Tensor out = make_view("expand", *this, ns, st, offset());
  Shape in_shape = shape();
  return twice_differentiable(record(out, "expand", {*this}, [in_shape](const Tensor& g, const std::vector<bool>&) {
    return std::vector<Tensor>{sum_to(g, in_shape)};
  }));
}

Tensor Tensor::squeeze() const {
  Shape ns;
  for (auto s : shape())
    if (s != 1) ns.push_back(s);
  return reshape(ns);
}

Tensor Tensor::squeeze(int64_t d) const {
  d = wrap_dim(d, dim(), "squeeze");
  if (dim() == 0 || shape()[d] != 1) return alias_of("squeeze", *this);
  Shape ns = shape();
  ns.erase(ns.begin() + d);
  return reshape(ns);
}

Tensor Tensor::unsqueeze(int64_t d) const {
  d = wrap_dim(d, dim() + 1, "unsqueeze");
  Shape ns = shape(), st = strides();
  int64_t s = d < dim() ? checked_mul(strides()[d], shape()[d], "unsqueeze", shape()) : 1;
  ns.insert(ns.begin() + d, 1);
  st.insert(st.begin() + d, s);
  Tensor out = make_view("unsqueeze", *this, ns, st, offset());
  return reshape_backward_record(out, "unsqueeze", *this);
}

}  // namespace kiln
