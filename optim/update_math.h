// Per-element optimizer math: one KILN_HD update functor per optimizer (PyTorch's
// single-tensor formulas, foreach=False), shared by the CPU loops (optim/update_cpu.cpp)
// and the multi-tensor CUDA kernels (optim/multi_tensor_apply.h), plus the GradScaler's
// unscale-and-check step.
#pragma once
#include <cmath>
#include "kiln/core/macros.h"

namespace kiln::optim {

/// Scalars of one SGD step for one parameter group (host computes them once).
struct SgdScalars {
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
  bool first = false;  ///< the momentum buffer is initialised to the (decayed) gradient
};
/// Scalars of one Adam/AdamW step (bias corrections folded in on the host).
struct AdamScalars {
  double lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;
  double step_size = 0;         ///< lr / (1 - beta1^step)
  double bias_correction2_sqrt = 1;  ///< sqrt(1 - beta2^step)
  bool decoupled = false;       ///< AdamW: p *= 1 - lr*wd instead of g += wd*p
  bool amsgrad = false;
};
/// Scalars of one RMSprop step.
struct RmspropScalars {
  double lr = 0, alpha = 0, eps = 0, weight_decay = 0, momentum = 0;
  bool centered = false;
};

/// The scalars converted once to the compute type T (so loops and kernels do T math).
template <class T> struct SgdCoeffs {
  T lr, momentum, one_minus_dampening, weight_decay;
  bool nesterov, first;
  KILN_HD explicit SgdCoeffs(const SgdScalars& s)
      : lr(T(s.lr)), momentum(T(s.momentum)), one_minus_dampening(T(1.0 - s.dampening)),
        weight_decay(T(s.weight_decay)), nesterov(s.nesterov), first(s.first) {}
};
template <class T> struct AdamCoeffs {
  T beta1, one_minus_beta1, beta2, one_minus_beta2, eps, weight_decay, decay_factor, step_size,
      bias_correction2_sqrt;
  bool decoupled, amsgrad;
  KILN_HD explicit AdamCoeffs(const AdamScalars& s)
      : beta1(T(s.beta1)), one_minus_beta1(T(1.0 - s.beta1)), beta2(T(s.beta2)),
        one_minus_beta2(T(1.0 - s.beta2)), eps(T(s.eps)), weight_decay(T(s.weight_decay)),
        decay_factor(T(1.0 - s.lr * s.weight_decay)), step_size(T(s.step_size)),
        bias_correction2_sqrt(T(s.bias_correction2_sqrt)), decoupled(s.decoupled), amsgrad(s.amsgrad) {}
};
template <class T> struct RmspropCoeffs {
  T lr, alpha, one_minus_alpha, eps, weight_decay, momentum;
  bool centered;
  KILN_HD explicit RmspropCoeffs(const RmspropScalars& s)
      : lr(T(s.lr)), alpha(T(s.alpha)), one_minus_alpha(T(1.0 - s.alpha)), eps(T(s.eps)),
        weight_decay(T(s.weight_decay)), momentum(T(s.momentum)), centered(s.centered) {}
};

template <class T> KILN_HD_INLINE T opt_sqrt(T x) {
#if defined(__CUDA_ARCH__)
  return sqrt(x);
#else
  return std::sqrt(x);
#endif
}
template <class T> KILN_HD_INLINE T opt_pow(T x, T y) {
#if defined(__CUDA_ARCH__)
  return pow(x, y);
#else
  return std::pow(x, y);
#endif
}
template <class T> KILN_HD_INLINE bool opt_isfinite(T x) {
#if defined(__CUDA_ARCH__)
  return isfinite(x);
#else
  return std::isfinite(x);
#endif
}

/// SGD (torch.optim.SGD): g += wd*p; buf = first ? g : momentum*buf + (1-dampening)*g;
/// g = nesterov ? g + momentum*buf : buf; p -= lr*g. `buf` is ignored when momentum == 0.
template <class T>
KILN_HD_INLINE void sgd_update(T& p, T g, T& buf, const SgdCoeffs<T>& c) {
  if (c.weight_decay != T(0)) g = g + c.weight_decay * p;
  if (c.momentum != T(0)) {
    T b = c.first ? g : c.momentum * buf + c.one_minus_dampening * g;
    buf = b;
    g = c.nesterov ? g + c.momentum * b : b;
  }
  p = p - c.lr * g;
}

/// Adam / AdamW (torch.optim.Adam, AdamW):
///   AdamW: p *= 1 - lr*wd      Adam: g += wd*p
///   m = beta1*m + (1-beta1)*g;  v = beta2*v + (1-beta2)*g*g;  vmax = max(vmax, v) (amsgrad)
///   p -= step_size * m / (sqrt(v or vmax) / sqrt(1-beta2^t) + eps)
/// `vmax` is ignored unless amsgrad (pass a dummy).
template <class T>
KILN_HD_INLINE void adam_update(T& p, T g, T& m, T& v, T& vmax, const AdamCoeffs<T>& c) {
  // flags are applied with selects, not branches, so CPU loops vectorize
  const bool wd = c.weight_decay != T(0);
  const T pv = (wd && c.decoupled) ? p * c.decay_factor : p;
  g = (wd && !c.decoupled) ? g + c.weight_decay * pv : g;
  const T mv = c.beta1 * m + c.one_minus_beta1 * g;
  const T vv = c.beta2 * v + c.one_minus_beta2 * g * g;
  m = mv;
  v = vv;
  const T old_max = vmax;
  const T mx = old_max > vv ? old_max : vv;
  vmax = c.amsgrad ? mx : old_max;
  const T vd = c.amsgrad ? mx : vv;
  const T denom = opt_sqrt(vd) / c.bias_correction2_sqrt + c.eps;
  p = pv - c.step_size * (mv / denom);
}

/// RMSprop (torch.optim.RMSprop):
///   g += wd*p; sq = alpha*sq + (1-alpha)*g*g
///   centered: ga = alpha*ga + (1-alpha)*g; avg = sqrt(sq - ga*ga) + eps, else sqrt(sq) + eps
///   momentum > 0: buf = momentum*buf + g/avg; p -= lr*buf    else p -= lr*g/avg
/// `grad_avg` is ignored unless centered, `buf` unless momentum > 0 (pass dummies).
template <class T>
KILN_HD_INLINE void rmsprop_update(T& p, T g, T& square_avg, T& grad_avg, T& buf, const RmspropCoeffs<T>& c) {
  g = c.weight_decay != T(0) ? g + c.weight_decay * p : g;
  const T sq = c.alpha * square_avg + c.one_minus_alpha * g * g;
  square_avg = sq;
  const T old_ga = grad_avg;
  const T ga = c.alpha * old_ga + c.one_minus_alpha * g;
  grad_avg = c.centered ? ga : old_ga;
  const T avg = opt_sqrt(c.centered ? sq - ga * ga : sq) + c.eps;
  const bool mom = c.momentum > T(0);
  const T old_buf = buf;
  const T b = c.momentum * old_buf + g / avg;
  buf = mom ? b : old_buf;
  p = mom ? p - c.lr * b : p - c.lr * (g / avg);
}

/// GradScaler's per-element step: multiplies g by inv_scale and returns true when the
/// original value was inf or NaN (PyTorch's _amp_foreach_non_finite_check_and_unscale_).
template <class T>
KILN_HD_INLINE bool unscale_check(T& g, T inv_scale) {
  T v = g;
  g = v * inv_scale;
  return !opt_isfinite(v);
}

}  // namespace kiln::optim
