// Losses: cross_entropy (fused log-softmax + pick + label smoothing), nll_loss and mse_loss:
// argument and target checks, reductions, the call through dispatch and the fused backward;
// then the pointwise losses, compositions of recorded elementwise ops (l1, smooth_l1,
// huber, binary_cross_entropy with its own backward, bce with logits, kl_div), and the margin
// and likelihood losses (margin ranking, hinge embedding, soft margin, multilabel soft
// margin, cosine embedding, triplet margin, multi margin, Poisson and Gaussian NLL), each
// PyTorch's ATen or Python expression in recorded ops.
#include "kiln/ops/loss.h"
#include "kiln/core/autocast.h"
#include <cmath>
#include <limits>
#include <numbers>
#include "kiln/core/autograd.h"
#include "kiln/core/cuda.h"
#include "kiln/ops/kernels/loss.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/helpers.h"
#include "kiln/ops/nn_functional.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape_ops.h"

namespace kiln {

namespace {

/// Refuses Reduction::batchmean, kl_div's only.
void check_reduction(const char* op, Reduction r) {
  KILN_CHECK(r != Reduction::batchmean, op, ": reduction batchmean is kl_div's only; use mean or sum");
}

/// (n, c, s) of class-scored input (C), (N, C) or (N, C, d1, ...) against target (), (N) or
/// (N, d1, ...); throws naming both shapes when they do not fit.
struct ClassLayout {
  int64_t n = 1, c = 1, s = 1;
};

ClassLayout class_layout(const char* op, const char* what, const Tensor& input, const Tensor& target) {
  const Shape& is = input.shape();
  const Shape& ts = target.shape();
  ClassLayout L;
  KILN_CHECK(input.dim() >= 1, op, ": expected ", what, " of shape (C), (N, C) or (N, C, d1, ...), got shape ",
             shape_str(is));
  if (input.dim() == 1) {
    KILN_CHECK(target.dim() == 0, op, ": for ", what, " of shape ", shape_str(is),
               " (one sample) expected a 0-dim target, got target shape ", shape_str(ts));
    L.c = is[0];
    return L;
  }
  Shape want{is[0]};
  for (size_t d = 2; d < is.size(); ++d) want.push_back(is[d]);
  KILN_CHECK(ts == want, op, ": expected target of shape ", shape_str(want), " for ", what, " of shape ",
             shape_str(is), ", got target shape ", shape_str(ts));
  L.n = is[0];
  L.c = is[1];
  for (size_t d = 2; d < is.size(); ++d) L.s *= is[d];
  return L;
}

/// int64, contiguous, detached class indices; throws for non-integer targets.
Tensor class_targets(const char* op, const Tensor& target) {
  KILN_CHECK(target.defined(), op, ": target is an undefined tensor");
  KILN_CHECK(!target.is_floating_point() && target.dtype() != DType::bool_, op,
             ": expected integer class indices (int64) as target, got ", describe(target),
             " (class-probability targets are not supported)");
  return target.detach().to(DType::int64).contiguous();
}

/// Class targets checked against [0, c) or ignore_index, and how many count toward a mean.
/// On the CPU: checked here (an Error names the bad value) and counted (`count`). On a GPU:
/// checked on the device (a bad value becomes ignore_index in `tgt` and is reported at the
/// next host read) and, for a mean, counted there (`count_dev`, of the loss dtype), so the
/// loss never waits for the GPU.
struct Targets {
  Tensor tgt;
  int64_t count = 0;
  Tensor count_dev;
};

Targets check_targets(const char* op, const Tensor& tgt, int64_t c, int64_t ignore_index, Reduction r, DType dt) {
  Targets t;
  if (!tgt.is_cpu()) {
    t.tgt = cuda::checked_values(tgt, c, ignore_index, ignore_index, {op, "target value", "classes"});
    NoGradGuard ng;
    if (r == Reduction::mean) t.count_dev = sum(ne(t.tgt, double(ignore_index))).to(dt);
    return t;
  }
  t.tgt = tgt;
  const int64_t* p = tgt.data<int64_t>();
  for (int64_t k = 0; k < tgt.numel(); ++k) {
    const int64_t v = p[k];
    if (v == ignore_index) continue;
    KILN_CHECK(v >= 0 && v < c, op, ": target value ", v, " is out of range for ", c,
               " classes (expected 0 <= target < ", c, ", or ignore_index ", ignore_index, ")");
    ++t.count;
  }
  return t;
}

/// Applies the reduction to per-element losses (no graph); mean divides by the count of
/// targets that are not ignored (NaN when there is none, as in PyTorch).
Tensor reduce_loss(const Tensor& per_element, Reduction r, const Targets& t) {
  NoGradGuard ng;
  switch (r) {
    case Reduction::none: return per_element;
    case Reduction::sum: return sum(per_element);
    case Reduction::mean:
    default:
      if (t.count_dev.defined()) return div(sum(per_element), t.count_dev);
      return mul(sum(per_element), t.count > 0 ? 1.0 / double(t.count) : std::numeric_limits<double>::quiet_NaN());
  }
}

/// The incoming gradient of a reduced loss as the backward kernel reads it, and its scale:
/// a mean's 1/count is the scale on the CPU, a division on the device.
Tensor loss_grad(const Tensor& g, Reduction r, const Targets& t, double& scale) {
  scale = 1.0;
  if (r != Reduction::mean) return g.contiguous();
  if (t.count_dev.defined()) return div(g, t.count_dev).contiguous();
  if (t.count > 0) scale = 1.0 / double(t.count);
  return g.contiguous();
}

// Under create_graph (a backward that records): the per-target scale of the gradient, as a
// tensor of the graph, g (none: shaped (n, 1, s); sum) or g / count (mean; 0 when every
// target is ignored, as the kernels do).
Tensor grad_scale_graph(const Tensor& g, Reduction r, const Targets& t, const ClassLayout& L) {
  if (r == Reduction::none) return g.reshape({L.n, 1, L.s});
  if (r == Reduction::sum) return g;
  if (t.count_dev.defined()) return div(g, maximum(t.count_dev, ones_like(t.count_dev)));
  return mul(g, t.count > 0 ? 1.0 / double(t.count) : 0.0);
}

// The targets one-hot over the class dim, (n, c, s), in dtype dt (an ignored target's row is 0).
Tensor one_hot_graph(const Targets& t, const ClassLayout& L, DType dt, Device dev) {
  Tensor classes = arange(double(L.c), {.dtype = DType::int64, .device = dev}).reshape({1, L.c, 1});
  return eq(classes, t.tgt.reshape({L.n, 1, L.s})).to(dt);
}

/// Checks a class-weight tensor: 1-D of c floating values on the input's device.
void check_class_weight(const char* op, const Tensor& w, int64_t c, const Tensor& input) {
  check_floating(op, w, "weight");
  check_same_device(op, {input, w});
  KILN_CHECK(w.dim() == 1 && w.size(0) == c, op, ": weight must be a 1-D tensor of ", c,
             " class weights (one per class), got ", describe(w));
}

/// Cross entropy / NLL with class weights, in recorded ops with PyTorch's formulas, from
/// log-probabilities logp (n, c, s) and checked targets:
///   nll_i = -w[t_i] logp_i[t_i],  smooth_i = -sum_c w_c logp_i[c]  (0 where t_i is ignored)
///   loss = (1 - eps) nll + eps / c smooth, and a mean divides both sums by sum_i w[t_i].
Tensor weighted_class_loss(const Tensor& logp, const Targets& T, const ClassLayout& L, const Tensor& weight,
                           int64_t ignore, double eps, Reduction r, const Shape& target_shape) {
  const Tensor t = T.tgt.reshape({L.n, 1, L.s});
  const Tensor valid = ne(t, double(ignore));
  const Tensor ts = where(valid, t, zeros_like(t));  // a class index for every entry
  const Tensor w = weight.to(logp.dtype());
  const Tensor zero = full({}, 0.0, {.dtype = logp.dtype(), .device = logp.device()});
  const Tensor wt = where(valid, index_select(w, 0, ts.flatten()).reshape({L.n, 1, L.s}), zero);
  // the target's log-probability as a one-hot sum (twice differentiable, unlike gather)
  const Tensor picked = sum(mul(logp, one_hot_graph(T, L, logp.dtype(), logp.device())), {1}, true);
  Tensor nll = where(valid, neg(mul(picked, wt)), zero);
  Tensor smooth;
  if (eps > 0) smooth = where(valid, neg(sum(mul(logp, w.reshape({1, L.c, 1})), {1}, true)), zero);
  auto combine = [&](const Tensor& a, const Tensor& b) {
    return eps > 0 ? add(mul(a, 1.0 - eps), mul(b, eps / double(L.c))) : a;
  };
  switch (r) {
    case Reduction::none: return combine(nll, smooth).reshape(target_shape);
    case Reduction::sum: return combine(sum(nll), eps > 0 ? sum(smooth) : Tensor());
    case Reduction::mean:
    default: {
      const Tensor den = sum(wt);
      return combine(div(sum(nll), den), eps > 0 ? div(sum(smooth), den) : Tensor());
    }
  }
}

}  // namespace

// ---------------------------------------------------------------- cross_entropy

// 16-bit logits (under autocast or not) are read widened by the kernels, which compute in
// float32 and write the logit gradient rounded once: the values of casting the logits to
// float32 first (autocast's policy for losses), without the float32 copy of the logits
// and of their gradient (at GPT-2 small's vocabulary, 3.3 GB each per step on a GPU).
Tensor cross_entropy(const Tensor& logits, const Tensor& target, CrossEntropyArgs args) {
  const char* op = "cross_entropy";
  check_reduction(op, args.reduction);
  check_floating(op, logits, "logits");
  Tensor tgt = class_targets(op, target);
  check_same_device(op, {logits, target});
  KILN_CHECK(args.label_smoothing >= 0.0 && args.label_smoothing <= 1.0, op,
             ": label_smoothing must be in [0, 1], got ", args.label_smoothing);
  const ClassLayout L = class_layout(op, "logits", logits, target);
  const DType xdt = logits.dtype(), dt = is_half(xdt) ? DType::float32 : xdt;  // logits' dtype, the loss's
  const Targets T = check_targets(op, tgt, L.c, args.ignore_index, args.reduction, dt);
  if (args.weight.defined()) {  // class weights: recorded ops on log_softmax
    check_class_weight(op, args.weight, L.c, logits);
    const Tensor logp = log_softmax(logits.to(dt).reshape({L.n, L.c, L.s}), 1);
    return weighted_class_loss(logp, T, L, args.weight, args.ignore_index, args.label_smoothing, args.reduction,
                               target.shape());
  }
  Tensor x = logits.detach().contiguous();                            // (n, c, s)
  Tensor loss = Tensor::empty(target.shape(), dt, logits.device());  // (n, s)
  Tensor mx = Tensor::empty(target.shape(), dt, logits.device());    // (n, s) max over classes
  Tensor ls = Tensor::empty(target.shape(), dt, logits.device());    // (n, s) log sum exp(x - max)
  CrossEntropyKernelArgs a;
  a.n = L.n;
  a.c = L.c;
  a.s = L.s;
  a.logits = x.raw_data();
  a.target = T.tgt.data<int64_t>();
  a.ignore_index = args.ignore_index;
  a.label_smoothing = args.label_smoothing;
  a.row_max = mx.raw_data();
  a.log_sum = ls.raw_data();
  a.loss = loss.raw_data();
  kernel<CrossEntropyKernelFn>(Op::cross_entropy, logits.device())(xdt, a);
  Tensor out = reduce_loss(loss, args.reduction, T);
  const Reduction red = args.reduction;
  const Tensor live = logits;  // for the create_graph formula
  const int64_t ignore = args.ignore_index;
  auto backward = [x, T, mx, ls, a, red, live, L, ignore](const Tensor& g, const std::vector<bool>&) {
    if (grad_mode_enabled()) {  // create_graph: (softmax - smoothed one-hot) * g, in recorded ops
      const double eps = a.label_smoothing;
      const Tensor lv = live.to(g.dtype());  // 16-bit logits: the formula in float32, rounded at the end
      Tensor hot = one_hot_graph(T, L, lv.dtype(), lv.device());
      Tensor valid = ne(T.tgt.reshape({L.n, 1, L.s}), double(ignore)).to(lv.dtype());
      Tensor want = mul(add(mul(hot, 1.0 - eps), eps / double(L.c)), valid);
      Tensor p = mul(softmax(lv.reshape({L.n, L.c, L.s}), 1), valid);
      Tensor d = mul(sub(p, want), grad_scale_graph(g, red, T, L)).reshape(live.shape());
      return std::vector<Tensor>{d.to(live.dtype())};
    }
    double scale = 1.0;
    Tensor gc = loss_grad(g, red, T, scale);
    Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
    CrossEntropyKernelArgs b = a;
    b.logits = x.raw_data();
    b.target = T.tgt.data<int64_t>();
    b.row_max = mx.raw_data();
    b.log_sum = ls.raw_data();
    b.loss = nullptr;
    b.backward = true;
    b.g = gc.raw_data();
    b.g_stride = red == Reduction::none ? 1 : 0;
    b.scale = scale;
    b.dlogits = dx.raw_data();
    kernel<CrossEntropyKernelFn>(Op::cross_entropy, x.device())(x.dtype(), b);
    return std::vector<Tensor>{dx};
  };
  return twice_differentiable(record(out, op, {logits}, {x, T.tgt, mx, ls}, backward));
}

// ---------------------------------------------------------------- nll_loss

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, NllLossArgs args) {
  if (auto r = autocast_op(AutocastTo::fp32, [&](const Tensor& lc) { return nll_loss(lc, target, args); }, log_probs))
    return *r;  // autocast: the op ran on cast inputs
  const char* op = "nll_loss";
  check_reduction(op, args.reduction);
  check_floating(op, log_probs, "log_probs");
  Tensor tgt = class_targets(op, target);
  check_same_device(op, {log_probs, target});
  if (is_half(log_probs.dtype())) return nll_loss(log_probs.to(DType::float32), target, args);
  const ClassLayout L = class_layout(op, "log_probs", log_probs, target);
  const DType dt = log_probs.dtype();
  const Targets T = check_targets(op, tgt, L.c, args.ignore_index, args.reduction, dt);
  if (args.weight.defined()) {
    check_class_weight(op, args.weight, L.c, log_probs);
    return weighted_class_loss(log_probs.reshape({L.n, L.c, L.s}), T, L, args.weight, args.ignore_index, 0.0,
                               args.reduction, target.shape());
  }
  Tensor x = log_probs.detach().contiguous();                          // (n, c, s)
  Tensor loss = Tensor::empty(target.shape(), dt, log_probs.device());  // (n, s)
  NllLossKernelArgs a;
  a.n = L.n;
  a.c = L.c;
  a.s = L.s;
  a.log_probs = x.raw_data();
  a.target = T.tgt.data<int64_t>();
  a.ignore_index = args.ignore_index;
  a.loss = loss.raw_data();
  kernel<NllLossKernelFn>(Op::nll_loss, log_probs.device())(dt, a);
  Tensor out = reduce_loss(loss, args.reduction, T);
  const Reduction red = args.reduction;
  const Shape xs = x.shape();
  const DType ldt = log_probs.dtype();
  auto backward = [xs, T, a, red, L, ldt](const Tensor& g, const std::vector<bool>&) {
    if (grad_mode_enabled())  // create_graph: -one-hot * g, in recorded ops (linear in g)
      return std::vector<Tensor>{
          neg(mul(one_hot_graph(T, L, ldt, g.device()), grad_scale_graph(g, red, T, L))).reshape(xs)};
    double scale = 1.0;
    Tensor gc = loss_grad(g, red, T, scale);
    Tensor dx = Tensor::empty(xs, g.dtype(), g.device());
    NllLossKernelArgs b = a;
    b.log_probs = nullptr;
    b.target = T.tgt.data<int64_t>();
    b.loss = nullptr;
    b.backward = true;
    b.g = gc.raw_data();
    b.g_stride = red == Reduction::none ? 1 : 0;
    b.scale = scale;
    b.dlog_probs = dx.raw_data();
    kernel<NllLossKernelFn>(Op::nll_loss, g.device())(g.dtype(), b);
    return std::vector<Tensor>{dx};
  };
  return twice_differentiable(record(out, op, {log_probs}, {T.tgt}, backward));
}

