// Joining, splitting and indexing: cat, stack, split/chunk (views), index_select and
// gather (checks, output allocation, the call through dispatch (ops/cpu/shape.cpp) and
// the backward lambdas: narrow / select of the gradient, index_add, scatter-add); pad,
// one_hot, tril/triu, flip, roll and repeat composed of them.
#include "kiln/ops/shape_ops.h"
#include <algorithm>
#include <sstream>
#include "kiln/core/autograd.h"
#include "kiln/core/checked_math.h"
#include "kiln/core/cuda.h"
#include "kiln/ops/kernels/shape.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/helpers.h"
#include "kiln/ops/reduce.h"

namespace kiln {

namespace {

DType compute_dtype(const Tensor& x) { return x.is_cpu() ? cpu_compute_dtype(x.dtype()) : x.dtype(); }
Tensor as_compute(const Tensor& t, DType dt) { return t.to(dt).contiguous(); }
Tensor cast_back(const Tensor& t, DType d) { return (t.defined() && t.dtype() != d) ? t.to(d) : t; }

std::string list_shapes(const std::vector<Tensor>& ts) {
  std::ostringstream os;
  for (size_t i = 0; i < ts.size(); ++i) os << (i ? ", " : "") << shape_str(ts[i].shape());
  return os.str();
}

// Common checks of cat/stack: non-empty, defined, one device; returns the promoted dtype.
DType check_list(const char* op, const std::vector<Tensor>& ts) {
  KILN_CHECK(!ts.empty(), op, ": expected a non-empty list of tensors");
  DType dt = DType::bool_;
  for (size_t i = 0; i < ts.size(); ++i) {
    KILN_CHECK(ts[i].defined(), op, ": tensor ", i, " of the list is undefined");
    KILN_CHECK(ts[i].device() == ts[0].device(), op, ": all tensors must be on one device, got ", describe(ts[0]),
               " and ", describe(ts[i]), " (tensor ", i, ")");
    dt = i == 0 ? ts[i].dtype() : promote_types(dt, ts[i].dtype());
  }
  return dt;
}

// Copies the (outer, inner[i]) blocks of the inputs side by side into out.
void run_cat(Op op, const std::vector<Tensor>& conv, const std::vector<int64_t>& inner, int64_t outer, Tensor& out) {
  std::vector<Tensor> cont(conv.size());
  std::vector<const void*> ptrs(conv.size());
  for (size_t i = 0; i < conv.size(); ++i) {
    cont[i] = conv[i].contiguous();
    ptrs[i] = cont[i].raw_data();
  }
  kernel<CatKernels>(op, out.device())
      ->forward(out.element_size(), ptrs.data(), inner.data(), int64_t(conv.size()), out.raw_data(), outer);
}

// Indices as a contiguous int64 tensor with every value in [0, size): checked here on the
// CPU, on the device for a GPU tensor (core/cuda.h: checked_values).
Tensor checked_index(const Tensor& index, int64_t size, int64_t dim, const char* op, const Tensor& x) {
  KILN_CHECK(index.dtype() == DType::int64 || index.dtype() == DType::int32, op,
             ": index must be int64 or int32, got ", describe(index));
  Tensor i64 = index.to(DType::int64).contiguous();
  if (!i64.is_cpu())  // checked on the GPU, reported at the next host read (no wait here)
    return cuda::checked_values(i64, size, std::nullopt, 0, {op, "index", "entries along the indexed dim"});
  const int64_t* p = i64.data<int64_t>();
  for (int64_t i = 0; i < i64.numel(); ++i)
    KILN_CHECK(p[i] >= 0 && p[i] < size, op, ": index ", p[i], " is out of range for dim ", dim, " of size ", size,
               " (input shape ", shape_str(x.shape()), ", index shape ", shape_str(index.shape()), ")");
  return i64;
}

}  // namespace

Tensor cat(const std::vector<Tensor>& ts, int64_t dim) {
  const DType dt = check_list("cat", ts);
  // PyTorch skips 1-D tensors of shape [0] beside others (the `acc = cat({acc, x})` idiom,
  // starting from an empty acc): they take part in the dtype promotion, add nothing (and
  // their shape is not checked) and get an empty gradient
  auto empty_1d = [](const Tensor& t) { return t.dim() == 1 && t.size(0) == 0; };
  std::vector<bool> skipped(ts.size(), false);
  if (!std::all_of(ts.begin(), ts.end(), empty_1d))
    for (size_t i = 0; i < ts.size(); ++i) skipped[i] = empty_1d(ts[i]);
  const Tensor& first = ts[size_t(std::find(skipped.begin(), skipped.end(), false) - skipped.begin())];
  const int64_t nd = first.dim();
  KILN_CHECK(nd > 0, "cat: zero-dimensional tensors cannot be concatenated (shapes ", list_shapes(ts), ")");
  const int64_t d = wrap_dim(dim, nd, "cat");
  bool ok = true;
  for (size_t i = 0; i < ts.size(); ++i) {
    if (skipped[i]) continue;
    ok = ok && ts[i].dim() == nd;
    for (int64_t e = 0; ok && e < nd; ++e) ok = e == d || ts[i].size(e) == first.size(e);
  }
  KILN_CHECK(ok, "cat: tensors must have the same shape except in dim ", d, ", got shapes ", list_shapes(ts));
  std::vector<Tensor> conv(ts.size());
  for (size_t i = 0; i < ts.size(); ++i) conv[i] = ts[i].to(dt);  // differentiable dtype promotion
  const Shape& s0 = first.shape();
  int64_t outer = 1, rest = 1, total = 0;
  for (int64_t e = 0; e < d; ++e) outer *= s0[e];
  for (int64_t e = d + 1; e < nd; ++e) rest *= s0[e];
  std::vector<int64_t> inner(ts.size()), sizes(ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    sizes[i] = skipped[i] ? 0 : ts[i].size(d);
    inner[i] = sizes[i] * rest;  // a skipped tensor: no elements to copy
    total = checked_add(total, sizes[i], "cat", ts[i].shape());
  }
  Shape oshape = s0;
  oshape[d] = total;
  Tensor out = Tensor::empty(oshape, dt, first.device());
  {
    NoGradGuard ng;
    run_cat(Op::cat, conv, inner, outer, out);
  }
  return twice_differentiable(record(out, "cat", conv, [d, sizes, skipped](const Tensor& g,
                                                                          const std::vector<bool>& needs) {
    std::vector<Tensor> gs(sizes.size());
    int64_t off = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (needs[i]) gs[i] = skipped[i] ? zeros({0}, {.dtype = g.dtype(), .device = g.device()}) : g.narrow(d, off, sizes[i]);
      off += sizes[i];
    }
    return gs;
  }));
}

