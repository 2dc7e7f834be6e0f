// Losses: cross_entropy (fused log-softmax + pick + label smoothing), nll_loss and mse_loss:
// argument and target checks, reductions, the call through dispatch and the fused backward;
// then the pointwise losses, compositions of recorded elementwise ops (l1, smooth_l1,
// huber, binary_cross_entropy with its own backward, bce with logits, kl_div).
#include "kiln/ops/loss.h"
#include "kiln/core/autocast.h"
#include <cmath>
#include <limits>
#include "kiln/core/autograd.h"
#include "kiln/core/cuda.h"
#include "kiln/ops/kernels/loss.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/helpers.h"
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

/// Checks of a pointwise loss's input and target (and optional weights broadcastable to
/// the input) and the dtype it computes in: the promoted one, float32 for 16-bit.
DType pointwise_dtype(const char* op, const Tensor& input, const Tensor& target,
                      std::initializer_list<std::pair<const char*, Tensor>> weights = {}) {
  check_floating(op, input, "input");
  check_floating(op, target, "target");
  check_same_device(op, {input, target});
  KILN_CHECK(input.shape() == target.shape(), op, ": input shape ", shape_str(input.shape()), " and target shape ",
             shape_str(target.shape()), " must match (got ", describe(input), " and ", describe(target), ")");
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

}  // namespace kiln