// ---------------------------------------------------------------- mse_loss

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  if (auto r = autocast_op(
          AutocastTo::fp32,
          [&](const Tensor& ic, const Tensor& tc) { return mse_loss(ic, tc, reduction); },
          input, target))
    return *r;  // autocast: the op ran on cast inputs
  const char* op = "mse_loss";
  check_reduction(op, reduction);
  check_floating(op, input, "input");
  check_floating(op, target, "target");
  check_same_device(op, {input, target});
  KILN_CHECK(input.shape() == target.shape(), op, ": input shape ", shape_str(input.shape()),
             " and target shape ", shape_str(target.shape()), " must match (got ", describe(input), " and ",
             describe(target), ")");
  // one compute dtype; 16-bit inputs are computed in float32 and the loss is float32
  const DType dt = cpu_compute_dtype(promote_types(input.dtype(), target.dtype()));
  Tensor a = input.to(dt), b = target.to(dt);  // differentiable casts (no-ops when equal)
  Tensor xa = a.detach().contiguous(), xb = b.detach().contiguous();
  const int64_t n = xa.numel();
  const bool reduce = reduction != Reduction::none;
  Tensor out = Tensor::empty(reduce ? Shape{} : input.shape(), dt, input.device());
  MseLossKernelArgs k;
  k.n = n;
  k.input = xa.raw_data();
  k.target = xb.raw_data();
  k.out = out.raw_data();
  k.reduce = reduce;
  k.scale = reduction == Reduction::mean ? (n > 0 ? 1.0 / double(n) : std::numeric_limits<double>::quiet_NaN()) : 1.0;
  kernel<MseLossKernelFn>(Op::mse_loss, input.device())(dt, k);
  auto backward = [xa, xb, a, b, k](const Tensor& g, const std::vector<bool>& needs) {
    if (grad_mode_enabled()) {  // create_graph: 2 (a - b) g (/ n), in recorded ops
      Tensor d = mul(mul(sub(a, b), k.reduce ? mul(g, k.n > 0 ? k.scale : 1.0) : g), 2.0);
      return std::vector<Tensor>{needs[0] ? d : Tensor(), needs[1] ? neg(d) : Tensor()};
    }
    Tensor gc = g.contiguous();
    Tensor dx, dy;
    MseLossKernelArgs bk = k;
    bk.out = nullptr;
    bk.backward = true;
    bk.input = xa.raw_data();
    bk.target = xb.raw_data();
    bk.g = gc.raw_data();
    bk.g_stride = k.reduce ? 0 : 1;
    if (!k.reduce || k.n == 0) bk.scale = 1.0;
    if (needs[0]) {
      dx = Tensor::empty(xa.shape(), xa.dtype(), xa.device());
      bk.dinput = dx.raw_data();
    }
    if (needs[1]) {
      dy = Tensor::empty(xb.shape(), xb.dtype(), xb.device());
      bk.dtarget = dy.raw_data();
    }
    kernel<MseLossKernelFn>(Op::mse_loss, xa.device())(xa.dtype(), bk);
    return std::vector<Tensor>{dx, dy};
  };
  return twice_differentiable(record(out, op, {a, b}, {xa, xb}, backward));
}