Tensor stack(const std::vector<Tensor>& ts, int64_t dim) {
  const DType dt = check_list("stack", ts);
  const Shape& s0 = ts[0].shape();
  for (const Tensor& t : ts)
    KILN_CHECK(t.shape() == s0, "stack: all tensors must have the same shape, got shapes ", list_shapes(ts));
  const int64_t nd = int64_t(s0.size());
  const int64_t d = wrap_dim(dim, nd + 1, "stack");
  std::vector<Tensor> conv(ts.size());
  for (size_t i = 0; i < ts.size(); ++i) conv[i] = ts[i].to(dt);
  int64_t outer = 1, inner1 = 1;
  for (int64_t e = 0; e < d; ++e) outer *= s0[e];
  for (int64_t e = d; e < nd; ++e) inner1 *= s0[e];
  std::vector<int64_t> inner(ts.size(), inner1);
  Shape oshape = s0;
  oshape.insert(oshape.begin() + d, int64_t(ts.size()));
  Tensor out = Tensor::empty(oshape, dt, ts[0].device());
  {
    NoGradGuard ng;
    run_cat(Op::stack, conv, inner, outer, out);
  }
  const size_t n = ts.size();
  return twice_differentiable(record(out, "stack", conv, [d, n](const Tensor& g, const std::vector<bool>& needs) {
    std::vector<Tensor> gs(n);
    for (size_t i = 0; i < n; ++i)
      if (needs[i]) gs[i] = g.select(d, int64_t(i));
    return gs;
  }));
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  KILN_CHECK(x.defined(), "split: input is undefined");
  KILN_CHECK(x.dim() >= 1, "split: cannot split a zero-dimensional tensor");
  const int64_t d = wrap_dim(dim, x.dim(), "split");
  const int64_t size = x.size(d);
  KILN_CHECK(split_size > 0 || (split_size == 0 && size == 0), "split: split_size must be positive, got ",
             split_size, " for dim ", d, " of input shape ", shape_str(x.shape()));
  std::vector<Tensor> out;
  if (size == 0) {
    out.push_back(x.narrow(d, 0, 0));
    return out;
  }
  for (int64_t off = 0; off < size; off += split_size) out.push_back(x.narrow(d, off, std::min(split_size, size - off)));
  return out;
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  KILN_CHECK(x.defined(), "split: input is undefined");
  KILN_CHECK(x.dim() >= 1, "split: cannot split a zero-dimensional tensor");
  const int64_t d = wrap_dim(dim, x.dim(), "split");
  int64_t total = 0;
  bool ok = true;
  for (int64_t s : sizes) {
    ok = ok && s >= 0 && s <= x.size(d) - total;  // never past the dim: no overflow
    if (ok) total += s;
  }
  KILN_CHECK(ok && total == x.size(d), "split: sizes ", shape_str(sizes), " must be non-negative and sum to ",
             x.size(d), " (dim ", d, " of input shape ", shape_str(x.shape()), ")");
  std::vector<Tensor> out;
  int64_t off = 0;
  for (int64_t s : sizes) {
    out.push_back(x.narrow(d, off, s));
    off += s;
  }
  return out;
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  KILN_CHECK(x.defined(), "chunk: input is undefined");
  KILN_CHECK(x.dim() >= 1, "chunk: cannot chunk a zero-dimensional tensor");
  KILN_CHECK(chunks > 0, "chunk: number of chunks must be positive, got ", chunks, " (input shape ",
             shape_str(x.shape()), ")");
  const int64_t d = wrap_dim(dim, x.dim(), "chunk");
  const int64_t size = x.size(d);
  if (size == 0) return split(x, std::vector<int64_t>(size_t(chunks), 0), d);  // like PyTorch: chunks empty pieces
  return split(x, (size + chunks - 1) / chunks, d);
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  const char* op = "index_select";
  KILN_CHECK(x.defined() && index.defined(), "index_select: input or index is undefined");
  KILN_CHECK(index.dim() <= 1, "index_select: index must be 1-D, got shape ", shape_str(index.shape()),
             " (input shape ", shape_str(x.shape()), ")");
  check_same_device(op, {x, index});
  KILN_CHECK(x.dim() >= 1, "index_select: input must have at least one dim, got a zero-dimensional tensor");
  const int64_t d = wrap_dim(dim, x.dim(), op);
  const Shape& xs = x.shape();
  Tensor idx = checked_index(index, xs[d], d, op, x);
  int64_t outer = 1, inner = 1;
  for (int64_t e = 0; e < d; ++e) outer *= xs[e];
  for (int64_t e = d + 1; e < x.dim(); ++e) inner *= xs[e];
  const int64_t S = xs[d], n = idx.numel();
  Shape oshape = xs;
  oshape[d] = n;
  Tensor out = Tensor::empty(oshape, x.dtype(), x.device());
  {
    NoGradGuard ng;
    Tensor xc = x.contiguous();
    kernel<IndexSelectKernels>(Op::index_select, x.device())
        ->forward(x.element_size(), xc.raw_data(), idx.data<int64_t>(), out.raw_data(), outer, S, n, inner);
  }
  if (!x.is_floating_point()) return out;
  const DType xdt = x.dtype(), dt = compute_dtype(x);
  Tensor idx_d = idx.detach();
  return record(out, op, {x}, {idx_d}, [=](const Tensor& g, const std::vector<bool>&) -> std::vector<Tensor> {
    Tensor gc = as_compute(g, dt);
    Tensor dx = zeros(xs, {.dtype = dt, .device = gc.device()});
    kernel<IndexSelectKernels>(Op::index_select, gc.device())
        ->backward(dt, gc.raw_data(), idx_d.data<int64_t>(), dx.raw_data(), outer, S, n, inner);
    return {cast_back(dx, xdt)};
  });
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  const char* op = "gather";
  KILN_CHECK(x.defined() && index.defined(), "gather: input or index is undefined");
  check_same_device(op, {x, index});
  // a 0-dim input or index counts as 1-D (PyTorch's ensure_nonempty_dim); the result has the index's shape
  if ((x.dim() == 0 || index.dim() == 0) && x.dim() <= 1 && index.dim() <= 1) {
    wrap_dim(dim, 1, op);
    return gather(x.reshape({x.numel()}), 0, index.reshape({index.numel()})).reshape(index.shape());
  }
  const int64_t nd = x.dim();
  bool ok = index.dim() == nd;
  const int64_t d = wrap_dim(dim, nd, op);
  for (int64_t e = 0; ok && e < nd; ++e) ok = e == d || index.size(e) <= x.size(e);
  KILN_CHECK(ok, "gather: index must have as many dims as the input and size <= the input's in every dim except ",
             d, ", got input shape ", shape_str(x.shape()), " and index shape ", shape_str(index.shape()));
  Tensor idx = checked_index(index, x.size(d), d, op, x);
  const Shape ishape = index.shape();
  Tensor out = Tensor::empty(ishape, x.dtype(), x.device());
  {
    NoGradGuard ng;
    kernel<GatherKernels>(Op::gather, x.device())
        ->forward(x.element_size(), x.raw_data(), idx.data<int64_t>(), out.raw_data(), nd, ishape.data(),
                  x.strides().data(), idx.strides().data(), out.strides().data(), d);
  }
  if (!x.is_floating_point()) return out;
  // the scatter-add sums in float32 for 16-bit inputs on every device (rounded once at the end)
  const DType xdt = x.dtype(), dt = cpu_compute_dtype(x.dtype());
  const Shape xs = x.shape();
  Tensor idx_d = idx.detach();
  return record(out, op, {x}, {idx_d}, [=](const Tensor& g, const std::vector<bool>&) -> std::vector<Tensor> {
    Tensor gc = as_compute(g, dt);
    Tensor dx = zeros(xs, {.dtype = dt, .device = gc.device()});
    kernel<GatherKernels>(Op::gather, gc.device())
        ->backward(dt, gc.raw_data(), idx_d.data<int64_t>(), dx.raw_data(), nd, ishape.data(), gc.strides().data(),
                   idx_d.strides().data(), dx.strides().data(), d);
    return {cast_back(dx, xdt)};
  });
}

