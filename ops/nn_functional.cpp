// nn functions: dropout (Philox mask regenerated in the backward), embedding (row gather,
// deterministic scatter-add backward), fused scaled dot-product attention, and normalize and
// the distances (compositions of vector_norm and elementwise ops). Checks,
// allocation, the call through dispatch (ops/cpu/nn.cpp) and the backward lambdas.
#include "kiln/ops/nn_functional.h"
#include "kiln/core/autocast.h"
#include <algorithm>
#include <cmath>
#include <vector>
#include "kiln/core/autograd.h"
#include "kiln/core/cuda.h"
#include "kiln/core/rng.h"
#include "kiln/ops/kernels/nn.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/helpers.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape_ops.h"

namespace kiln {

namespace {

// Kernels run in float32/float64 on the CPU (16-bit floats are upcast); other devices
// take the tensor's own dtype.
DType compute_dtype(const Tensor& x) { return x.is_cpu() ? cpu_compute_dtype(x.dtype()) : x.dtype(); }

/// lse's dtype for kernel dtype dt: float32 for 16-bit kernels (ops/kernels/nn.h).
DType lse_dtype(DType dt) { return dt == DType::bfloat16 || dt == DType::float16 ? DType::float32 : dt; }
Tensor as_compute(const Tensor& t, DType dt) { return t.to(dt).contiguous(); }
Tensor cast_back(const Tensor& t, DType d) { return (t.defined() && t.dtype() != d) ? t.to(d) : t; }

// Indices as a contiguous int64 tensor, every value checked to lie in [0, size): here on
// the CPU, on the device for a GPU tensor (core/cuda.h: checked_values).
Tensor checked_indices(const Tensor& idx, int64_t size, const char* op, const Tensor& table) {
  KILN_CHECK(idx.dtype() == DType::int64 || idx.dtype() == DType::int32, op,
             ": indices must be int64 or int32, got ", describe(idx));
  Tensor i64 = idx.to(DType::int64).contiguous();
  if (!i64.is_cpu())  // checked on the GPU, reported at the next host read (no wait here)
    return cuda::checked_values(i64, size, std::nullopt, 0, {op, "index", "rows of the weight"});
  const int64_t* p = i64.data<int64_t>();
  for (int64_t i = 0; i < i64.numel(); ++i)
    KILN_CHECK(p[i] >= 0 && p[i] < size, op, ": index ", p[i], " is out of range for weight with V = ", size,
               " rows (weight shape ", shape_str(table.shape()), ", indices shape ", shape_str(idx.shape()), ")");
  return i64;
}

}  // namespace

Tensor dropout(const Tensor& x, double p, bool training) {
  KILN_CHECK(x.defined(), "dropout: input is undefined");
  KILN_CHECK(p >= 0.0 && p <= 1.0, "dropout: probability p must be in [0, 1], got ", p, " (input shape ",
             shape_str(x.shape()), ")");
  if (!training || p == 0.0) return x;
  check_floating("dropout", x);
  const DType dt = compute_dtype(x), xdt = x.dtype();
  const int64_t n = x.numel();
  const float pf = float(p);
  const double scale = p < 1.0 ? 1.0 / (1.0 - p) : 0.0;  // p == 1 drops everything
  const RngState rs = rng_reserve(uint64_t((n + 3) / 4));
  Tensor out;
  {
    NoGradGuard ng;
    Tensor xc = as_compute(x, dt);
    out = Tensor::empty(x.shape(), dt, x.device());
    kernel<DropoutKernels>(Op::dropout, x.device())->apply(dt, xc.raw_data(), out.raw_data(), n, pf, scale, rs.seed,
                                                           rs.offset);
    out = cast_back(out, xdt);
  }
  Shape shape = x.shape();
  return record(out, "dropout", {x}, [=](const Tensor& g, const std::vector<bool>&) -> std::vector<Tensor> {
    Tensor gc = as_compute(g, dt);
    Tensor dx = Tensor::empty(shape, dt, gc.device());
    // the same mask, regenerated from (seed, offset)
    kernel<DropoutKernels>(Op::dropout, gc.device())->apply(dt, gc.raw_data(), dx.raw_data(), n, pf, scale, rs.seed,
                                                            rs.offset);
    return {cast_back(dx, xdt)};
  });
}

Tensor embedding(const Tensor& indices, const Tensor& weight, std::optional<int64_t> padding) {
  const char* op = "embedding";
  KILN_CHECK(indices.defined() && weight.defined(), "embedding: indices or weight is undefined");
  KILN_CHECK(weight.dim() == 2, "embedding: weight must be 2-D (V, D), got shape ", shape_str(weight.shape()));
  check_same_device(op, {indices, weight});
  const int64_t V = weight.size(0), D = weight.size(1);
  KILN_CHECK(!padding || (*padding >= -V && *padding < V), "embedding: padding_idx ", padding.value_or(0),
             " is out of range for weight of shape ", shape_str(weight.shape()), " (expected -V <= padding_idx < V)");
  const int64_t padding_idx = !padding ? -1 : *padding < 0 ? *padding + V : *padding;  // -1: none
  Tensor idx, out;
  {
    NoGradGuard ng;
    idx = checked_indices(indices, V, op, weight);
    Tensor wc = weight.contiguous();
    Shape oshape = indices.shape();
    oshape.push_back(D);
    out = Tensor::empty(oshape, weight.dtype(), weight.device());
    kernel<EmbeddingKernels>(Op::embedding, weight.device())
        ->forward(weight.element_size(), idx.data<int64_t>(), wc.raw_data(), out.raw_data(), idx.numel(), D);
  }
  if (!weight.is_floating_point()) return out;
  const DType wdt = weight.dtype(), dt = compute_dtype(weight);
  const int64_t n = idx.numel();
  Tensor idx_d = idx.detach();
  return record(out, op, {weight}, {idx_d}, [=](const Tensor& g, const std::vector<bool>&) -> std::vector<Tensor> {
    Tensor gc = as_compute(g, dt);
    Tensor dw = zeros({V, D}, {.dtype = dt, .device = gc.device()});
    kernel<EmbeddingKernels>(Op::embedding, gc.device())
        ->backward(dt, idx_d.data<int64_t>(), gc.raw_data(), dw.raw_data(), n, D, padding_idx);
    return {cast_back(dw, wdt)};
  });
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
  if (auto r = autocast_op(
          AutocastTo::low,
          [&](const Tensor& qc, const Tensor& kc, const Tensor& vc) {
            return scaled_dot_product_attention(qc, kc, vc, causal);
          },
          q, k, v))
    return *r;  // autocast: the op ran on cast inputs
  const char* op = "scaled_dot_product_attention";
  KILN_CHECK(q.defined() && k.defined() && v.defined(), op, ": q, k or v is undefined");
  check_floating(op, q, "q");
  check_floating(op, k, "k");
  check_floating(op, v, "v");
  check_same_device(op, {q, k, v});
  KILN_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype(), op, ": q, k and v must have one dtype, got ",
             describe(q), ", ", describe(k), ", ", describe(v));
  const int64_t nd = q.dim();
  bool ok = nd >= 2 && k.dim() == nd && v.dim() == nd;
  for (int64_t d = 0; ok && d < nd - 2; ++d) ok = k.size(d) == q.size(d) && v.size(d) == q.size(d);
  ok = ok && k.size(-1) == q.size(-1) && v.size(-2) == k.size(-2);
  KILN_CHECK(ok, op, ": expected q (..., Tq, d), k (..., Tk, d), v (..., Tk, dv) with equal batch dims, got q ",
             shape_str(q.shape()), ", k ", shape_str(k.shape()), ", v ", shape_str(v.shape()));
  const int64_t Tq = q.size(-2), Tk = k.size(-2), E = q.size(-1), Ev = v.size(-1);
  Shape batch(q.shape().begin(), q.shape().end() - 2);
  const int64_t B = shape_numel(batch);
  KILN_CHECK(E > 0, op, ": head dim d must be > 0, got q ", shape_str(q.shape()));
  KILN_CHECK(Tk > 0 || Tq == 0 || B == 0, op, ": no keys (Tk = 0) for ", Tq, " queries: q ", shape_str(q.shape()),
             ", k ", shape_str(k.shape()));
  const double scale = 1.0 / std::sqrt(double(E));
  // The kernels take the operands' own dtype on every device: the CPU's take float16 /
  // bfloat16 storage themselves (ops/cpu/nn.cpp: on the bf16 GEMM where it outruns float32,
  // else widening one batch entry at a time), so no float32 copy of q, k, v exists.
  const DType dt = q.dtype();
  Tensor qc, kc, vc, out, lse;
  {
    NoGradGuard ng;
    qc = as_compute(q, dt);
    kc = as_compute(k, dt);
    vc = as_compute(v, dt);
    Shape oshape = batch;
    oshape.push_back(Tq);
    oshape.push_back(Ev);
    out = Tensor::empty(oshape, dt, q.device());
    lse = Tensor::empty({B, Tq}, lse_dtype(dt), q.device());
    kernel<AttentionKernels>(Op::scaled_dot_product_attention, q.device())
        ->forward(dt, qc.raw_data(), kc.raw_data(), vc.raw_data(), out.raw_data(), lse.raw_data(), B, Tq, Tk, E, Ev,
                  scale, causal);
  }
  if (!any_requires_grad({q, k, v})) return out;
  Tensor qd = qc.detach(), kd = kc.detach(), vd = vc.detach(), od = out.detach();
  Shape qs = q.shape(), ks = k.shape(), vs = v.shape();
  return record(out, op, {q, k, v}, {qd, kd, vd, od, lse},
                [=](const Tensor& g, const std::vector<bool>& needs) -> std::vector<Tensor> {
    Tensor gc = as_compute(g, dt);
    Tensor dq = needs[0] ? Tensor::empty(qs, dt, gc.device()) : Tensor();
    Tensor dk = needs[1] ? Tensor::empty(ks, dt, gc.device()) : Tensor();
    Tensor dv = needs[2] ? Tensor::empty(vs, dt, gc.device()) : Tensor();
    auto p = [](const Tensor& t) -> void* { return t.defined() ? t.raw_data() : nullptr; };
    kernel<AttentionKernels>(Op::scaled_dot_product_attention, gc.device())
        ->backward(dt, qd.raw_data(), kd.raw_data(), vd.raw_data(), od.raw_data(), lse.raw_data(), gc.raw_data(),
                   p(dq), p(dk), p(dv), B, Tq, Tk, E, Ev, scale, causal);
    return {dq, dk, dv};
  });
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
  const char* op = "scaled_dot_product_attention";
  KILN_CHECK(!(o.attn_mask.defined() && o.is_causal), op, ": give either attn_mask or is_causal, not both");
  KILN_CHECK(o.dropout_p >= 0 && o.dropout_p <= 1, op, ": dropout_p must be in [0, 1], got ", o.dropout_p);
  if (!o.attn_mask.defined() && o.dropout_p == 0 && !o.scale) return scaled_dot_product_attention(q, k, v, o.is_causal);
  KILN_CHECK(q.defined() && k.defined() && v.defined() && q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim() &&
                 k.size(-1) == q.size(-1) && v.size(-2) == k.size(-2),
             op, ": expected q (..., Tq, d), k (..., Tk, d), v (..., Tk, dv), got ",
             q.defined() ? describe(q) : "undefined", ", ", k.defined() ? describe(k) : "undefined", ", ",
             v.defined() ? describe(v) : "undefined");
  const int64_t Tq = q.size(-2), Tk = k.size(-2);
  Tensor s = mul(matmul(q, k.transpose(-2, -1)), o.scale ? *o.scale : 1.0 / std::sqrt(double(q.size(-1))));
  if (o.is_causal) s = masked_fill(s, triu(ones({Tq, Tk}, {.dtype = DType::bool_, .device = q.device()}), 1), -INFINITY);
  if (o.attn_mask.defined()) {
    const Tensor& m = o.attn_mask;
    check_same_device(op, {q, m});
    KILN_CHECK(m.dtype() == DType::bool_ || m.dtype() == q.dtype(), op, ": attn_mask must be bool or the dtype of q, got ",
               describe(m), " for q ", describe(q));
    broadcast_shapes(m.shape(), s.shape(), op);
    s = m.dtype() == DType::bool_ ? masked_fill(s, logical_not(m), -INFINITY) : add(s, m);
  }
  // PyTorch's safe softmax: a row of -inf scores (every key masked) gives zeros, not NaN
  Tensor p = softmax(s, -1);
  p = where(all(eq(s.detach(), -INFINITY), {-1}, true), 0.0, p);
  if (o.dropout_p > 0) p = dropout(p, o.dropout_p, true);
  return matmul(p, v);
}