// ---------------------------------------------------------------- pointwise losses

namespace {

void check_same_shape(const char* op, const Tensor& a, const char* an, const Tensor& b, const char* bn) {
  KILN_CHECK(a.shape() == b.shape(), op, ": ", an, " shape ", shape_str(a.shape()), " and ", bn, " shape ",
             shape_str(b.shape()), " must match (got ", describe(a), " and ", describe(b), ")");
}

/// Checks of a pointwise loss's input and target (and optional weights broadcastable to
/// the input) and the dtype it computes in: the promoted one, float32 for 16-bit.
DType pointwise_dtype(const char* op, const Tensor& input, const Tensor& target,
                      std::initializer_list<std::pair<const char*, Tensor>> weights = {}) {
  check_floating(op, input, "input");
  check_floating(op, target, "target");
  check_same_device(op, {input, target});
  check_same_shape(op, input, "input", target, "target");
  DType dt = promote_types(input.dtype(), target.dtype());
  for (const auto& [name, w] : weights) {
    if (!w.defined()) continue;
    check_floating(op, w, name);
    check_same_device(op, {input, w});
    bool fits = w.dim() <= input.dim();
    for (int64_t d = 1; fits && d <= w.dim(); ++d) fits = w.size(-d) == 1 || w.size(-d) == input.size(-d);
    KILN_CHECK(fits, op, ": ", name, " of shape ", shape_str(w.shape()), " does not broadcast to the input's shape ",
               shape_str(input.shape()));
    dt = promote_types(dt, w.dtype());
  }
  return cpu_compute_dtype(dt);
}

/// Reduces per-element losses l of `input` (recorded ops: the gradient flows through).
Tensor reduce_pointwise(const Tensor& l, Reduction r, const Tensor& input) {
  switch (r) {
    case Reduction::none: return l;
    case Reduction::sum: return sum(l);
    case Reduction::batchmean:  // PyTorch: sum / input.size(0), the sum itself for a 0-dim input
      return input.dim() == 0 ? sum(l) : div(sum(l), double(input.size(0)));
    case Reduction::mean:
    default: return mean(l);
  }
}

}  // namespace

Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  if (auto r = autocast_op(
          AutocastTo::fp32, [&](const Tensor& a, const Tensor& b) { return l1_loss(a, b, reduction); }, input, target))
    return *r;
  check_reduction("l1_loss", reduction);
  const DType dt = pointwise_dtype("l1_loss", input, target);
  return reduce_pointwise(abs(sub(input.to(dt), target.to(dt))), reduction, input);
}

Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction, double beta) {
  if (auto r = autocast_op(
          AutocastTo::fp32, [&](const Tensor& a, const Tensor& b) { return smooth_l1_loss(a, b, reduction, beta); },
          input, target))
    return *r;
  const char* op = "smooth_l1_loss";
  KILN_CHECK(beta >= 0, op, ": beta must be >= 0, got ", beta);
  check_reduction(op, reduction);
  const DType dt = pointwise_dtype(op, input, target);
  const Tensor z = abs(sub(input.to(dt), target.to(dt)));
  if (beta == 0) return reduce_pointwise(z, reduction, input);  // PyTorch: l1_loss
  // PyTorch's rounding: 0.5 * z * z / beta, z - 0.5 * beta
  const Tensor l = where(lt(z, beta), div(mul(mul(z, 0.5), z), beta), sub(z, 0.5 * beta));
  return reduce_pointwise(l, reduction, input);
}

Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction, double delta) {
  if (auto r = autocast_op(
          AutocastTo::fp32, [&](const Tensor& a, const Tensor& b) { return huber_loss(a, b, reduction, delta); },
          input, target))
    return *r;
  const char* op = "huber_loss";
  KILN_CHECK(delta > 0, op, ": delta must be > 0, got ", delta);
  check_reduction(op, reduction);
  const DType dt = pointwise_dtype(op, input, target);
  const Tensor z = abs(sub(input.to(dt), target.to(dt)));
  const Tensor l = where(lt(z, delta), mul(mul(z, 0.5), z), mul(sub(z, 0.5 * delta), delta));
  return reduce_pointwise(l, reduction, input);
}

Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const BceArgs& args) {
  if (auto r = autocast_op(
          AutocastTo::fp32, [&](const Tensor& a, const Tensor& b) { return binary_cross_entropy(a, b, args); },
          input, target))
    return *r;
  const char* op = "binary_cross_entropy";
  check_reduction(op, args.reduction);
  const DType dt = pointwise_dtype(op, input, target, {{"weight", args.weight}});
  const Tensor p = input.to(dt), t = target.to(dt), w = args.weight.defined() ? args.weight.to(dt) : Tensor();
  Tensor l;
  {
    NoGradGuard ng;
    if (p.numel() > 0) {  // PyTorch's checks (a read back to the host)
      const double pmin = min(p).item(), pmax = max(p).item(), tmin = min(t).item(), tmax = max(t).item();
      KILN_CHECK(pmin >= 0 && pmax <= 1, op, ": every input must be a probability in [0, 1], got values in [",
                 pmin, ", ", pmax, "] (input ", describe(input), "; binary_cross_entropy_with_logits takes logits)");
      KILN_CHECK(tmin >= 0 && tmax <= 1, op, ": every target must be in [0, 1], got values in [", tmin, ", ", tmax,
                 "] (target ", describe(target), ")");
    }
    // PyTorch's (t - 1) max(log1p(-p), -100) - t max(log p, -100)
    l = sub(mul(sub(t, 1.0), clamp(log1p(neg(p)), -100.0, std::nullopt)), mul(t, clamp(log(p), -100.0, std::nullopt)));
  }
  // PyTorch's gradients: dp = g (p - t) / max(p (1 - p), eps) with its float epsilon 1e-12f,
  // dt = -g logit(p) (+-inf at a saturated p, as PyTorch), written in recorded ops so a
  // create_graph backward records them. The weight multiplies afterwards (differentiable).
  auto backward = [p, t](const Tensor& g, const std::vector<bool>& needs) {
    Tensor dp, dt;
    if (needs[0]) dp = div(mul(g, sub(p, t)), clamp(mul(1.0 - p, p), double(1e-12f), std::nullopt));
    if (needs[1]) dt = mul(neg(log(div(p, 1.0 - p))), g);
    return std::vector<Tensor>{dp, dt};
  };
  twice_differentiable(record(l, op, {p, t}, {p, t}, backward));
  if (w.defined()) l = mul(l, w);
  return reduce_pointwise(l, args.reduction, input);
}

Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target, const BceWithLogitsArgs& args) {
  if (auto r = autocast_op(
          AutocastTo::fp32,
          [&](const Tensor& a, const Tensor& b) { return binary_cross_entropy_with_logits(a, b, args); }, logits,
          target))
    return *r;
  const char* op = "binary_cross_entropy_with_logits";
  check_reduction(op, args.reduction);
  const DType dt = pointwise_dtype(op, logits, target, {{"weight", args.weight}, {"pos_weight", args.pos_weight}});
  const Tensor x = logits.to(dt), t = target.to(dt);
  Tensor ls = log_sigmoid(x);
  if (args.pos_weight.defined()) ls = mul(ls, add(mul(sub(args.pos_weight.to(dt), 1.0), t), 1.0));
  Tensor l = sub(mul(1.0 - t, x), ls);  // (1 - t) x - log_weight log_sigmoid(x)
  if (args.weight.defined()) l = mul(l, args.weight.to(dt));
  return reduce_pointwise(l, args.reduction, logits);
}