// ---------------------------------------------------------------- scatter, index_add and friends
//
// Out of place, as torch.scatter / Tensor.index_add: the result is a fresh copy of x (in
// the compute dtype: float32 for 16-bit floats on the CPU) that the kernel writes into.

namespace {

/// A fresh contiguous copy of x's data in dtype dt (detached).
Tensor fresh_copy(const Tensor& x, DType dt) {
  NoGradGuard ng;
  return dt == x.dtype() ? x.detach().clone() : x.detach().to(dt);
}

/// PyTorch's checks of scatter / scatter_add: an index with as many dims as x (and src),
/// no larger than src anywhere and than x off dim; returns the wrapped dim.
int64_t check_scatter(const char* op, const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  KILN_CHECK(x.defined() && index.defined(), op, ": input or index is undefined");
  check_same_device(op, {x, index});
  if (src.defined()) {
    check_same_device(op, {x, src});
    KILN_CHECK(src.dtype() == x.dtype(), op, ": src must have the input's dtype, got ", describe(x), " and ",
               describe(src));
  }
  const int64_t d = wrap_dim(dim, std::max<int64_t>(x.dim(), 1), op);
  bool ok = index.dim() == x.dim() && (!src.defined() || src.dim() == x.dim());
  for (int64_t e = 0; ok && e < index.dim(); ++e)
    ok = (e == d || index.size(e) <= x.size(e)) && (!src.defined() || index.size(e) <= src.size(e));
  KILN_CHECK(ok, op, ": index must have as many dims as the input", src.defined() ? " and src" : "",
             ", and be no larger than ", src.defined() ? "src in every dim and " : "", "the input in every dim but ",
             d, ", got input ", describe(x), ", index ", describe(index), src.defined() ? ", src " : "",
             src.defined() ? describe(src) : "");
  return d;
}

/// The gradient of scatter's source: g gathered at the index, zero beyond the index's extent.
Tensor source_grad(const Tensor& g, int64_t d, const Tensor& idx, const Shape& src_shape) {
  Tensor gs = gather(g, d, idx);
  if (gs.shape() == src_shape) return gs;
  std::vector<int64_t> pads;
  for (int64_t e = gs.dim() - 1; e >= 0; --e) pads.insert(pads.end(), {0, src_shape[size_t(e)] - gs.size(e)});
  return pad(gs, pads);
}

/// out = x with src written (accumulate: added) at index along d (a filled value comes as a
/// src of the index's shape that needs no gradient).
Tensor scatter_impl(const char* op, const Tensor& x, int64_t d, const Tensor& index, const Tensor& src,
                    bool accumulate) {
  const Tensor idx = checked_index(index, x.dim() == 0 ? 1 : x.size(d), d, op, x);
  const DType xdt = x.dtype(), dt = accumulate ? compute_dtype(x) : xdt;
  Tensor out = fresh_copy(x, dt);
  if (idx.numel() > 0) {
    NoGradGuard ng;
    const Tensor s = src.to(dt);
    const Tensor xo = x.dim() == 0 ? out.reshape({1}) : out, so = x.dim() == 0 ? s.reshape({1}) : s;
    const Tensor io = x.dim() == 0 ? idx.reshape({1}) : idx;
    const int64_t nd = xo.dim();
    const auto* k = kernel<GatherKernels>(Op::gather, x.device());
    if (accumulate)
      k->backward(dt, so.raw_data(), io.data<int64_t>(), xo.raw_data(), nd, io.shape().data(), so.strides().data(),
                  io.strides().data(), xo.strides().data(), d);
    else
      k->scatter(xo.element_size(), so.raw_data(), io.data<int64_t>(), xo.raw_data(), nd, io.shape().data(),
                 so.strides().data(), io.strides().data(), xo.strides().data(), d);
  }
  out = cast_back(out, xdt);
  if (!x.is_floating_point()) return out;
  const Tensor idx_d = idx.detach();
  const Shape ss = src.shape();
  const bool src_grad = src.requires_grad();
  return record(out, op, {x, src}, {idx_d}, [=](const Tensor& g, const std::vector<bool>&) -> std::vector<Tensor> {
    // accumulate: x's gradient passes through; copy: zero where x was overwritten
    Tensor gx = accumulate ? g : scatter(g, d, idx_d, 0.0);
    return {gx, src_grad ? source_grad(g, d, idx_d, ss) : Tensor()};
  });
}

/// A 1-D index along d, expanded to `shape` (its entries along d, repeated elsewhere).
Tensor expand_index(const char* op, const Tensor& index, int64_t d, Shape shape, const Tensor& x) {
  KILN_CHECK(index.defined() && index.dim() <= 1, op, ": index must be 0-D or 1-D, got ",
             index.defined() ? describe(index) : "undefined", " (input ", describe(x), ")");
  const int64_t n = index.numel();
  if (shape.empty()) return index.reshape({});
  Shape v(shape.size(), 1);
  v[size_t(d)] = n;
  shape[size_t(d)] = n;
  return index.reshape(v).expand(shape);
}

}  // namespace

Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  KILN_CHECK(src.defined(), "scatter: src is undefined");
  const int64_t d = check_scatter("scatter", x, dim, index, src);
  return scatter_impl("scatter", x, d, index, src, false);
}

Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, double value) {
  const int64_t d = check_scatter("scatter", x, dim, index, Tensor());
  return scatter_impl("scatter", x, d, index, full(index.shape(), value, {.dtype = x.dtype(), .device = x.device()}),
                      false);
}

Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  KILN_CHECK(src.defined(), "scatter_add: src is undefined");
  const int64_t d = check_scatter("scatter_add", x, dim, index, src);
  return scatter_impl("scatter_add", x, d, index, src, true);
}

Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source, double alpha) {
  const char* op = "index_add";
  KILN_CHECK(x.defined() && index.defined() && source.defined(), "index_add: an argument is undefined");
  check_same_device(op, {x, index, source});
  KILN_CHECK(source.dtype() == x.dtype(), "index_add: source must have the input's dtype, got ", describe(x),
             " and ", describe(source));
  KILN_CHECK(index.dim() <= 1, "index_add: index must be 0-D or 1-D, got ", describe(index));
  const Tensor x1 = x.dim() == 0 ? x.reshape({1}) : x, s1 = source.dim() == 0 ? source.reshape({1}) : source;
  const int64_t d = wrap_dim(dim, x1.dim(), op);
  Shape want = x1.shape();
  want[size_t(d)] = index.numel();
  KILN_CHECK(s1.shape() == want, "index_add: source must have the input's shape with ", index.numel(),
             " entries along dim ", d, ", got input ", describe(x), ", index ", describe(index), ", source ",
             describe(source));
  KILN_CHECK(x.is_floating_point() || alpha == std::trunc(alpha), "index_add: alpha ", alpha,
             " must be an integer for an integer input ", describe(x));
  const Tensor idx = checked_index(index.reshape({index.numel()}), x1.size(d), d, op, x);
  const DType xdt = x.dtype(), dt = compute_dtype(x);
  Tensor out = fresh_copy(x1, dt);
  int64_t outer = 1, inner = 1;
  for (int64_t e = 0; e < d; ++e) outer *= x1.size(e);
  for (int64_t e = d + 1; e < x1.dim(); ++e) inner *= x1.size(e);
  {
    NoGradGuard ng;
    Tensor s = s1.to(dt);
    if (alpha != 1.0) s = mul(s, scalar_tensor(alpha, {.dtype = dt, .device = x.device()}));
    s = s.contiguous();
    kernel<IndexSelectKernels>(Op::index_select, x.device())
        ->backward(dt, s.raw_data(), idx.data<int64_t>(), out.raw_data(), outer, x1.size(d), idx.numel(), inner);
  }
  out = cast_back(out, xdt).reshape(x.shape());
  if (!x.is_floating_point()) return out;
  const Tensor idx_d = idx.detach();
  const Shape ss = source.shape();
  return record(out, op, {x, source}, {idx_d}, [=](const Tensor& g, const std::vector<bool>&) -> std::vector<Tensor> {
    Tensor gs = index_select(g.dim() == 0 ? g.reshape({1}) : g, d, idx_d);
    if (alpha != 1.0) gs = mul(gs, alpha);
    return {g, gs.reshape(ss)};
  });
}

