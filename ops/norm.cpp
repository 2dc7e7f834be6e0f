// Normalisation ops: batch_norm and layer_norm. Argument checks, output allocation, the
// call through dispatch to the fused kernels (ops/cpu/norm.cpp) and the backward lambda.
#include "kiln/ops/norm.h"
#include "kiln/core/autocast.h"
#include "kiln/core/autograd.h"
#include "kiln/ops/kernels/norm.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/helpers.h"
#include "kiln/ops/reduce.h"

namespace kiln {

namespace {

void* ptr_or_null(const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; }

// Kernels run in float32/float64 on every device: 16-bit inputs are upcast and the result
// rounded back (the CUDA batch_norm / layer_norm kernels take float32 and float64 only).
DType compute_dtype(const Tensor& x) { return cpu_compute_dtype(x.dtype()); }


// Checks an optional per-channel / per-feature parameter.
void check_param(const char* op, const Tensor& p, const char* what, const Shape& expected, const Tensor& x) {
  if (!p.defined()) return;
  KILN_CHECK(p.is_floating_point(), op, ": ", what, " must be floating point, got ", describe(p));
  KILN_CHECK(p.shape() == expected, op, ": ", what, " has shape ", shape_str(p.shape()), ", expected ",
             shape_str(expected), " for input of shape ", shape_str(x.shape()));
}

// A tensor in dtype dt, contiguous (the same handle when it already is).
Tensor as_compute(const Tensor& t, DType dt) { return t.defined() ? t.to(dt).contiguous() : Tensor(); }

Tensor cast_back(const Tensor& t, DType d) { return (t.defined() && t.dtype() != d) ? t.to(d) : t; }

}  // namespace

// batch_norm runs in its input's dtype, also under autocast (PyTorch's policy): the
// parameters and statistics are float32, a 16-bit x gives a 16-bit output. On the CPU a
// 16-bit x stays 16-bit: the kernel widens it as it reads it and rounds out and dx as it
// writes them (ops/kernels/norm.h), the same values as converting it first, with no
// float32 copies to make and keep. Elsewhere it is computed in float32 and rounded back.
Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                  const Tensor& running_var, bool training, double momentum, double eps) {
  const char* op = "batch_norm";
  KILN_CHECK(x.defined(), "batch_norm: input is undefined");
  KILN_CHECK(x.dim() >= 2, "batch_norm: expected input of shape (N, C, ...) with at least 2 dims, got shape ",
             shape_str(x.shape()));
  check_floating(op, x);
  const int64_t N = x.size(0), C = x.size(1), S = C > 0 && N > 0 ? x.numel() / (N * C) : 0;
  check_param(op, weight, "weight", {C}, x);
  check_param(op, bias, "bias", {C}, x);
  check_param(op, running_mean, "running_mean", {C}, x);
  check_param(op, running_var, "running_var", {C}, x);
  KILN_CHECK(running_mean.defined() == running_var.defined(),
             "batch_norm: running_mean and running_var must both be given or both be undefined");
  KILN_CHECK(training || running_mean.defined(),
             "batch_norm: inference (training=false) needs running_mean and running_var, got undefined tensors "
             "(input shape ", shape_str(x.shape()), ")");
  KILN_CHECK(!training || N * S != 1, "batch_norm: expected more than 1 value per channel when training, got input "
             "of shape ", shape_str(x.shape()));
  KILN_CHECK(eps >= 0 && (!training || eps > 0), "batch_norm: eps must be ", training ? "> 0 when training" : ">= 0",
             ", got ", eps, " (a constant channel would divide 0 by 0)");
  check_same_device(op, {x, weight, bias, running_mean, running_var});
  if (x.numel() == 0) {  // an empty batch (PyTorch): empty output, statistics unchanged, zero gradients
    const Shape xshape = x.shape();
    const Tensor wt = weight, bs = bias;
    Tensor out = Tensor::empty(xshape, x.dtype(), x.device());
    return record(out, op, {x, weight, bias},
                  [xshape, wt, bs](const Tensor& g, const std::vector<bool>& needs) -> std::vector<Tensor> {
                    auto z = [&](const Shape& s, const Tensor& like) {
                      return zeros(s, {.dtype = like.defined() ? like.dtype() : g.dtype(), .device = g.device()});
                    };
                    return {needs[0] ? z(xshape, g) : Tensor(), needs[1] ? z(wt.shape(), wt) : Tensor(),
                            needs[2] ? z(bs.shape(), bs) : Tensor()};
                  });
  }

  const bool x16 = x.is_cpu() && is_half(x.dtype());
  const DType dt = compute_dtype(x), xk = x16 ? x.dtype() : dt;  // xk: the activations' dtype in the kernel
  Tensor out, xc, wc, smean, sinv;
  {
    NoGradGuard ng;
    xc = as_compute(x, xk);
    wc = as_compute(weight, dt);
    Tensor bc = as_compute(bias, dt);
    out = Tensor::empty(x.shape(), xk, x.device());
    smean = Tensor::empty({C}, dt, x.device());
    sinv = Tensor::empty({C}, dt, x.device());
    auto* k = kernel<BatchNormKernels>(Op::batch_norm, x.device());
    if (training) {
      // Running stats are updated in place by the kernel; convert/copy back when they are
      // not already contiguous tensors of the compute dtype.
      Tensor rm = as_compute(running_mean, dt), rv = as_compute(running_var, dt);
      k->forward_train(xk, xc.raw_data(), ptr_or_null(wc), ptr_or_null(bc), out.raw_data(), smean.raw_data(),
                       sinv.raw_data(), ptr_or_null(rm), ptr_or_null(rv), N, C, S, momentum, eps);
      if (rm.defined()) rm.bump_version();  // written by the kernel (the copies below bump the originals)
      if (rv.defined()) rv.bump_version();
      if (rm.defined() && !rm.is_same(running_mean)) Tensor(running_mean).copy_(rm);
      if (rv.defined() && !rv.is_same(running_var)) Tensor(running_var).copy_(rv);
    } else {
      Tensor rm = as_compute(running_mean, dt), rv = as_compute(running_var, dt);
      k->forward_eval(xk, xc.raw_data(), ptr_or_null(wc), ptr_or_null(bc), rm.raw_data(), rv.raw_data(),
                      out.raw_data(), smean.raw_data(), sinv.raw_data(), N, C, S, eps);
    }
    out = cast_back(out, x.dtype());
  }
  Tensor xd = xc.detach(), wd = wc.defined() ? wc.detach() : Tensor();
  const DType xdt = x.dtype(), wdt = weight.defined() ? weight.dtype() : dt, bdt = bias.defined() ? bias.dtype() : dt;
  Shape xshape = x.shape();
  return record(out, op, {x, weight, bias}, {xd, wd, smean, sinv},
                [=](const Tensor& g, const std::vector<bool>& needs) -> std::vector<Tensor> {
                  Tensor gc = as_compute(g, xk);
                  Tensor dx = needs[0] ? Tensor::empty(xshape, xk, gc.device()) : Tensor();
                  Tensor dw = needs[1] ? Tensor::empty({C}, dt, gc.device()) : Tensor();
                  Tensor db = needs[2] ? Tensor::empty({C}, dt, gc.device()) : Tensor();
                  kernel<BatchNormKernels>(Op::batch_norm, gc.device())
                      ->backward(xk, gc.raw_data(), xd.raw_data(), ptr_or_null(wd), smean.raw_data(),
                                 sinv.raw_data(), ptr_or_null(dx), ptr_or_null(dw), ptr_or_null(db), N, C, S,
                                 training);
                  return {cast_back(dx, xdt), cast_back(dw, wdt), cast_back(db, bdt)};
                });
}

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  if (auto r = autocast_op(
          AutocastTo::fp32,
          [&](const Tensor& xc, const Tensor& wc, const Tensor& bc) {
            return layer_norm(xc, normalized_shape, wc, bc, eps);
          },
          x, weight, bias))
    return *r;  // autocast: the op ran on cast inputs
  const char* op = "layer_norm";
  KILN_CHECK(x.defined(), "layer_norm: input is undefined");
  check_floating(op, x);
  const int64_t nd = int64_t(normalized_shape.size());
  KILN_CHECK(nd >= 1, "layer_norm: normalized_shape must have at least one dim (input shape ",
             shape_str(x.shape()), ")");
  bool ok = x.dim() >= nd;
  for (int64_t i = 0; ok && i < nd; ++i) ok = x.size(x.dim() - nd + i) == normalized_shape[i];
  KILN_CHECK(ok, "layer_norm: normalized_shape ", shape_str(normalized_shape),
             " does not match the trailing dims of input of shape ", shape_str(x.shape()));
  check_param(op, weight, "weight", normalized_shape, x);
  check_param(op, bias, "bias", normalized_shape, x);
  KILN_CHECK(eps >= 0, "layer_norm: eps must be >= 0, got ", eps);
  check_same_device(op, {x, weight, bias});

  const int64_t D = shape_numel(normalized_shape);
  const int64_t R = D > 0 ? x.numel() / D : 0;
  const DType dt = compute_dtype(x);
  Tensor out, xc, wc, smean, srstd;
  {
    NoGradGuard ng;
    xc = as_compute(x, dt);
    wc = as_compute(weight, dt);
    Tensor bc = as_compute(bias, dt);
    out = Tensor::empty(x.shape(), dt, x.device());
    smean = Tensor::empty({R}, dt, x.device());
    srstd = Tensor::empty({R}, dt, x.device());
    kernel<LayerNormKernels>(Op::layer_norm, x.device())
        ->forward(dt, xc.raw_data(), ptr_or_null(wc), ptr_or_null(bc), out.raw_data(), smean.raw_data(),
                  srstd.raw_data(), R, D, eps);
    out = cast_back(out, x.dtype());
  }
  Tensor xd = xc.detach(), wd = wc.defined() ? wc.detach() : Tensor();
  const DType xdt = x.dtype(), wdt = weight.defined() ? weight.dtype() : dt, bdt = bias.defined() ? bias.dtype() : dt;
  Shape xshape = x.shape();
  return record(out, op, {x, weight, bias}, {xd, wd, smean, srstd},
                [=](const Tensor& g, const std::vector<bool>& needs) -> std::vector<Tensor> {
                  Tensor gc = as_compute(g, dt);
                  Tensor dx = needs[0] ? Tensor::empty(xshape, dt, gc.device()) : Tensor();
                  Tensor dw = needs[1] ? Tensor::empty(normalized_shape, dt, gc.device()) : Tensor();
                  Tensor db = needs[2] ? Tensor::empty(normalized_shape, dt, gc.device()) : Tensor();
                  kernel<LayerNormKernels>(Op::layer_norm, gc.device())
                      ->backward(dt, gc.raw_data(), xd.raw_data(), ptr_or_null(wd), smean.raw_data(),
                                 srstd.raw_data(), ptr_or_null(dx), ptr_or_null(dw), ptr_or_null(db), R, D);
                  return {cast_back(dx, xdt), cast_back(dw, wdt), cast_back(db, bdt)};
                });
}

Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight, const Tensor& bias, double eps) {
  if (auto r = autocast_op(
          AutocastTo::fp32,
          [&](const Tensor& xc, const Tensor& wc, const Tensor& bc) { return group_norm(xc, num_groups, wc, bc, eps); },
          x, weight, bias))
    return *r;  // autocast: the op ran on cast inputs
  const char* op = "group_norm";
  KILN_CHECK(x.defined(), "group_norm: input is undefined");
  check_floating(op, x);
  KILN_CHECK(x.dim() >= 2, "group_norm: expected an input of at least 2 dims (N, C, ...), got shape ",
             shape_str(x.shape()));
  const int64_t N = x.size(0), C = x.size(1);
  KILN_CHECK(num_groups > 0 && C % num_groups == 0, "group_norm: the ", C, " channels of input of shape ",
             shape_str(x.shape()), " must split into num_groups = ", num_groups, " equal groups");
  check_param(op, weight, "weight", {C}, x);
  check_param(op, bias, "bias", {C}, x);
  KILN_CHECK(eps >= 0, "group_norm: eps must be >= 0, got ", eps);
  check_same_device(op, {x, weight, bias});
  int64_t D = C / num_groups;  // the elements of one group of one sample
  for (int64_t d = 2; d < x.dim(); ++d) D *= x.size(d);
  Tensor y = layer_norm(x.reshape({N, num_groups, D}), {D}, Tensor(), Tensor(), eps).reshape(x.shape());
  Shape ps(size_t(x.dim()), 1);
  ps[1] = C;
  if (weight.defined()) y = mul(y, weight.reshape(ps));
  if (bias.defined()) y = add(y, bias.reshape(ps));
  return y;
}