Tensor scaled_dot_product_attention_packed(const Tensor& qkv, int64_t num_heads, bool causal) {
  if (auto r = autocast_op(
          AutocastTo::low,
          [&](const Tensor& c) { return scaled_dot_product_attention_packed(c, num_heads, causal); }, qkv))
    return *r;  // autocast: the op ran on the cast input
  const char* op = "scaled_dot_product_attention_packed";
  KILN_CHECK(qkv.defined(), op, ": qkv is undefined");
  check_floating(op, qkv, "qkv");
  KILN_CHECK(num_heads > 0, op, ": num_heads must be positive, got ", num_heads);
  KILN_CHECK(qkv.dim() == 3 && qkv.size(2) > 0 && qkv.size(2) % (3 * num_heads) == 0, op,
             ": expected qkv of shape (B, T, 3 * C) with C divisible by num_heads = ", num_heads, ", got ",
             shape_str(qkv.shape()));
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, H = num_heads, d = C / H;
  const AttentionKernels* ker = kernel<AttentionKernels>(Op::scaled_dot_product_attention, qkv.device());
  if (!ker->forward_strided || B * T == 0) {  // no strided kernels here: split, move heads, attend, merge
    std::vector<Tensor> parts = split(qkv, C, 2);
    auto heads = [&](const Tensor& t) { return t.reshape({B, T, H, d}).transpose(1, 2); };  // (B, H, T, d)
    Tensor y = scaled_dot_product_attention(heads(parts[0]), heads(parts[1]), heads(parts[2]), causal);
    return y.transpose(1, 2).reshape({B, T, C});
  }
  // Batch entry b = (sample, head) reads its rows in place: q of head h at columns
  // [h d, (h + 1) d) of qkv, k C columns later, v 2C later; the output goes straight to
  // (B, T, C) with the heads side by side, and the backward writes d(qkv) the same way.
  const AttnLayout lin{H, T * 3 * C, d, 3 * C}, lout{H, T * C, d, C};
  const double scale = 1.0 / std::sqrt(double(d));
  const DType dt = qkv.dtype();  // as in scaled_dot_product_attention
  const int64_t third = C * int64_t(dtype_size(dt));  // bytes from q to k, k to v
  auto part = [third](const Tensor& t, int i) { return static_cast<char*>(t.raw_data()) + i * third; };
  Tensor xc, out, lse;
  {
    NoGradGuard ng;
    xc = as_compute(qkv, dt);
    out = Tensor::empty({B, T, C}, dt, qkv.device());
    lse = Tensor::empty({B * H, T}, lse_dtype(dt), qkv.device());
    ker->forward_strided(dt, part(xc, 0), lin, part(xc, 1), lin, part(xc, 2), lin, out.raw_data(), lout,
                         lse.raw_data(), B * H, T, T, d, d, scale, causal);
  }
  if (!any_requires_grad({qkv})) return out;
  Tensor xd = xc.detach(), od = out.detach();
  return record(out, op, {qkv}, {xd, od, lse}, [=](const Tensor& g, const std::vector<bool>&) -> std::vector<Tensor> {
    Tensor gc = as_compute(g, dt);
    Tensor dx = Tensor::empty({B, T, 3 * C}, dt, gc.device());  // every element is written
    ker->backward_strided(dt, part(xd, 0), lin, part(xd, 1), lin, part(xd, 2), lin, od.raw_data(), lout,
                          lse.raw_data(), gc.raw_data(), lout, part(dx, 0), lin, part(dx, 1), lin, part(dx, 2), lin,
                          B * H, T, T, d, d, scale, causal);
    return {dx};
  });
}