Tensor index_copy(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source) {
  KILN_CHECK(x.defined() && source.defined(), "index_copy: an argument is undefined");
  const int64_t d = wrap_dim(dim, std::max<int64_t>(x.dim(), 1), "index_copy");
  Shape want = x.shape();
  if (!want.empty()) want[size_t(d)] = index.defined() ? index.numel() : 0;
  KILN_CHECK(source.shape() == want, "index_copy: source must have the input's shape with ",
             index.defined() ? index.numel() : 0, " entries along dim ", d, ", got input ", describe(x), ", source ",
             describe(source));
  const Tensor ie = expand_index("index_copy", index, d, x.shape(), x);
  check_scatter("index_copy", x, d, ie, source);
  return scatter_impl("index_copy", x, d, ie, source, false);
}

Tensor index_fill(const Tensor& x, int64_t dim, const Tensor& index, double value) {
  KILN_CHECK(x.defined(), "index_fill: input is undefined");
  const int64_t d = wrap_dim(dim, std::max<int64_t>(x.dim(), 1), "index_fill");
  const Tensor ie = expand_index("index_fill", index, d, x.shape(), x);
  check_scatter("index_fill", x, d, ie, Tensor());
  return scatter_impl("index_fill", x, d, ie, full(ie.shape(), value, {.dtype = x.dtype(), .device = x.device()}),
                      false);
}