Tensor kl_div(const Tensor& input, const Tensor& target, const KlDivArgs& args) {
  if (auto r = autocast_op(
          AutocastTo::fp32, [&](const Tensor& a, const Tensor& b) { return kl_div(a, b, args); }, input, target))
    return *r;
  const DType dt = pointwise_dtype("kl_div", input, target);  // the one loss that takes batchmean
  const Tensor x = input.to(dt), t = target.to(dt);
  Tensor l;
  if (args.log_target) {
    l = mul(exp(t), sub(t, x));
  } else {  // xlogy(t, t) - t x; log of 1 where t = 0 keeps NaN out of the gradient there
    const Tensor pos = gt(t, 0.0);
    const TensorOptions o{.dtype = dt, .device = t.device()};
    const Tensor xlogy = where(pos, mul(t, log(where(pos, t, full({}, 1.0, o)))), full({}, 0.0, o));
    l = sub(xlogy, mul(t, x));
  }
  return reduce_pointwise(l, args.reduction, input);
}


// ---------------------------------------------------------------- margin and likelihood losses

namespace {

/// Checks of a loss's floating inputs (and targets of any number dtype, converted) and the
/// dtype it computes in: the promoted one, float32 for 16-bit.
DType loss_dtype(const char* op, std::initializer_list<std::pair<const char*, Tensor>> inputs,
                 std::initializer_list<std::pair<const char*, Tensor>> targets = {}) {
  DType dt = DType::float32;
  bool first = true;
  std::vector<Tensor> all;
  for (const auto& [name, t] : inputs) {
    check_floating(op, t, name);
    dt = first ? t.dtype() : promote_types(dt, t.dtype());
    first = false;
    all.push_back(t);
  }
  for (const auto& [name, t] : targets) {
    KILN_CHECK(t.defined(), op, ": ", name, " is an undefined tensor");
    KILN_CHECK(t.dtype() != DType::bool_, op, ": expected a number ", name, ", got ", describe(t));
    if (t.is_floating_point()) dt = promote_types(dt, t.dtype());
    all.push_back(t);
  }
  for (const Tensor& t : all) check_same_device(op, {all.front(), t});
  return cpu_compute_dtype(dt);
}

Tensor zero_like_scalar(DType dt, Device dev) { return zeros({}, {.dtype = dt, .device = dev}); }

}  // namespace