// ---------------------------------------------------------------- interpolate

namespace {
// The source coordinate of each of `out` destination positions along an axis of `in`.
std::vector<double> source_coords(int64_t in, int64_t out, double scale, InterpolateMode mode, bool align_corners) {
  std::vector<double> src(static_cast<size_t>(out));
  // PyTorch: ratio in/out from the sizes, or 1/scale_factor when one was given
  const double ratio = scale > 0 ? 1.0 / scale : double(in) / double(out);
  // nearest as PyTorch's nearest_idx: twice the size shifts the index, and otherwise the
  // ratio and the product are float32 (whatever the tensor's dtype); nearest-exact the same
  // with the pixel centre, floor((dst + 0.5) r)
  const float ratio32 = scale > 0 ? float(1.0 / scale) : float(in) / float(out);
  for (int64_t d = 0; d < out; ++d) {
    double s;
    if (mode == InterpolateMode::nearest) s = out == 2 * in ? double(d >> 1) : double(std::floor(float(d) * ratio32));
    else if (mode == InterpolateMode::nearest_exact) s = double(std::floor((float(d) + 0.5f) * ratio32));
    else if (align_corners) s = out > 1 ? double(d) * double(in - 1) / double(out - 1) : 0.0;
    else if (mode == InterpolateMode::bicubic) s = (double(d) + 0.5) * ratio - 0.5;  // not clamped at 0 (cubic)
    else s = std::max(0.0, (double(d) + 0.5) * ratio - 0.5);
    src[size_t(d)] = mode == InterpolateMode::bicubic ? s : std::min(s, double(in - 1));
  }
  return src;
}

// x resized along `dim` (2 or 3) to `out` positions.
Tensor resize_axis(const Tensor& x, int64_t dim, int64_t out, double scale, const InterpolateOptions& o) {
  const int64_t in = x.size(dim);
  if (out == in) return x;  // PyTorch copies an axis whose size does not change, whatever the scale
  const bool bilinear = o.mode == InterpolateMode::bilinear;
  const std::vector<double> src = source_coords(in, out, scale, o.mode, o.align_corners);
  const TensorOptions io{.dtype = DType::int64, .device = x.device()};
  Shape wshape(size_t(x.dim()), 1);
  wshape[size_t(dim)] = out;
  if (o.mode == InterpolateMode::bicubic) {
    // PyTorch's cubic convolution (A = -0.75): taps floor(s) - 1 .. floor(s) + 2, clamped to the
    // edge, summed in that order
    const double A = -0.75;
    auto conv1 = [&](double t) { return ((A + 2) * t - (A + 3)) * t * t + 1; };
    auto conv2 = [&](double t) { return ((A * t - 5 * A) * t + 8 * A) * t - 4 * A; };
    std::vector<std::vector<int64_t>> idx(4, std::vector<int64_t>(src.size()));
    std::vector<std::vector<double>> w(4, std::vector<double>(src.size()));
    for (size_t d = 0; d < src.size(); ++d) {
      const double f = std::floor(src[d]), t = src[d] - f;
      const double c[4] = {conv2(t + 1), conv1(t), conv1(1 - t), conv2(2 - t)};
      for (int k = 0; k < 4; ++k) {
        idx[size_t(k)][d] = std::clamp<int64_t>(int64_t(f) - 1 + k, 0, in - 1);
        w[size_t(k)][d] = c[k];
      }
    }
    Tensor acc;
    for (int k = 0; k < 4; ++k) {
      const Tensor tap = mul(index_select(x, dim, from_vector(idx[size_t(k)], {out}, io)),
                             from_vector(w[size_t(k)], wshape).to(x.dtype()).to(x.device()));
      acc = k == 0 ? tap : add(acc, tap);
    }
    return acc;
  }
  std::vector<int64_t> i0(src.size()), i1(src.size());
  std::vector<double> w1(src.size());
  for (size_t d = 0; d < src.size(); ++d) {
    i0[d] = int64_t(std::floor(src[d]));
    i1[d] = std::min(i0[d] + 1, in - 1);
    w1[d] = src[d] - double(i0[d]);
  }
  const Tensor lo = index_select(x, dim, from_vector(i0, {out}, io));
  if (!bilinear) return lo;
  const Tensor hi = index_select(x, dim, from_vector(i1, {out}, io));
  const Tensor w = from_vector(w1, wshape).to(x.dtype()).to(x.device());
  return add(lo, mul(sub(hi, lo), w));  // lo + (hi - lo) w
}
}  // namespace