Tensor nonzero(const Tensor& x) {
  KILN_CHECK(x.defined(), "nonzero: input is undefined");
  // the count decides the output's shape: read back to the host (a sync on a GPU, as PyTorch's)
  const Tensor nz = ne(x.detach(), 0.0).to(Device::cpu()).contiguous();
  const bool* p = nz.data<bool>();
  const int64_t nd = x.dim(), n = x.numel();
  std::vector<int64_t> out;
  Shape pos(size_t(nd), 0);
  for (int64_t i = 0; i < n; ++i) {
    if (p[i]) out.insert(out.end(), pos.begin(), pos.end());
    for (int64_t e = nd - 1; e >= 0 && ++pos[size_t(e)] == x.size(e); --e) pos[size_t(e)] = 0;
  }
  const int64_t rows = nd == 0 ? (n > 0 && p[0] ? 1 : 0) : int64_t(out.size()) / nd;
  return from_vector(out, {rows, nd}, {.dtype = DType::int64}).to(x.device());
}

Tensor masked_select(const Tensor& x, const Tensor& mask) {
  KILN_CHECK(x.defined() && mask.defined(), "masked_select: input or mask is undefined");
  KILN_CHECK(mask.dtype() == DType::bool_, "masked_select: mask must be bool, got ", describe(mask));
  check_same_device("masked_select", {x, mask});
  const Shape s = broadcast_shapes(x.shape(), mask.shape(), "masked_select");
  const int64_t n = shape_numel(s);
  const Tensor at = nonzero(mask.expand(s).reshape({n})).flatten();
  return index_select(x.expand(s).reshape({n}), 0, at);
}