Tensor margin_ranking_loss(const Tensor& x1, const Tensor& x2, const Tensor& target, double margin,
                           Reduction reduction) {
  if (auto r = autocast_op(
          AutocastTo::fp32, [&](const Tensor& a, const Tensor& b, const Tensor& t) {
            return margin_ranking_loss(a, b, t, margin, reduction);
          }, x1, x2, target))
    return *r;
  const char* op = "margin_ranking_loss";
  check_reduction(op, reduction);
  const DType dt = loss_dtype(op, {{"input1", x1}, {"input2", x2}}, {{"target", target}});
  KILN_CHECK(x1.dim() == x2.dim() && x1.dim() == target.dim(), op, ": input1, input2 and target must have the same "
             "number of dims (they broadcast), got ", describe(x1), ", ", describe(x2), ", ", describe(target));
  // PyTorch's (-target * (input1 - input2) + margin).clamp_min_(0)
  const Tensor l = clamp(add(mul(neg(target.to(dt)), sub(x1.to(dt), x2.to(dt))), margin), 0.0, std::nullopt);
  return reduce_pointwise(l, reduction, x1);
}

Tensor hinge_embedding_loss(const Tensor& input, const Tensor& target, double margin, Reduction reduction) {
  if (auto r = autocast_op(
          AutocastTo::fp32, [&](const Tensor& a, const Tensor& t) { return hinge_embedding_loss(a, t, margin, reduction); },
          input, target))
    return *r;
  const char* op = "hinge_embedding_loss";
  check_reduction(op, reduction);
  const DType dt = loss_dtype(op, {{"input", input}}, {{"target", target}});
  const Tensor x = input.to(dt), t = target.to(dt), z = zero_like_scalar(dt, x.device());
  // PyTorch's: where(t != 1, max(margin - x, 0), 0) + where(t != -1, x, 0) (a target other
  // than 1 or -1 gets both terms)
  const Tensor l = add(where(ne(t, 1.0), clamp(margin - x, 0.0, std::nullopt), z), where(ne(t, -1.0), x, z));
  return reduce_pointwise(l, reduction, input);
}

Tensor soft_margin_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  if (auto r = autocast_op(
          AutocastTo::fp32, [&](const Tensor& a, const Tensor& t) { return soft_margin_loss(a, t, reduction); }, input,
          target))
    return *r;
  const char* op = "soft_margin_loss";
  check_reduction(op, reduction);
  const DType dt = loss_dtype(op, {{"input", input}}, {{"target", target}});
  check_same_shape(op, input, "input", target, "target");
  const Tensor l = log1p(exp(mul(neg(input.to(dt)), target.to(dt))));  // PyTorch's log1p(exp(-input * target))
  return reduce_pointwise(l, reduction, input);
}

Tensor multilabel_soft_margin_loss(const Tensor& input, const Tensor& target, const MultilabelSoftMarginArgs& args) {
  if (auto r = autocast_op(
          AutocastTo::fp32, [&](const Tensor& a, const Tensor& t) { return multilabel_soft_margin_loss(a, t, args); },
          input, target))
    return *r;
  const char* op = "multilabel_soft_margin_loss";
  check_reduction(op, args.reduction);
  const DType dt = loss_dtype(op, {{"input", input}}, {{"target", target}});
  check_same_shape(op, input, "input", target, "target");
  KILN_CHECK(input.dim() >= 1, op, ": expected an input of shape (C) or (N, C), got ", describe(input));
  const Tensor x = input.to(dt), t = target.to(dt);
  // -(t log_sigmoid(x) + (1 - t) log_sigmoid(-x)), weighted, summed over the classes / C
  Tensor l = neg(add(mul(t, log_sigmoid(x)), mul(1.0 - t, log_sigmoid(neg(x)))));
  if (args.weight.defined()) {
    check_floating(op, args.weight, "weight");
    check_same_device(op, {input, args.weight});
    l = mul(l, args.weight.to(dt));
  }
  const int64_t C = input.size(-1);
  l = div(sum(l, {-1}), double(C));
  return reduce_pointwise(l, args.reduction, l);
}