Tensor interpolate(const Tensor& x, InterpolateOptions o) {
  KILN_CHECK(x.defined() && (x.dim() == 4 || x.dim() == 3), "interpolate: expected input (N, C, H, W) or (N, C, L), "
             "got ", x.defined() ? shape_str(x.shape()) : std::string("undefined"));
  if (o.mode == InterpolateMode::linear) o.mode = InterpolateMode::bilinear;
  if (x.dim() == 3) {  // (N, C, 1, L), the length from the options' first entries
    KILN_CHECK(o.mode != InterpolateMode::bicubic, "interpolate: bicubic needs a 4-D input, got ", shape_str(x.shape()));
    InterpolateOptions o2 = o;
    o2.size = {o.size[0] > 0 ? 1 : 0, o.size[0]};
    o2.scale_factor = {o.scale_factor[0] > 0 ? 1.0 : 0.0, o.scale_factor[0]};
    return interpolate(x.unsqueeze(2), o2).squeeze(2);
  }
  check_floating("interpolate", x);
  const bool by_size = o.size[0] > 0 || o.size[1] > 0;
  KILN_CHECK(by_size != (o.scale_factor[0] > 0 || o.scale_factor[1] > 0), "interpolate: give either size or "
             "scale_factor, got size ", o.size[0], "x", o.size[1], " and scale_factor ", o.scale_factor[0], "x",
             o.scale_factor[1]);
  int64_t out[2];
  for (int a = 0; a < 2; ++a) {
    if (by_size) {
      out[a] = o.size[size_t(a)];
    } else {
      const double s = o.scale_factor[size_t(a)];
      KILN_CHECK(std::isfinite(s) && s > 0, "interpolate: scale_factor must be finite and > 0, got ", s);
      out[a] = int64_t(std::floor(double(x.size(2 + a)) * s));
    }
    KILN_CHECK(out[a] >= 1 && out[a] <= (int64_t(1) << 31), "interpolate: output size ", out[0], "x", out[1],
               " for input ", shape_str(x.shape()), " must be positive and below 2^31");
    KILN_CHECK(x.size(2 + a) >= 1, "interpolate: the input ", shape_str(x.shape()), " is empty");
  }
  if (o.mode == InterpolateMode::area) return adaptive_avg_pool2d(x, {out[0], out[1]});
  Tensor y;
  if (o.mode == InterpolateMode::bicubic) {  // width first, then height: PyTorch's order of the sums
    const Tensor w = resize_axis(x, 3, out[1], by_size ? 0.0 : o.scale_factor[1], o);
    y = resize_axis(w, 2, out[0], by_size ? 0.0 : o.scale_factor[0], o);
  } else {
    const Tensor h = resize_axis(x, 2, out[0], by_size ? 0.0 : o.scale_factor[0], o);
    y = resize_axis(h, 3, out[1], by_size ? 0.0 : o.scale_factor[1], o);
  }
  return y.is_same(x) ? x.clone() : y;  // a new tensor, as PyTorch's
}

// ---------------------------------------------------------------- normalize, distances

Tensor normalize(const Tensor& x, double p, int64_t dim, double eps) {
  KILN_CHECK(x.defined(), "normalize: input is an undefined tensor");
  check_floating("normalize", x);
  const int64_t d = wrap_dim(dim, x.dim(), "normalize");
  return div(x, clamp(vector_norm(x, p, {d}, true), eps, std::nullopt));
}

Tensor cosine_similarity(const Tensor& x1, const Tensor& x2, int64_t dim, double eps) {
  const char* op = "cosine_similarity";
  KILN_CHECK(x1.defined() && x2.defined(), op, ": an input is an undefined tensor");
  const DType dt = result_type(x1, x2);
  KILN_CHECK(is_floating(dt), op, ": expected a floating input, got ", describe(x1), " and ", describe(x2));
  check_same_device(op, {x1, x2});
  const Shape s = broadcast_shapes(x1.shape(), x2.shape(), op);
  const Tensor a = x1.to(dt).expand(s), b = x2.to(dt).expand(s);
  const int64_t d = wrap_dim(dim, int64_t(s.size()), op);
  // PyTorch clamps the norms in place under no_grad: the values are max(norm, eps), the
  // gradient passes as if unclamped
  auto clamped = [eps](const Tensor& n) {
    Tensor v;
    {
      NoGradGuard ng;
      v = clamp(n.detach(), eps, std::nullopt);
    }
    return twice_differentiable(record(v, "cosine_similarity", {n}, [](const Tensor& g, const std::vector<bool>&) {
      return std::vector<Tensor>{g};
    }));
  };
  const Tensor na = clamped(vector_norm(a, 2.0, {d}, true)), nb = clamped(vector_norm(b, 2.0, {d}, true));
  return sum(mul(div(a, na), div(b, nb)), {d});
}

Tensor pairwise_distance(const Tensor& x1, const Tensor& x2, double p, double eps, bool keepdim) {
  KILN_CHECK(x1.defined() && x2.defined(), "pairwise_distance: an input is an undefined tensor");
  return vector_norm(add(sub(x1, x2), eps), p, {-1}, keepdim);
}

// ---------------------------------------------------------------- channel dropout, pixel shuffle