// ---------------------------------------------------------------- pad, one_hot

Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, double value) {
  KILN_CHECK(x.defined(), "pad: input is an undefined tensor");
  KILN_CHECK(pads.size() % 2 == 0 && int64_t(pads.size() / 2) <= x.dim(), "pad: expected an even number of ",
             "amounts, at most 2 per dimension, for input ", describe(x), ", got ", pads.size());
  Tensor y = x;
  for (size_t i = 0; i < pads.size() / 2; ++i) {
    const int64_t d = x.dim() - 1 - int64_t(i), lo = pads[2 * i], hi = pads[2 * i + 1];
    const int64_t n = y.size(d) + lo + hi;
    KILN_CHECK(n >= 0, "pad: padding (", lo, ", ", hi, ") of dim ", d, " of input ", describe(x),
               " would give a negative size ", n);
    if (lo < 0 || hi < 0) {  // crop first
      const int64_t start = lo < 0 ? -lo : 0;
      y = y.narrow(d, start, y.size(d) - start - (hi < 0 ? -hi : 0));
    }
    if (lo <= 0 && hi <= 0) continue;
    std::vector<Tensor> parts;
    auto block = [&](int64_t len) {
      Shape s = y.shape();
      s[size_t(d)] = len;
      return full(s, value, {.dtype = y.dtype(), .device = y.device()});
    };
    if (lo > 0) parts.push_back(block(lo));
    parts.push_back(y);
    if (hi > 0) parts.push_back(block(hi));
    y = cat(parts, d);
  }
  return y;
}

Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, PadMode mode, double value) {
  if (mode == PadMode::constant) return pad(x, pads, value);
  const char* name = mode == PadMode::reflect ? "reflect" : mode == PadMode::replicate ? "replicate" : "circular";
  KILN_CHECK(x.defined(), "pad: input is an undefined tensor");
  KILN_CHECK(value == 0.0, "pad: mode ", name, " takes no fill value, got ", value);
  KILN_CHECK(pads.size() % 2 == 0 && int64_t(pads.size() / 2) <= x.dim(), "pad: expected an even number of ",
             "amounts, at most 2 per dimension, for input ", describe(x), ", got ", pads.size());
  Tensor y = x;
  for (size_t i = 0; i < pads.size() / 2; ++i) {
    const int64_t d = x.dim() - 1 - int64_t(i), lo = pads[2 * i], hi = pads[2 * i + 1];
    if (lo == 0 && hi == 0) continue;
    int64_t n = y.size(d);
    const int64_t m = n + lo + hi;
    KILN_CHECK(m >= 0, "pad: padding (", lo, ", ", hi, ") of dim ", d, " of input ", describe(x),
               " would give a negative size ", m);
    // the source index of each output position j - lo, j in [0, m), as PyTorch: reflect and
    // replicate index the uncropped dim, circular wraps the cropped one
    std::vector<int64_t> src(static_cast<size_t>(m));
    if (mode == PadMode::circular) {
      if (lo < 0 || hi < 0) {
        const int64_t start = lo < 0 ? -lo : 0, len = n - start - (hi < 0 ? -hi : 0);
        KILN_CHECK(len >= 0, "pad: padding (", lo, ", ", hi, ") crops more than dim ", d, " of input ", describe(x));
        y = y.narrow(d, start, len);
        n = len;
      }
      const int64_t l = std::max<int64_t>(lo, 0), h = std::max<int64_t>(hi, 0);
      KILN_CHECK(l <= n && h <= n && (n > 0 || m == 0), "pad: circular padding (", lo, ", ", hi, ") of dim ", d,
                 " would wrap around more than once (size ", n, " after cropping; input ", describe(x), ")");
      for (int64_t j = 0; j < m; ++j) src[size_t(j)] = ((j - l) % n + n) % n;
    } else if (mode == PadMode::reflect) {
      KILN_CHECK(m > 0, "pad: reflect padding (", lo, ", ", hi, ") of dim ", d, " of input ", describe(x),
                 " would leave it empty");
      KILN_CHECK(lo < n && hi < n, "pad: reflect padding (", lo, ", ", hi, ") of dim ", d,
                 " must be less than its size ", n, " (input ", describe(x), ")");
      for (int64_t j = 0; j < m; ++j) {
        const int64_t k = j - lo;
        src[size_t(j)] = k < 0 ? -k : k >= n ? 2 * (n - 1) - k : k;
      }
    } else {
      KILN_CHECK(n > 0 && m > 0, "pad: replicate padding (", lo, ", ", hi, ") of dim ", d, " needs a non-empty dim ",
                 "and leaves none (input ", describe(x), ")");
      for (int64_t j = 0; j < m; ++j) src[size_t(j)] = std::clamp<int64_t>(j - lo, 0, n - 1);
    }
    y = index_select(y, d, from_vector(src).to(x.device()));
  }
  return y;
}