Tensor cosine_embedding_loss(const Tensor& x1, const Tensor& x2, const Tensor& target, double margin,
                             Reduction reduction) {
  if (auto r = autocast_op(
          AutocastTo::fp32, [&](const Tensor& a, const Tensor& b, const Tensor& t) {
            return cosine_embedding_loss(a, b, t, margin, reduction);
          }, x1, x2, target))
    return *r;
  const char* op = "cosine_embedding_loss";
  check_reduction(op, reduction);
  const DType dt = loss_dtype(op, {{"input1", x1}, {"input2", x2}}, {{"target", target}});
  KILN_CHECK((x1.dim() == 1 || x1.dim() == 2) && x1.shape() == x2.shape() && target.dim() == x1.dim() - 1 &&
                 (x1.dim() == 1 || target.size(0) == x1.size(0)), op,
             ": expected inputs (D) with a 0-dim target or (N, D) with a target (N), got ", describe(x1), ", ",
             describe(x2), " and target ", describe(target));
  const int64_t d = x1.dim() - 1;
  const Tensor a = x1.to(dt), b = x2.to(dt), t = target.to(dt);
  constexpr double kEps = double(1e-12f);  // PyTorch's EPSILON, a float constant
  const Tensor prod_sum = sum(mul(a, b), {d});
  const Tensor mag1 = add(sum(mul(a, a), {d}), kEps), mag2 = add(sum(mul(b, b), {d}), kEps);
  const Tensor cos = div(prod_sum, sqrt(mul(mag1, mag2)));
  const Tensor z = zero_like_scalar(dt, a.device());
  const Tensor l = add(where(eq(t, 1.0), 1.0 - cos, z), where(eq(t, -1.0), clamp(sub(cos, margin), 0.0, std::nullopt), z));
  return reduce_pointwise(l, reduction, l);
}

Tensor triplet_margin_loss(const Tensor& anchor, const Tensor& positive, const Tensor& negative,
                           const TripletMarginArgs& args) {
  if (auto r = autocast_op(
          AutocastTo::fp32, [&](const Tensor& a, const Tensor& p, const Tensor& n) {
            return triplet_margin_loss(a, p, n, args);
          }, anchor, positive, negative))
    return *r;
  const char* op = "triplet_margin_loss";
  check_reduction(op, args.reduction);
  KILN_CHECK(args.margin > 0, op, ": margin must be > 0, got ", args.margin);
  const DType dt = loss_dtype(op, {{"anchor", anchor}, {"positive", positive}, {"negative", negative}});
  KILN_CHECK(anchor.dim() == positive.dim() && anchor.dim() == negative.dim() && anchor.dim() >= 1, op,
             ": anchor, positive and negative must have the same number of dims (1 or more), got ", describe(anchor),
             ", ", describe(positive), ", ", describe(negative));
  const Tensor a = anchor.to(dt), p = positive.to(dt), n = negative.to(dt);
  const Tensor d_pos = pairwise_distance(a, p, args.p, args.eps);
  Tensor d_neg = pairwise_distance(a, n, args.p, args.eps);
  if (args.swap) d_neg = minimum(d_neg, pairwise_distance(p, n, args.p, args.eps));
  const Tensor l = clamp(sub(add(d_pos, args.margin), d_neg), 0.0, std::nullopt);
  return reduce_pointwise(l, args.reduction, l);
}

Tensor multi_margin_loss(const Tensor& input, const Tensor& target, const MultiMarginArgs& args) {
  if (auto r = autocast_op(
          AutocastTo::fp32, [&](const Tensor& a) { return multi_margin_loss(a, target, args); }, input))
    return *r;
  const char* op = "multi_margin_loss";
  check_reduction(op, args.reduction);
  KILN_CHECK(args.p == 1 || args.p == 2, op, ": only p == 1 and p == 2 are supported, got ", args.p);
  check_floating(op, input, "input");
  KILN_CHECK(input.dim() == 1 || input.dim() == 2, op, ": expected input of shape (C) or (N, C), got ",
             describe(input));
  const Tensor tgt = class_targets(op, target);
  const Tensor x = input.dim() == 1 ? input.unsqueeze(0) : input;
  const int64_t C = x.size(1);
  KILN_CHECK(tgt.dim() == input.dim() - 1 && (tgt.dim() == 0 || tgt.size(0) == x.size(0)), op, ": expected a target ",
             input.dim() == 1 ? "0-dim" : "(N)", " for input ", describe(input), ", got ", describe(target));
  KILN_CHECK(C > 0, op, ": the input has no classes (", describe(input), ")");
  check_same_device(op, {input, tgt});
  const DType dt = cpu_compute_dtype(input.dtype());
  const int64_t none = std::numeric_limits<int64_t>::min();  // no target is ignored
  Targets T = check_targets(op, tgt.reshape({-1}), C, none, Reduction::sum, dt);
  Tensor t = T.tgt;
  if (!t.is_cpu()) t = where(eq(t, double(none)), zeros({}, {.dtype = DType::int64, .device = t.device()}), t);
  const Tensor xf = x.to(dt), idx = t.unsqueeze(1);
  // z_d = (margin - x_t) + x_d, summed over d != t where z > 0 (z or z^2), times weight[t], / C
  const Tensor z = add(args.margin - gather(xf, 1, idx), xf);
  Tensor h = relu(z);
  if (args.p == 2) h = mul(h, h);
  const Tensor is_target = eq(arange(C, {.dtype = DType::int64, .device = t.device()}).unsqueeze(0), idx);
  h = where(is_target, zero_like_scalar(dt, xf.device()), h);
  if (args.weight.defined()) {
    check_floating(op, args.weight, "weight");
    check_same_device(op, {input, args.weight});
    KILN_CHECK(args.weight.dim() == 1 && args.weight.size(0) == C, op, ": weight must be a vector of ", C,
               " class weights, got ", describe(args.weight));
    h = mul(h, index_select(args.weight.to(dt), 0, t).unsqueeze(1));
  }
  Tensor l = div(sum(h, {1}), double(C));
  if (input.dim() == 1) l = l.reshape({});
  return reduce_pointwise(l, args.reduction, l);
}