Tensor feature_dropout(const Tensor& x, double p, bool training, int64_t spatial_dims) {
  const char* op = spatial_dims == 1 ? "dropout1d" : spatial_dims == 2 ? "dropout2d" : "dropout3d";
  KILN_CHECK(x.defined(), op, ": input is undefined");
  KILN_CHECK(spatial_dims >= 1 && spatial_dims <= 3, "feature_dropout: spatial_dims must be 1, 2 or 3, got ",
             spatial_dims);
  KILN_CHECK(x.dim() == spatial_dims + 1 || x.dim() == spatial_dims + 2, op, ": expected an input of ",
             spatial_dims + 2, " dims (N, C, ...) or ", spatial_dims + 1, " (C, ...), got ", describe(x));
  KILN_CHECK(p >= 0.0 && p <= 1.0, op, ": probability p must be in [0, 1], got ", p);
  if (!training || p == 0.0) return x;
  check_floating(op, x);
  // one number per (sample, channel): dropout of ones gives 0 or 1 / (1 - p), broadcast over space
  Shape ms(x.shape().begin(), x.shape().end() - spatial_dims);
  for (int64_t i = 0; i < spatial_dims; ++i) ms.push_back(1);
  const Tensor mask = dropout(ones(ms, {.dtype = x.dtype(), .device = x.device()}), p, true);
  return mul(x, mask);
}

Tensor pixel_shuffle(const Tensor& x, int64_t r) {
  KILN_CHECK(x.defined() && x.dim() >= 3, "pixel_shuffle: expected an input of 3 or more dims (..., C r^2, H, W), got ",
             x.defined() ? describe(x) : std::string("undefined"));
  KILN_CHECK(r > 0, "pixel_shuffle: upscale_factor must be > 0, got ", r);
  const int64_t c = x.size(-3), h = x.size(-2), w = x.size(-1);
  KILN_CHECK(c % (r * r) == 0, "pixel_shuffle: the channels ", c, " of ", describe(x),
             " are not divisible by upscale_factor^2 = ", r * r);
  Shape lead(x.shape().begin(), x.shape().end() - 3);
  const int64_t n = int64_t(lead.size());
  Shape s = lead;
  for (int64_t v : {c / (r * r), r, r, h, w}) s.push_back(v);
  Shape perm;
  for (int64_t i = 0; i < n; ++i) perm.push_back(i);
  for (int64_t i : {0, 3, 1, 4, 2}) perm.push_back(n + i);  // (c, h, r, w, r)
  Shape out = lead;
  for (int64_t v : {c / (r * r), h * r, w * r}) out.push_back(v);
  return x.reshape(s).permute(perm).reshape(out);
}

Tensor pixel_unshuffle(const Tensor& x, int64_t r) {
  KILN_CHECK(x.defined() && x.dim() >= 3, "pixel_unshuffle: expected an input of 3 or more dims (..., C, H r, W r), "
             "got ", x.defined() ? describe(x) : std::string("undefined"));
  KILN_CHECK(r > 0, "pixel_unshuffle: downscale_factor must be > 0, got ", r);
  const int64_t c = x.size(-3), h = x.size(-2), w = x.size(-1);
  KILN_CHECK(h % r == 0 && w % r == 0, "pixel_unshuffle: the height ", h, " and width ", w, " of ", describe(x),
             " must be divisible by downscale_factor ", r);
  Shape lead(x.shape().begin(), x.shape().end() - 3);
  const int64_t n = int64_t(lead.size());
  Shape s = lead;
  for (int64_t v : {c, h / r, r, w / r, r}) s.push_back(v);
  Shape perm;
  for (int64_t i = 0; i < n; ++i) perm.push_back(i);
  for (int64_t i : {0, 2, 4, 1, 3}) perm.push_back(n + i);  // (c, r, r, h, w)
  Shape out = lead;
  for (int64_t v : {c * r * r, h / r, w / r}) out.push_back(v);
  return x.reshape(s).permute(perm).reshape(out);
}

// ---------------------------------------------------------------- smaller activations

Tensor prelu(const Tensor& x, const Tensor& weight) {
  check_floating("prelu", x);
  check_floating("prelu", weight, "weight");
  check_same_device("prelu", {x, weight});
  const int64_t channels = x.dim() >= 2 ? x.size(1) : 1;
  KILN_CHECK(weight.numel() == 1 || (weight.dim() == 1 && weight.numel() == channels), "prelu: weight ",
             describe(weight), " must have 1 element or one per channel (", channels, " for input ", describe(x), ")");
  Tensor w = weight.numel() == 1 ? weight.reshape({}) : weight;
  if (weight.numel() != 1) {  // (C) -> (C, 1, ..., 1) against (N, C, ...)
    Shape ws{channels};
    for (int64_t d = 2; d < x.dim(); ++d) ws.push_back(1);
    w = w.reshape(ws);
  }
  // PyTorch's x > 0 ? x : w x, so at 0 the input gets w g and the weight x g = 0
  return where(gt(x, 0.0), x, mul(w, x));
}

Tensor glu(const Tensor& x, int64_t dim) {
  check_floating("glu", x);
  KILN_CHECK(x.dim() >= 1, "glu: expected an input of at least one dim, got ", describe(x));
  const int64_t d = dim < 0 ? dim + x.dim() : dim;
  KILN_CHECK(d >= 0 && d < x.dim(), "glu: dim ", dim, " is out of range for ", describe(x));
  KILN_CHECK(x.size(d) % 2 == 0, "glu: halving dim ", dim, " of ", describe(x), " needs an even size");
  const int64_t h = x.size(d) / 2;
  return mul(x.narrow(d, 0, h), sigmoid(x.narrow(d, h, h)));
}

Tensor celu(const Tensor& x, double alpha) {
  check_floating("celu", x);
  KILN_CHECK(alpha != 0, "celu: alpha must not be 0 (it divides x)");
  return where(gt(x, 0.0), x, mul(expm1(div(x, alpha)), alpha));
}

Tensor softsign(const Tensor& x) {
  check_floating("softsign", x);
  return div(x, add(abs(x), 1.0));
}

Tensor tanhshrink(const Tensor& x) {
  check_floating("tanhshrink", x);
  return sub(x, tanh(x));
}

Tensor softmin(const Tensor& x, int64_t dim) { return softmax(neg(x), dim); }

namespace {
// x * 0 + 0 where a shrink gives 0: +0 as PyTorch's, NaN stays NaN, and no gradient passes
// there (PyTorch's backward masks NaN out too, as neither x < -lambd nor x > lambd holds).
Tensor zero_keeping_nan(const Tensor& x) { return add(mul(x, 0.0), 0.0); }
}  // namespace

Tensor hardshrink(const Tensor& x, double lambd) {
  check_floating("hardshrink", x);
  return where(logical_or(lt(x, -lambd), gt(x, lambd)), x, zero_keeping_nan(x));
}

Tensor softshrink(const Tensor& x, double lambd) {
  check_floating("softshrink", x);
  KILN_CHECK(lambd >= 0, "softshrink: lambd must be >= 0, got ", lambd);
  return where(gt(x, lambd), sub(x, lambd), where(lt(x, -lambd), add(x, lambd), zero_keeping_nan(x)));
}