Tensor one_hot(const Tensor& indices, int64_t num_classes) {
  KILN_CHECK(indices.defined() && indices.dtype() == DType::int64, "one_hot: expected int64 class indices, got ",
             describe(indices));
  KILN_CHECK(num_classes >= -1, "one_hot: num_classes must be -1 (from the data) or >= 0, got ", num_classes);
  if (indices.numel() > 0) {
    NoGradGuard ng;
    const int64_t lo = int64_t(min(indices).item()), hi = int64_t(max(indices).item());
    if (num_classes == -1) num_classes = hi + 1;
    KILN_CHECK(lo >= 0 && hi < num_classes, "one_hot: class index ", lo < 0 ? lo : hi, " is out of range for ",
               num_classes, " classes (indices ", describe(indices), ")");
  } else {
    KILN_CHECK(num_classes >= 0, "one_hot: cannot infer num_classes from an empty tensor ", describe(indices));
  }
  const Tensor classes = arange(double(num_classes), {.dtype = DType::int64, .device = indices.device()});
  return eq(indices.unsqueeze(-1), classes).to(DType::int64);
}

namespace {
/// x with the entries off one triangle of its last two dims set to 0 (a masked_fill, so the
/// gradient is zero there too).
Tensor triangle(const char* op, const Tensor& x, int64_t diagonal, bool lower) {
  KILN_CHECK(x.defined() && x.dim() >= 2, op, ": expected an input of at least 2 dims, got ",
             x.defined() ? describe(x) : std::string("an undefined tensor"));
  const int64_t H = x.size(-2), W = x.size(-1);
  const TensorOptions o{.dtype = DType::int64, .device = x.device()};
  const Tensor col_minus_row = sub(arange(double(W), o).reshape({1, W}), arange(double(H), o).reshape({H, 1}));
  return masked_fill(x, lower ? gt(col_minus_row, double(diagonal)) : lt(col_minus_row, double(diagonal)), 0.0);
}
}  // namespace

Tensor tril(const Tensor& x, int64_t diagonal) { return triangle("tril", x, diagonal, true); }
Tensor triu(const Tensor& x, int64_t diagonal) { return triangle("triu", x, diagonal, false); }

Tensor flip(const Tensor& x, const std::vector<int64_t>& dims) {
  KILN_CHECK(x.defined(), "flip: input is an undefined tensor");
  const auto d = dims.empty() ? dims : wrap_dims(dims, x.dim(), "flip");  // none: a copy, as PyTorch
  Tensor y = x;
  for (int64_t e : d) {
    const int64_t n = x.size(e);
    if (n > 1) y = index_select(y, e, arange(double(n - 1), -1.0, -1.0, {.dtype = DType::int64, .device = x.device()}));
  }
  return y.is_same(x) ? x.clone() : y;
}

Tensor roll(const Tensor& x, const std::vector<int64_t>& shifts, const std::vector<int64_t>& dims) {
  KILN_CHECK(x.defined(), "roll: input is an undefined tensor");
  if (dims.empty()) {
    KILN_CHECK(shifts.size() == 1, "roll: without dims, expected one shift (for the flattened input), got ",
               shifts.size());
    return roll(x.reshape({x.numel()}), shifts, {0}).reshape(x.shape());
  }
  KILN_CHECK(shifts.size() == dims.size(), "roll: expected one shift per dim, got ", shifts.size(), " shifts and ",
             dims.size(), " dims");
  Tensor y = x;
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = wrap_dim(dims[i], x.dim(), "roll"), n = x.dim() == 0 ? 1 : x.size(d);
    if (n <= 1) continue;
    const int64_t s = (shifts[i] % n + n) % n;
    if (s != 0) y = cat({y.narrow(d, n - s, s), y.narrow(d, 0, n - s)}, d);
  }
  return y.is_same(x) ? x.clone() : y;
}

Tensor repeat(const Tensor& x, const std::vector<int64_t>& repeats) {
  KILN_CHECK(x.defined(), "repeat: input is an undefined tensor");
  KILN_CHECK(int64_t(repeats.size()) >= x.dim(), "repeat: expected at least as many repeats as the input has dims (",
             x.dim(), "), got ", repeats.size(), " for input ", describe(x));
  const size_t k = repeats.size(), lead = k - size_t(x.dim());
  Shape pairs, tiled, out;  // x as (1, s0, 1, s1, ...) expanded to (r0, s0, r1, s1, ...)
  for (size_t i = 0; i < k; ++i) {
    KILN_CHECK(repeats[i] >= 0, "repeat: repeats must be >= 0, got ", shape_str(repeats));
    const int64_t s = i < lead ? 1 : x.size(int64_t(i - lead));
    pairs.insert(pairs.end(), {1, s});
    tiled.insert(tiled.end(), {repeats[i], s});
    out.push_back(repeats[i] * s);
  }
  return x.reshape(pairs).expand(tiled).reshape(out);
}


// ---------------------------------------------------------------- movedim, unbind, diag, meshgrid, diff