Tensor ctc_loss(const Tensor& log_probs, const Tensor& targets, const Tensor& input_lengths,
                const Tensor& target_lengths, const CtcLossArgs& args) {
  const char* op = "ctc_loss";
  check_reduction(op, args.reduction);
  check_floating(op, log_probs, "log_probs");
  KILN_CHECK(log_probs.dim() == 3 || log_probs.dim() == 2, op, ": expected log_probs (T, N, C) or (T, C), got ",
             describe(log_probs));
  if (log_probs.dim() == 2) {
    const Tensor t2 = targets.defined() && targets.dim() == 1 ? targets.unsqueeze(0) : targets;
    CtcLossArgs a = args;
    const Tensor l = ctc_loss(log_probs.unsqueeze(1), t2, input_lengths.reshape({1}), target_lengths.reshape({1}), a);
    return l.dim() == 1 ? l.squeeze(0) : l;
  }
  const int64_t T = log_probs.size(0), N = log_probs.size(1), C = log_probs.size(2);
  KILN_CHECK(args.blank >= 0 && args.blank < C, op, ": blank ", args.blank, " is out of range for ", C, " classes");
  auto host = [&](const Tensor& t, const char* what) {
    KILN_CHECK(t.defined() && !t.is_floating_point() && t.dtype() != DType::bool_, op, ": ", what,
               " must be an integer tensor, got ", t.defined() ? describe(t) : "undefined");
    return t.detach().to(Device::cpu()).to(DType::int64).contiguous().to_vector<int64_t>();
  };
  const std::vector<int64_t> il = host(input_lengths, "input_lengths"), tl = host(target_lengths, "target_lengths");
  const std::vector<int64_t> tv = host(targets, "targets");
  KILN_CHECK(int64_t(il.size()) == N && int64_t(tl.size()) == N, op, ": input_lengths and target_lengths need ", N,
             " entries, got ", il.size(), " and ", tl.size());
  KILN_CHECK(targets.dim() == 1 || (targets.dim() == 2 && targets.size(0) == N), op, ": targets must be (N, S) or "
             "1-D concatenated, got ", describe(targets));
  int64_t S = 0;
  for (int64_t n = 0; n < N; ++n) {
    KILN_CHECK(il[size_t(n)] >= 0 && il[size_t(n)] <= T, op, ": input length ", il[size_t(n)], " of sample ", n,
               " is outside [0, ", T, "]");
    KILN_CHECK(tl[size_t(n)] >= 0, op, ": target length of sample ", n, " is negative");
    S = std::max(S, tl[size_t(n)]);
  }
  // the extended labels: blank, l1, blank, l2, ..., blank (L = 2 S + 1), and where the
  // skip from s - 2 is allowed (a label differing from the one two back)
  const int64_t L = 2 * S + 1;
  std::vector<int64_t> ext(size_t(N * L), args.blank);
  std::vector<uint8_t> skip(size_t(N * L), 0), first(size_t(N * L), 0);
  std::vector<int64_t> ends(size_t(N * 2), 0);
  std::vector<uint8_t> end_ok(size_t(N * 2), 0);
  int64_t offset = 0;
  for (int64_t n = 0; n < N; ++n) {
    const int64_t Sn = tl[size_t(n)];
    KILN_CHECK(targets.dim() == 1 || Sn <= targets.size(1), op, ": target length ", Sn, " of sample ", n,
               " exceeds the targets' width ", targets.size(1));
    for (int64_t j = 0; j < Sn; ++j) {
      const int64_t c = targets.dim() == 1 ? tv[size_t(offset + j)] : tv[size_t(n * targets.size(1) + j)];
      KILN_CHECK(c >= 0 && c < C && c != args.blank, op, ": target ", c, " of sample ", n,
                 " must be a class in [0, ", C, ") other than the blank ", args.blank);
      ext[size_t(n * L + 2 * j + 1)] = c;
      if (j > 0 && c != ext[size_t(n * L + 2 * j - 1)]) skip[size_t(n * L + 2 * j + 1)] = 1;
    }
    if (targets.dim() == 1) KILN_CHECK(offset + Sn <= int64_t(tv.size()), op, ": target lengths exceed the targets");
    offset += Sn;
    first[size_t(n * L)] = 1;
    if (Sn > 0) first[size_t(n * L + 1)] = 1;
    ends[size_t(2 * n)] = 2 * Sn;
    ends[size_t(2 * n + 1)] = std::max<int64_t>(2 * Sn - 1, 0);
    end_ok[size_t(2 * n)] = 1;
    end_ok[size_t(2 * n + 1)] = Sn > 0;
  }
  const Device dev = log_probs.device();
  const DType dt = cpu_compute_dtype(log_probs.dtype());
  auto boolean = [&](const std::vector<uint8_t>& v, Shape s) {
    return from_vector(v, s, {.dtype = DType::uint8}).to(DType::bool_).to(dev);
  };
  const Tensor lp = log_probs.to(dt);
  const Tensor lab = from_vector(ext, {N, L}, {.dtype = DType::int64, .device = dev});
  const Tensor skip_ok = boolean(skip, {N, L}), start = boolean(first, {N, L});
  const double kNeg = -1e30;  // -inf that keeps gradients finite
  const Tensor neg_inf = full({}, kNeg, {.dtype = dt, .device = dev});
  const TensorOptions fo{.dtype = dt, .device = dev};
  const Tensor neg1 = full({N, 1}, kNeg, fo), neg2 = full({N, 2}, kNeg, fo);
  // each sample's frames, uploaded once: the recursion's steps and PyTorch's exp term read them
  std::vector<uint8_t> frames(size_t(T * N));
  int64_t longest = 0;
  for (int64_t n = 0; n < N; ++n) longest = std::max(longest, il[size_t(n)]);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < N; ++n) frames[size_t(t * N + n)] = t < il[size_t(n)];
  const Tensor in_frame = boolean(frames, {T, N, 1});
  Tensor alpha = where(start, gather(lp.select(0, 0), 1, lab), neg_inf);
  for (int64_t t = 1; t < longest; ++t) {
    const Tensor a1 = cat({neg1, alpha.narrow(1, 0, L - 1)}, 1);
    const Tensor a2 = where(skip_ok, L > 1 ? cat({neg2, alpha.narrow(1, 0, L - 2)}, 1) : neg1, neg_inf);
    const Tensor next = add(logsumexp(stack({alpha, a1, a2}, 0), {0}), gather(lp.select(0, t), 1, lab));
    alpha = where(in_frame.select(0, t), next, alpha);
  }
  const Tensor end_at = from_vector(ends, {N, 2}, {.dtype = DType::int64, .device = dev});
  const Tensor fin = where(boolean(end_ok, {N, 2}), gather(alpha, 1, end_at), neg_inf);
  Tensor loss = neg(logsumexp(fin, {1}));
  // no path: inf, or 0 with zero_infinity; no input at all: 0 for an empty target (PyTorch's),
  // else no path
  std::vector<uint8_t> no_input(static_cast<size_t>(N)), nothing(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) {
    no_input[size_t(n)] = il[size_t(n)] == 0 && tl[size_t(n)] > 0;
    nothing[size_t(n)] = il[size_t(n)] == 0 && tl[size_t(n)] == 0;
  }
  const Tensor impossible = logical_or(gt(loss.detach(), 1e29), boolean(no_input, {N}));
  // PyTorch's gradient adds exp(log_probs) over each sample's frames (a term of value 0)
  const Tensor e = exp(lp);
  const Tensor zero_term = sum(where(in_frame, sub(e, e.detach()), zero_like_scalar(dt, dev)), {0, 2});
  loss = where(boolean(nothing, {N}), 0.0, add(loss, zero_term));
  loss = where(impossible, args.zero_infinity ? 0.0 : double(INFINITY), loss);
  const DType out = log_probs.dtype();
  auto back = [&](const Tensor& r) { return r.dtype() == out ? r : r.to(out); };
  if (args.reduction == Reduction::none) return back(loss);
  if (args.reduction == Reduction::sum) return back(sum(loss));
  std::vector<double> len(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) len[size_t(n)] = double(std::max<int64_t>(tl[size_t(n)], 1));
  return back(mean(div(loss, from_vector(len, {N}, {.dtype = dt, .device = dev}))));
}