Tensor threshold(const Tensor& x, double th, double value) {
  KILN_CHECK(x.defined(), "threshold: input is undefined");
  return where(le(x, th), full({}, value, {.dtype = x.dtype(), .device = x.device()}), x);  // NaN passes, as PyTorch's
}

Tensor rrelu(const Tensor& x, double lower, double upper, bool training) {
  KILN_CHECK(x.defined(), "rrelu: input is undefined");
  check_floating("rrelu", x);
  KILN_CHECK(lower <= upper, "rrelu: lower (", lower, ") must not exceed upper (", upper, ")");
  if (!training) return leaky_relu(x, (lower + upper) / 2);
  // PyTorch's rrelu_with_noise: each negative entry takes its own slope from U(lower, upper);
  // the output and the gradient are x and g scaled by that slope (1 where x >= 0)
  Tensor noise;
  {
    NoGradGuard ng;
    const Tensor slope = add(mul(rand(x.shape(), {.dtype = x.dtype(), .device = x.device()}), upper - lower), lower);
    noise = where(ge(x, 0.0), 1.0, slope);
  }
  return mul(x, noise);
}


// ---------------------------------------------------------------- unfold / fold, bilinear, LRN, ...

namespace {

/// The flat positions in the padded (Hp, Wp) plane that unfold reads (fold writes), in its
/// column order: kernel entry (i, j) major, block position l minor; and L.
std::pair<std::vector<int64_t>, int64_t> fold_positions(const char* op, int64_t H, int64_t W, const FoldArgs& a) {
  for (int e = 0; e < 2; ++e)
    KILN_CHECK(a.kernel_size[size_t(e)] > 0 && a.dilation[size_t(e)] > 0 && a.stride[size_t(e)] > 0 &&
                   a.padding[size_t(e)] >= 0,
               op, ": kernel_size, dilation and stride must be positive and padding >= 0, got kernel (",
               a.kernel_size[0], ", ", a.kernel_size[1], "), dilation (", a.dilation[0], ", ", a.dilation[1],
               "), stride (", a.stride[0], ", ", a.stride[1], "), padding (", a.padding[0], ", ", a.padding[1], ")");
  const int64_t Hp = H + 2 * a.padding[0], Wp = W + 2 * a.padding[1];
  const int64_t eh = a.dilation[0] * (a.kernel_size[0] - 1) + 1, ew = a.dilation[1] * (a.kernel_size[1] - 1) + 1;
  KILN_CHECK(Hp >= eh && Wp >= ew, op, ": the (dilated) kernel (", eh, ", ", ew, ") is larger than the padded input (",
             Hp, ", ", Wp, ")");
  const int64_t oh = (Hp - eh) / a.stride[0] + 1, ow = (Wp - ew) / a.stride[1] + 1;
  std::vector<int64_t> pos;
  pos.reserve(size_t(a.kernel_size[0] * a.kernel_size[1] * oh * ow));
  for (int64_t i = 0; i < a.kernel_size[0]; ++i)
    for (int64_t j = 0; j < a.kernel_size[1]; ++j)
      for (int64_t r = 0; r < oh; ++r)
        for (int64_t c = 0; c < ow; ++c)
          pos.push_back((r * a.stride[0] + i * a.dilation[0]) * Wp + c * a.stride[1] + j * a.dilation[1]);
  return {pos, oh * ow};
}

}  // namespace

Tensor unfold(const Tensor& x, const FoldArgs& a) {
  KILN_CHECK(x.defined() && (x.dim() == 3 || x.dim() == 4), "unfold: expected x (N, C, H, W) or (C, H, W), got ",
             x.defined() ? describe(x) : "undefined");
  if (x.dim() == 3) return unfold(x.unsqueeze(0), a).squeeze(0);
  const int64_t N = x.size(0), C = x.size(1);
  auto [pos, L] = fold_positions("unfold", x.size(2), x.size(3), a);
  const Tensor xp = pad(x, {a.padding[1], a.padding[1], a.padding[0], a.padding[0]});
  const Tensor idx = from_vector(pos, {int64_t(pos.size())}, {.dtype = DType::int64, .device = x.device()});
  const int64_t K = a.kernel_size[0] * a.kernel_size[1];
  return index_select(xp.reshape({N, C, xp.size(2) * xp.size(3)}), 2, idx).reshape({N, C * K, L});
}

Tensor fold(const Tensor& x, std::array<int64_t, 2> output_size, const FoldArgs& a) {
  KILN_CHECK(x.defined() && (x.dim() == 2 || x.dim() == 3), "fold: expected x (N, C kh kw, L) or (C kh kw, L), got ",
             x.defined() ? describe(x) : "undefined");
  if (x.dim() == 2) return fold(x.unsqueeze(0), output_size, a).squeeze(0);
  const int64_t K = a.kernel_size[0] * a.kernel_size[1];
  KILN_CHECK(K > 0 && x.size(1) % K == 0, "fold: dim 1 of ", describe(x), " must be divisible by kh kw = ", K);
  const int64_t N = x.size(0), C = x.size(1) / K, H = output_size[0], W = output_size[1];
  auto [pos, L] = fold_positions("fold", H, W, a);
  KILN_CHECK(x.size(2) == L, "fold: ", describe(x), " has ", x.size(2), " blocks but output_size (", H, ", ", W,
             ") with these arguments gives ", L);
  const int64_t Hp = H + 2 * a.padding[0], Wp = W + 2 * a.padding[1];
  const Tensor idx = from_vector(pos, {int64_t(pos.size())}, {.dtype = DType::int64, .device = x.device()});
  const Tensor plane = index_add(zeros({N, C, Hp * Wp}, {.dtype = x.dtype(), .device = x.device()}), 2, idx,
                                 x.reshape({N, C, K * L}));
  return plane.reshape({N, C, Hp, Wp}).narrow(2, a.padding[0], H).narrow(3, a.padding[1], W);
}

Tensor bilinear(const Tensor& x1, const Tensor& x2, const Tensor& weight, const Tensor& bias) {
  KILN_CHECK(x1.defined() && x2.defined() && weight.defined() && weight.dim() == 3 && x1.dim() >= 1 &&
                 x2.dim() == x1.dim() && x1.size(-1) == weight.size(1) && x2.size(-1) == weight.size(2),
             "bilinear: expected x1 (..., in1), x2 (..., in2) and weight (out, in1, in2), got ",
             x1.defined() ? describe(x1) : "undefined", ", ", x2.defined() ? describe(x2) : "undefined", ", ",
             weight.defined() ? describe(weight) : "undefined");
  const Tensor y = einsum("...i,oij,...j->...o", {x1, weight, x2});
  return bias.defined() ? add(y, bias) : y;
}