Tensor movedim(const Tensor& x, const std::vector<int64_t>& source, const std::vector<int64_t>& destination) {
  KILN_CHECK(x.defined(), "movedim: input is undefined");
  KILN_CHECK(source.size() == destination.size(), "movedim: source and destination must have the same length, got ",
             source.size(), " and ", destination.size());
  const int64_t n = x.dim();
  auto wrap = [&](int64_t d, const char* what) {
    const int64_t w = d < 0 ? d + n : d;
    KILN_CHECK(w >= 0 && w < n, "movedim: ", what, " dim ", d, " is out of range for ", describe(x));
    return w;
  };
  std::vector<int64_t> perm(size_t(n), -1);
  std::vector<bool> used(size_t(n), false);
  for (size_t i = 0; i < source.size(); ++i) {
    const int64_t s = wrap(source[i], "source"), d = wrap(destination[i], "destination");
    KILN_CHECK(perm[size_t(d)] < 0 && !used[size_t(s)], "movedim: repeated dim in source or destination");
    perm[size_t(d)] = s;
    used[size_t(s)] = true;
  }
  int64_t next = 0;
  for (auto& p : perm) {
    if (p >= 0) continue;
    while (used[size_t(next)]) ++next;
    p = next;
    used[size_t(next)] = true;
  }
  return x.permute(Shape(perm.begin(), perm.end()));
}
Tensor movedim(const Tensor& x, int64_t source, int64_t destination) {
  return movedim(x, std::vector<int64_t>{source}, std::vector<int64_t>{destination});
}

std::vector<Tensor> unbind(const Tensor& x, int64_t dim) {
  KILN_CHECK(x.defined() && x.dim() >= 1, "unbind: expected a tensor of at least one dim, got ",
             x.defined() ? describe(x) : "undefined");
  const int64_t d = dim < 0 ? dim + x.dim() : dim;
  KILN_CHECK(d >= 0 && d < x.dim(), "unbind: dim ", dim, " is out of range for ", describe(x));
  std::vector<Tensor> out;
  for (int64_t i = 0; i < x.size(d); ++i) out.push_back(x.select(d, i));
  return out;
}

Tensor diag(const Tensor& x, int64_t k) {
  KILN_CHECK(x.defined() && (x.dim() == 1 || x.dim() == 2), "diag: expected a 1-D or 2-D tensor, got ",
             x.defined() ? describe(x) : "undefined");
  const int64_t r0 = std::max<int64_t>(0, -k), c0 = std::max<int64_t>(0, k);
  const TensorOptions io{.dtype = DType::int64, .device = x.device()};
  const Tensor zero = zeros({}, {.dtype = x.dtype(), .device = x.device()});
  if (x.dim() == 2) {  // x[r0 + j, c0 + j]: each row's element where column - row == k, summed
    // over the row (a where and a sum: twice differentiable, and a NaN off the diagonal stays out)
    const int64_t n = x.size(0), m = x.size(1);
    const int64_t len = std::max<int64_t>(0, std::min(n - r0, m - c0));
    const Tensor on = eq(sub(arange(double(m), io).unsqueeze(0), arange(double(n), io).unsqueeze(1)), double(k));
    return sum(where(on, x, zero), {1}).narrow(0, std::min(r0, n), len);
  }
  // row i of the (n + |k|) square holds x[i - r0] at column i + k: x padded to a value per
  // row, placed where column - row == k
  const int64_t n = x.size(0), N = n + std::abs(k);
  const Tensor rows = pad(x, {r0, c0});
  const Tensor on = eq(sub(arange(double(N), io).unsqueeze(0), arange(double(N), io).unsqueeze(1)), double(k));
  return where(on, rows.unsqueeze(1), zero);
}

std::vector<Tensor> meshgrid(const std::vector<Tensor>& tensors, MeshIndexing indexing) {
  KILN_CHECK(!tensors.empty(), "meshgrid: expects at least one tensor");
  Shape shape;
  for (const Tensor& t : tensors) {
    KILN_CHECK(t.defined() && t.dim() <= 1, "meshgrid: expects 0-D or 1-D tensors, got ",
               t.defined() ? describe(t) : "undefined");
    shape.push_back(t.numel());
  }
  const bool xy = indexing == MeshIndexing::xy && tensors.size() >= 2;
  if (xy) std::swap(shape[0], shape[1]);
  std::vector<Tensor> out;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const size_t pos = xy && i < 2 ? 1 - i : i;  // the dim tensor i varies along
    Shape view(shape.size(), 1);
    view[pos] = tensors[i].numel();
    out.push_back(tensors[i].reshape(view).expand(shape));
  }
  return out;
}

Tensor diff(const Tensor& x0, int64_t n, int64_t dim, const Tensor& prepend, const Tensor& append) {
  KILN_CHECK(x0.defined() && x0.dim() >= 1, "diff: expected a tensor of at least one dim, got ",
             x0.defined() ? describe(x0) : "undefined");
  KILN_CHECK(n >= 0, "diff: order n must be >= 0, got ", n);
  const int64_t d = dim < 0 ? dim + x0.dim() : dim;
  KILN_CHECK(d >= 0 && d < x0.dim(), "diff: dim ", dim, " is out of range for ", describe(x0));
  std::vector<Tensor> parts;
  if (prepend.defined()) parts.push_back(prepend);
  parts.push_back(x0);
  if (append.defined()) parts.push_back(append);
  Tensor x = parts.size() > 1 ? cat(parts, d) : x0;
  for (int64_t i = 0; i < n && x.size(d) > 0; ++i) {
    const int64_t len = x.size(d) - 1;
    x = x.dtype() == DType::bool_ ? ne(x.narrow(d, 1, len), x.narrow(d, 0, len))  // PyTorch: xor for bool
                                  : sub(x.narrow(d, 1, len), x.narrow(d, 0, len));
  }
  return x;
}
}  // namespace kiln