Tensor instance_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                     const Tensor& bias, bool use_input_stats, double momentum, double eps) {
  KILN_CHECK(x.defined() && x.dim() >= 3, "instance_norm: expected an input (N, C, ...) with at least one spatial "
             "dim, got ", x.defined() ? shape_str(x.shape()) : std::string("undefined"));
  const int64_t N = x.size(0), C = x.size(1);
  KILN_CHECK(running_mean.defined() == running_var.defined(), "instance_norm: give both running_mean and "
             "running_var, or neither");
  if (running_mean.defined()) {
    check_param("instance_norm", running_mean, "running_mean", {C}, x);
    check_param("instance_norm", running_var, "running_var", {C}, x);
  }
  if (!use_input_stats) {
    KILN_CHECK(running_mean.defined(), "instance_norm: use_input_stats = false needs running_mean and running_var");
    return batch_norm(x, weight, bias, running_mean, running_var, /*training=*/false, momentum, eps);
  }
  const int64_t positions = x.numel() / std::max<int64_t>(N * C, 1);
  KILN_CHECK(positions > 1 || x.numel() == 0, "instance_norm: expected more than 1 spatial element when training, "
             "got input size ", shape_str(x.shape()));
  const Tensor y = group_norm(x, C, weight, bias, eps);
  if (running_mean.defined() && N > 0) {
    NoGradGuard ng;
    const Tensor flat = x.detach().reshape({N, C, positions}).to(running_mean.dtype());
    // PyTorch's batch_norm over (1, N*C, ...) on the repeated running stats, then their mean over N
    auto update = [&](Tensor r, const Tensor& stat) {
      r.copy_(mean(add(mul(r.unsqueeze(0).expand({N, C}), 1.0 - momentum), mul(stat, momentum)), {0}));
    };
    update(running_mean, mean(flat, {2}));
    update(running_var, var(flat, {2}, /*unbiased=*/true));
  }
  return y;
}

}  // namespace kiln