Tensor local_response_norm(const Tensor& x, int64_t size, double alpha, double beta, double k) {
  KILN_CHECK(x.defined() && x.dim() >= 3, "local_response_norm: expected x (N, C, ...) with at least 3 dims, got ",
             x.defined() ? describe(x) : "undefined");
  KILN_CHECK(size > 0, "local_response_norm: size must be positive, got ", size);
  const int64_t C = x.size(1);
  // the channel window [c - size / 2, c + (size - 1) / 2], zero-padded, summed and divided by size
  const Tensor sq = pad(movedim(mul(x, x), 1, -1), {size / 2, (size - 1) / 2});
  Tensor acc = sq.narrow(-1, 0, C);
  for (int64_t s = 1; s < size; ++s) acc = add(acc, sq.narrow(-1, s, C));
  const Tensor div_ = movedim(pow(add(mul(div(acc, double(size)), alpha), k), beta), -1, 1);
  return div(x, div_);
}

Tensor channel_shuffle(const Tensor& x, int64_t groups) {
  KILN_CHECK(x.defined() && x.dim() >= 3, "channel_shuffle: expected x (N, C, ...) with at least 3 dims, got ",
             x.defined() ? describe(x) : "undefined");
  KILN_CHECK(groups > 0 && x.size(1) % groups == 0, "channel_shuffle: groups (", groups,
             ") must be positive and divide the channels of ", describe(x));
  Shape s = x.shape(), g = s;
  g[1] = x.size(1) / groups;
  g.insert(g.begin() + 1, groups);
  return x.reshape(g).transpose(1, 2).reshape(s);
}

Tensor embedding_bag(const Tensor& indices, const Tensor& weight, const EmbeddingBagArgs& a) {
  KILN_CHECK(indices.defined() && weight.defined() && weight.dim() == 2, "embedding_bag: expected indices and a 2-D "
             "weight, got ", indices.defined() ? describe(indices) : "undefined", " and ",
             weight.defined() ? describe(weight) : "undefined");
  KILN_CHECK(indices.dim() == 1 || (indices.dim() == 2 && !a.offsets.defined()), "embedding_bag: indices must be 2-D "
             "(one bag per row, no offsets) or 1-D with offsets, got ", describe(indices));
  KILN_CHECK(indices.dim() == 2 || a.offsets.defined(), "embedding_bag: 1-D indices need offsets");
  KILN_CHECK(!a.per_sample_weights.defined() || a.mode == EmbeddingBagMode::sum, "embedding_bag: per_sample_weights "
             "need mode sum (PyTorch's rule)");
  KILN_CHECK(!a.per_sample_weights.defined() || a.per_sample_weights.shape() == indices.shape(),
             "embedding_bag: per_sample_weights must have the indices' shape ", shape_str(indices.shape()));
  const int64_t n = indices.numel(), D = weight.size(1), V = weight.size(0);
  // each index's bag, on the host
  std::vector<int64_t> bag(static_cast<size_t>(n));
  int64_t B = 0;
  if (indices.dim() == 2) {
    B = indices.size(0);
    for (int64_t i = 0; i < n; ++i) bag[size_t(i)] = i / std::max<int64_t>(indices.size(1), 1);
  } else {
    KILN_CHECK(a.offsets.dim() == 1, "embedding_bag: offsets must be 1-D, got ", describe(a.offsets));
    const std::vector<int64_t> off =
        a.offsets.detach().to(Device::cpu()).to(DType::int64).contiguous().to_vector<int64_t>();
    B = int64_t(off.size()) - (a.include_last_offset ? 1 : 0);
    KILN_CHECK(B >= 0 && (off.empty() || off[0] == 0), "embedding_bag: offsets must start at 0, got ",
               off.empty() ? -1 : off[0]);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t lo = off[size_t(b)], hi = b + 1 < int64_t(off.size()) ? off[size_t(b + 1)] : n;
      KILN_CHECK(lo <= hi && hi <= n, "embedding_bag: offsets must increase and stay within the ", n, " indices");
      for (int64_t i = lo; i < hi; ++i) bag[size_t(i)] = b;
    }
    if (a.include_last_offset) KILN_CHECK(off.back() <= n, "embedding_bag: the last offset exceeds the indices");
    // indices past the last bag's end (include_last_offset) belong to no bag
    if (a.include_last_offset)
      for (int64_t i = off.back(); i < n; ++i) bag[size_t(i)] = -1;
  }
  const std::vector<int64_t> iv = indices.detach().to(Device::cpu()).to(DType::int64).contiguous().to_vector<int64_t>();
  const int64_t pad_row = a.padding_idx ? (*a.padding_idx < 0 ? *a.padding_idx + V : *a.padding_idx) : -1;
  std::vector<int64_t> keep, keep_bag, count(size_t(B), 0);
  for (int64_t i = 0; i < n; ++i) {
    KILN_CHECK(iv[size_t(i)] >= 0 && iv[size_t(i)] < V, "embedding_bag: index ", iv[size_t(i)],
               " is out of range for ", V, " embeddings");
    if (bag[size_t(i)] < 0 || iv[size_t(i)] == pad_row) continue;
    keep.push_back(i);
    keep_bag.push_back(bag[size_t(i)]);
    ++count[size_t(bag[size_t(i)])];
  }
  const TensorOptions io{.dtype = DType::int64, .device = weight.device()};
  const Tensor kept = from_vector(keep, {int64_t(keep.size())}, io);
  const Tensor rows = index_select(weight, 0, index_select(indices.reshape({n}).to(DType::int64), 0, kept));
  const Tensor bags = from_vector(keep_bag, {int64_t(keep_bag.size())}, io);
  const Tensor zero = zeros({B, D}, {.dtype = weight.dtype(), .device = weight.device()});
  if (a.mode != EmbeddingBagMode::max) {
    Tensor r = rows;
    if (a.per_sample_weights.defined())
      r = mul(r, index_select(a.per_sample_weights.reshape({n}), 0, kept).unsqueeze(1));
    Tensor s = index_add(zero, 0, bags, r);
    if (a.mode == EmbeddingBagMode::sum) return s;
    std::vector<double> c(count.begin(), count.end());
    for (double& v : c) v = std::max(v, 1.0);  // an empty bag: 0 / 1
    return div(s, from_vector(c, {B, 1}, {.dtype = weight.dtype(), .device = weight.device()}));
  }
  // max: the bags padded to their longest with -inf rows, then max over each (first maximum)
  int64_t longest = 0;
  for (int64_t c : count) longest = std::max(longest, c);
  std::vector<int64_t> slot(size_t(B * std::max<int64_t>(longest, 1)), int64_t(keep.size()));  // the -inf row
  std::vector<int64_t> fill(size_t(B), 0);
  for (size_t k = 0; k < keep.size(); ++k) {
    const int64_t b = keep_bag[k];
    slot[size_t(b * std::max<int64_t>(longest, 1) + fill[size_t(b)]++)] = int64_t(k);
  }
  const Tensor ext = cat({rows, full({1, D}, -INFINITY, {.dtype = weight.dtype(), .device = weight.device()})}, 0);
  const Tensor padded = index_select(ext, 0, from_vector(slot, {int64_t(slot.size())}, io))
                            .reshape({B, std::max<int64_t>(longest, 1), D});
  const Tensor m = max(padded, 1).values;
  return where(eq(m, -INFINITY), 0.0, m);  // an empty bag (only -inf): zeros
}