Tensor multilabel_margin_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  if (auto r = autocast_op(
          AutocastTo::fp32, [&](const Tensor& a) { return multilabel_margin_loss(a, target, reduction); }, input))
    return *r;
  const char* op = "multilabel_margin_loss";
  check_reduction(op, reduction);
  check_floating(op, input, "input");
  KILN_CHECK(input.dim() == 1 || input.dim() == 2, op, ": expected input of shape (C) or (N, C), got ", describe(input));
  KILN_CHECK(target.defined() && target.shape() == input.shape() && !target.is_floating_point() &&
                 target.dtype() != DType::bool_,
             op, ": expected an integer target of the input's shape ", shape_str(input.shape()), ", got ",
             target.defined() ? describe(target) : "undefined");
  check_same_device(op, {input, target});
  const Tensor x = input.dim() == 1 ? input.unsqueeze(0) : input;
  const int64_t N = x.size(0), C = x.size(1);
  KILN_CHECK(C > 0, op, ": the input has no classes (", describe(input), ")");
  // each row's classes up to the first -1, read on the host
  const std::vector<int64_t> tv = target.detach().to(Device::cpu()).to(DType::int64).contiguous().to_vector<int64_t>();
  std::vector<int64_t> idx(size_t(N * C), 0);
  std::vector<uint8_t> valid(size_t(N * C), 0), in_set(size_t(N * C), 0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < C; ++j) {
      const int64_t c = tv[size_t(n * C + j)];
      if (c < 0) break;
      KILN_CHECK(c < C, op, ": target class ", c, " is out of range for ", C, " classes (", describe(input), ")");
      idx[size_t(n * C + j)] = c;
      valid[size_t(n * C + j)] = 1;
      in_set[size_t(n * C + c)] = 1;
    }
  const Device dev = x.device();
  const Tensor ti = from_vector(idx, {N, C}, {.dtype = DType::int64, .device = dev});
  const Tensor tv_ = from_vector(valid, {N, C}, {.dtype = DType::uint8}).to(DType::bool_).to(dev);
  const Tensor ts = from_vector(in_set, {N, C}, {.dtype = DType::uint8}).to(DType::bool_).to(dev);
  const DType dt = cpu_compute_dtype(input.dtype());
  const Tensor xf = x.to(dt);
  // pairs (n, j, i): target j against non-target i
  const Tensor h = relu(add(neg(sub(gather(xf, 1, ti), 1.0)).unsqueeze(2), xf.unsqueeze(1)));  // 1 - x_j + x_i
  const Tensor pair = logical_and(tv_.unsqueeze(2), logical_not(ts).unsqueeze(1));
  Tensor l = div(sum(where(pair, h, zero_like_scalar(dt, dev)), {1, 2}), double(C));
  if (input.dim() == 1) l = l.reshape({});
  return reduce_pointwise(l, reduction, l);
}

Tensor poisson_nll_loss(const Tensor& input, const Tensor& target, const PoissonNllArgs& args) {
  if (auto r = autocast_op(
          AutocastTo::fp32, [&](const Tensor& a, const Tensor& t) { return poisson_nll_loss(a, t, args); }, input, target))
    return *r;
  const char* op = "poisson_nll_loss";
  check_reduction(op, args.reduction);
  const DType dt = loss_dtype(op, {{"input", input}}, {{"target", target}});
  check_same_shape(op, input, "input", target, "target");
  const Tensor x = input.to(dt), t = target.to(dt);
  Tensor l = args.log_input ? sub(exp(x), mul(t, x)) : sub(x, mul(t, log(add(x, args.eps))));
  if (args.full) {  // Stirling's approximation of log(t!), for t > 1
    const Tensor stirling = add(sub(mul(t, log(t)), t), mul(log(mul(t, 2 * std::numbers::pi)), 0.5));
    l = add(l, masked_fill(stirling, le(t, 1.0), 0.0));
  }
  return reduce_pointwise(l, args.reduction, input);
}

Tensor gaussian_nll_loss(const Tensor& input, const Tensor& target, const Tensor& var, const GaussianNllArgs& args) {
  if (auto r = autocast_op(
          AutocastTo::fp32, [&](const Tensor& a, const Tensor& t, const Tensor& v) {
            return gaussian_nll_loss(a, t, v, args);
          }, input, target, var))
    return *r;
  const char* op = "gaussian_nll_loss";
  check_reduction(op, args.reduction);
  const DType dt = loss_dtype(op, {{"input", input}, {"target", target}, {"var", var}});
  Tensor v = var;
  if (v.shape() != input.shape()) {
    const Shape& is = input.shape();
    const Shape& vs = v.shape();
    int64_t differing = 0;
    if (is.size() == vs.size())
      for (size_t i = 0; i < is.size(); ++i)
        if (is[i] != vs[i]) differing += vs[i];
    if (input.dim() >= 1 && Shape(is.begin(), is.end() - 1) == vs) v = v.unsqueeze(-1);  // one var per sample
    else KILN_CHECK(is.size() == vs.size() && differing == 1, op, ": var of shape ", shape_str(vs), " does not fit "
                    "input of shape ", shape_str(is), " (expected the input's shape, that shape without its last dim, "
                    "or it with one dim of size 1)");
  }
  KILN_CHECK(any(lt(v, 0.0)).item() == 0, op, ": var has negative entries (", describe(var), ")");
  const Tensor x = input.to(dt), t = target.to(dt), vf = v.to(dt);
  // PyTorch clamps var to eps under no_grad: the value is clamped, the gradient is var's own
  const Tensor vc = add(vf, sub(clamp(vf.detach(), args.eps, std::nullopt), vf.detach()));
  const Tensor d = sub(x, t);
  Tensor l = mul(add(log(vc), div(mul(d, d), vc)), 0.5);
  if (args.full) l = add(l, 0.5 * std::log(2 * std::numbers::pi));
  return reduce_pointwise(l, args.reduction, l);
}

Tensor gaussian_nll_loss(const Tensor& input, const Tensor& target, double var, const GaussianNllArgs& args) {
  KILN_CHECK(var >= 0, "gaussian_nll_loss: var must be >= 0, got ", var);
  check_floating("gaussian_nll_loss", input, "input");
  return gaussian_nll_loss(input, target, full(input.shape(), var, {.dtype = input.dtype(), .device = input.device()}),
                           args);
}
}  // namespace kiln