// ---------------------------------------------------------------- grid_sample, affine_grid

namespace {

/// A grid coordinate in [-1, 1] as a pixel coordinate of a dim of `size` entries, with
/// PyTorch's padding rules (grid_sampler_compute_source_index).
Tensor source_index(const Tensor& coord, int64_t size, GridSamplePadding padding, bool align_corners) {
  const double n = double(size);
  Tensor c = align_corners ? mul(add(coord, 1.0), (n - 1) / 2) : div(sub(mul(add(coord, 1.0), n), 1.0), 2.0);
  auto clip = [&](const Tensor& t) { return clamp(t, 0.0, n - 1); };
  if (padding == GridSamplePadding::border) return clip(c);
  if (padding == GridSamplePadding::reflection) {
    const double twice_low = align_corners ? 0.0 : -1.0, twice_high = align_corners ? 2 * (n - 1) : 2 * n - 1;
    if (twice_low == twice_high) return mul(c, 0.0);
    const double lo = twice_low / 2, span = (twice_high - twice_low) / 2;
    const Tensor in = abs(sub(c, lo));
    const Tensor extra = fmod(in, span);
    const Tensor even = eq(fmod(floor(div(in.detach(), span)), 2.0), 0.0);
    c = where(even, add(extra, lo), neg(sub(extra, span + lo)));  // span + lo - extra
    return clip(c);
  }
  return c;
}

}  // namespace

Tensor grid_sample(const Tensor& input, const Tensor& grid, GridSampleMode mode, GridSamplePadding padding,
                   bool align_corners) {
  const char* op = "grid_sample";
  KILN_CHECK(input.defined() && grid.defined() && input.dim() == 4 && grid.dim() == 4 && grid.size(3) == 2 &&
                 grid.size(0) == input.size(0),
             "grid_sample: expected input (N, C, H, W) and grid (N, Ho, Wo, 2), got ",
             input.defined() ? describe(input) : "undefined", " and ", grid.defined() ? describe(grid) : "undefined");
  KILN_CHECK(input.is_floating_point() && grid.dtype() == input.dtype(), "grid_sample: input and grid must have one "
             "floating dtype, got ", describe(input), " and ", describe(grid));
  check_same_device(op, {input, grid});
  const int64_t N = input.size(0), C = input.size(1), H = input.size(2), W = input.size(3);
  const int64_t Ho = grid.size(1), Wo = grid.size(2), P = Ho * Wo;
  const Tensor ix = source_index(grid.select(3, 0).reshape({N, 1, P}), W, padding, align_corners);
  const Tensor iy = source_index(grid.select(3, 1).reshape({N, 1, P}), H, padding, align_corners);
  const Tensor flat = input.reshape({N, C, H * W});
  // the value at integer pixel (x, y), zero where (x, y) lies outside the image
  auto corner = [&](const Tensor& x, const Tensor& y) {
    const Tensor inside = logical_and(logical_and(ge(x, 0.0), le(x, double(W - 1))),
                                      logical_and(ge(y, 0.0), le(y, double(H - 1))));
    const Tensor at = add(mul(clamp(y, 0.0, double(H - 1)), double(W)), clamp(x, 0.0, double(W - 1)))
                          .to(DType::int64)
                          .expand({N, C, P});
    return where(inside, gather(flat, 2, at), 0.0);
  };
  Tensor out;
  if (mode == GridSampleMode::nearest) {  // no gradient to the grid, as PyTorch's
    out = corner(round(ix.detach()), round(iy.detach()));  // half to even (nearbyint)
  } else {
    const Tensor x0 = floor(ix.detach()), y0 = floor(iy.detach()), x1 = add(x0, 1.0), y1 = add(y0, 1.0);
    // PyTorch's weights: each corner's the area of the opposite rectangle
    const Tensor wx1 = sub(ix, x0), wx0 = sub(x1, ix), wy1 = sub(iy, y0), wy0 = sub(y1, iy);
    out = add(add(mul(corner(x0, y0), mul(wx0, wy0)), mul(corner(x1, y0), mul(wx1, wy0))),
              add(mul(corner(x0, y1), mul(wx0, wy1)), mul(corner(x1, y1), mul(wx1, wy1))));
  }
  return out.reshape({N, C, Ho, Wo});
}

Tensor affine_grid(const Tensor& theta, const Shape& size, bool align_corners) {
  KILN_CHECK(theta.defined() && theta.dim() == 3 && theta.size(1) == 2 && theta.size(2) == 3 && size.size() == 4 &&
                 size[0] == theta.size(0),
             "affine_grid: expected theta (N, 2, 3) and size (N, C, H, W) with the same N, got ",
             theta.defined() ? describe(theta) : "undefined", " and ", shape_str(size));
  KILN_CHECK(theta.is_floating_point(), "affine_grid: theta must be floating, got ", describe(theta));
  const int64_t N = size[0], H = size[2], W = size[3];
  const TensorOptions o{.dtype = theta.dtype(), .device = theta.device()};
  // PyTorch's linspace_from_neg_one: the pixel centres in [-1, 1]
  auto centres = [&](int64_t n) {
    if (n <= 1) return zeros({std::max<int64_t>(n, 0)}, o);
    const Tensor r = linspace(-1.0, 1.0, n, o);
    return align_corners ? r : mul(r, double(n - 1) / double(n));
  };
  const Tensor xs = centres(W).reshape({1, W}).expand({H, W}), ys = centres(H).reshape({H, 1}).expand({H, W});
  const Tensor base = stack({xs, ys, ones({H, W}, o)}, -1).reshape({1, H * W, 3});
  return matmul(base, theta.transpose(1, 2)).reshape({N, H, W, 2});
}

}  // namespace kiln
