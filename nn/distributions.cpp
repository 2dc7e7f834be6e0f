// torch.distributions' formulas in kiln's recorded ops (nn/distributions.h). Each method is
// written operation for operation as PyTorch's Python, so float64 results agree to the bit
// where the ops do; the samplers of Gamma and Poisson run on the host from a counter-based
// Philox stream per element (deterministic under manual_seed).
#include "kiln/nn/distributions.h"
#include "kiln/core/finfo.h"
#include <cmath>
#include <limits>
#include <tuple>
#include "kiln/core/autograd.h"
#include "kiln/core/rng.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/helpers.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/loss.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/sampling.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/ops/special_math.h"

namespace kiln::distributions {
namespace {

const double kLogSqrt2Pi = std::log(std::sqrt(2 * M_PI));

std::pair<Tensor, Tensor> broadcast_all(const char* who, const Tensor& a, const Tensor& b) {
  KILN_CHECK(a.defined() && b.defined(), who, ": a parameter is undefined");
  KILN_CHECK(a.is_floating_point() && b.is_floating_point(), who, ": parameters must be floating-point, got ",
             describe(a), " and ", describe(b));
  const Shape s = broadcast_shapes(a.shape(), b.shape(), who);
  return {a.expand(s), b.expand(s)};
}

Tensor number(double v) { return scalar_tensor(v); }
Tensor rsub(double a, const Tensor& b) { return a - b; }  // PyTorch's `a - tensor`  // PyTorch's default dtype (float32) for a Python float

// PyTorch's validate_args: every entry satisfies the constraint (NaN fails it).
void check_constraint(const char* who, const char* param, const Tensor& ok, const char* constraint, const Tensor& t) {
  NoGradGuard ng;
  KILN_CHECK(all(ok).item<bool>(), who, ": every entry of ", param, " must be ", constraint, ", got ", describe(t));
}
void check_positive(const char* who, const char* param, const Tensor& t) {
  NoGradGuard ng;
  check_constraint(who, param, gt(t, 0.0), "> 0", t);
}

Shape concat(const Shape& a, const Shape& b) {
  Shape s = a;
  s.insert(s.end(), b.begin(), b.end());
  return s;
}

// A stream of uniforms for one element: Philox at (seed, counter = first + element, hi = draw
// block), so each element's draws are its own whatever the order.
struct ElementStream {
  RngState st;
  uint64_t element, block = 0;
  int used = 4;
  Philox4 words{};
  double uniform() {  // [0, 1)
    if (used > 2) {
      words = philox4x32(st.offset + element, block++, st.seed);
      used = 0;
    }
    const double u = uint_to_uniform_double(words.x[used], words.x[used + 1]);
    used += 2;
    return u;
  }
  double normal() {  // Box-Muller
    double u1 = uniform();
    while (u1 <= 0.0) u1 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2 * M_PI * uniform());
  }
};

// Gamma(alpha, 1) by Marsaglia and Tsang (2000); alpha < 1 through Gamma(alpha + 1) U^(1 / alpha).
double standard_gamma(ElementStream& s, double alpha) {
  double boost = 1.0;
  if (alpha < 1.0) {
    double u = s.uniform();
    while (u <= 0.0) u = s.uniform();
    boost = std::pow(u, 1.0 / alpha);
    alpha += 1.0;
  }
  const double d = alpha - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    double x, v;
    do {
      x = s.normal();
      v = 1.0 + c * x;
    } while (v <= 0.0);
    v = v * v * v;
    const double u = s.uniform();
    if (u < 1.0 - 0.0331 * x * x * x * x) return boost * d * v;
    if (u > 0.0 && std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return boost * d * v;
  }
}

// d x / d alpha for x ~ Gamma(alpha, 1) with its CDF held fixed (the implicit reparameterisation
// gradient, -dF/dalpha / dF/dx), by PyTorch's approximations (Jankowiak and Obermeyer, 2018): a
// Taylor series of the CDF for x < 0.8, Rice's saddle-point expansion for alpha > 8, a bivariate
// rational fit in (log(x / alpha), log alpha) elsewhere.
double standard_gamma_grad(double alpha, double x) {
  if (x < 0.8) {
    double numer = 1, denom = alpha, s1 = numer / denom, s2 = numer / (denom * denom);
    for (int i = 1; i <= 5; ++i) {
      numer *= -x / double(i);
      denom += 1;
      s1 += numer / denom;
      s2 += numer / (denom * denom);
    }
    const double pow_x_alpha = std::pow(x, alpha), pdf = std::pow(x, alpha - 1) * std::exp(-x);
    const double cdf = pow_x_alpha * s1;
    const double cdf_alpha = (std::log(x) - math::digamma(alpha)) * cdf - pow_x_alpha * s2;
    const double r = -cdf_alpha / pdf;
    return std::isnan(r) ? 0.0 : r;
  }
  if (alpha > 8.0) {
    if (0.9 * alpha <= x && x <= 1.1 * alpha) {
      const double n1 = 1 + 24 * alpha * (1 + 12 * alpha);
      const double n2 = 1440 * (alpha * alpha) + 6 * x * (53 - 120 * x) - 65 * x * x / alpha + alpha * (107 + 3600 * x);
      return n1 * n2 / (1244160 * (alpha * alpha) * (alpha * alpha));
    }
    const double denom = std::sqrt(8 * alpha), t2 = denom / (alpha - x);
    const double t3 = std::pow(x - alpha - alpha * std::log(x / alpha), -1.5);
    const double t23 = x < alpha ? t2 - t3 : t2 + t3;
    const double t1 = std::log(x / alpha) * t23 - std::sqrt(2 / alpha) * (alpha + x) / ((alpha - x) * (alpha - x));
    const double stirling = 1 + 1 / (12 * alpha) * (1 + 1 / (24 * alpha));
    return -stirling * (x * t1) / denom;
  }
  static constexpr double c[3][8] = {
      {0.16009398, -0.094634809, 0.025146376, -0.0030648343, 1, 0.32668115, 0.10406089, 0.0014179084},
      {0.53487893, 0.1298071, 0.065735949, -0.0015649758, 0.16639465, 0.020070113, -0.0035938915, -0.00058392623},
      {0.040121004, -0.0065914022, -0.0026286047, -0.0013441777, 0.017050642, -0.0021309326, 0.00085092367,
       -1.5247877e-07}};
  const double u = std::log(x / alpha), v = std::log(alpha);
  double cv[8];
  for (int i = 0; i < 8; ++i) cv[i] = c[0][i] + u * (c[1][i] + u * c[2][i]);
  const double p = cv[0] + v * (cv[1] + v * (cv[2] + v * cv[3]));
  const double q = cv[4] + v * (cv[5] + v * (cv[6] + v * cv[7]));
  return std::exp(p / q);
}

// Poisson(lam): multiplication of uniforms below 10, Hormann's transformed rejection (PTRS) above.
double poisson_draw(ElementStream& s, double lam) {
  if (lam <= 0.0) return 0.0;
  if (lam < 10.0) {
    const double L = std::exp(-lam);
    double p = 1.0, k = 0.0;
    for (;;) {
      p *= s.uniform();
      if (p <= L) return k;
      k += 1.0;
    }
  }
  const double slam = std::sqrt(lam), loglam = std::log(lam);
  const double b = 0.931 + 2.53 * slam, a = -0.059 + 0.02483 * b;
  const double invalpha = 1.1239 + 1.1328 / (b - 3.4), vr = 0.9277 - 3.6224 / (b - 2);
  for (;;) {
    const double U = s.uniform() - 0.5, V = s.uniform();
    const double us = 0.5 - std::fabs(U);
    const double k = std::floor((2 * a / us + b) * U + lam + 0.43);
    if (us >= 0.07 && V <= vr) return k;
    if (k < 0 || (us < 0.013 && V > us)) continue;
    if (std::log(V) + std::log(invalpha) - std::log(a / (us * us) + b) <= -lam + k * loglam - std::lgamma(k + 1))
      return k;
  }
}

std::vector<double> host_values(const Tensor& t) {
  NoGradGuard ng;
  return t.detach().contiguous().to(DType::float64).to_vector<double>();
}

// Draws f(stream, parameter) for each entry of `param` (expanded to shape) on the host; the
// result in param's dtype and device.
template <class F>
Tensor host_draws(const Tensor& param, const Shape& shape, F f) {
  NoGradGuard ng;
  const std::vector<double> p = host_values(param.expand(shape));
  std::vector<double> out(p.size());
  const RngState st = rng_reserve(uint64_t(p.size()));
  for (size_t i = 0; i < p.size(); ++i) {
    ElementStream s{st, uint64_t(i)};
    out[i] = f(s, p[i]);
  }
  return from_vector<double>(out, shape).to(param.dtype()).to(param.device());
}

Tensor rand_like_shape(const Shape& shape, const Tensor& like) {
  return rand(shape, {.dtype = like.dtype(), .device = like.device()});
}

}  // namespace

// ---------------------------------------------------------------- Distribution

Tensor Distribution::stddev() const { return sqrt(variance()); }
Tensor Distribution::rsample(const Shape&) const {
  KILN_FAIL(name(), ": rsample is not available (no reparameterised draw: use sample, which has no gradient)");
}
Tensor Distribution::cdf(const Tensor&) const { KILN_FAIL(name(), ": cdf is not available"); }
Tensor Distribution::icdf(const Tensor&) const { KILN_FAIL(name(), ": icdf is not available"); }
Shape Distribution::extended_shape(const Shape& sample_shape) const {
  return concat(concat(sample_shape, batch_shape_), event_shape_);
}

// ---------------------------------------------------------------- Normal

Normal::Normal(const Tensor& l, const Tensor& s) {
  std::tie(loc, scale) = broadcast_all("Normal", l, s);
  check_positive("Normal", "scale", scale);
  batch_shape_ = loc.shape();
}
Normal::Normal(double l, double s) : Normal(number(l), number(s)) {}
Tensor Normal::log_prob(const Tensor& value) const {
  const Tensor var = pow(scale, 2.0);
  const Tensor d = sub(value, loc);
  return sub(sub(div(neg(mul(d, d)), mul(var, 2.0)), log(scale)), kLogSqrt2Pi);
}
Tensor Normal::entropy() const { return add(log(scale), 0.5 + 0.5 * std::log(2 * M_PI)); }
Tensor Normal::variance() const { return pow(scale, 2.0); }
Tensor Normal::sample(const Shape& sample_shape) const {
  NoGradGuard ng;
  return rsample(sample_shape);
}
Tensor Normal::rsample(const Shape& sample_shape) const {
  const Tensor eps = randn(extended_shape(sample_shape), {.dtype = loc.dtype(), .device = loc.device()});
  return add(loc, mul(eps, scale));
}
Tensor Normal::cdf(const Tensor& value) const {
  return mul(add(erf(div(mul(sub(value, loc), reciprocal(scale)), std::sqrt(2.0))), 1.0), 0.5);
}
Tensor Normal::icdf(const Tensor& value) const {
  return add(loc, mul(mul(scale, erfinv(sub(mul(value, 2.0), 1.0))), std::sqrt(2.0)));
}

// ---------------------------------------------------------------- Uniform

Uniform::Uniform(const Tensor& lo, const Tensor& hi) {
  std::tie(low, high) = broadcast_all("Uniform", lo, hi);
  check_constraint("Uniform", "low", lt(low, high), "below high", low);
  batch_shape_ = low.shape();
}
Uniform::Uniform(double lo, double hi) : Uniform(number(lo), number(hi)) {}
Tensor Uniform::log_prob(const Tensor& value) const {
  const Tensor lb = le(low, value).to(low.dtype()), ub = gt(high, value).to(low.dtype());
  return sub(log(mul(lb, ub)), log(sub(high, low)));
}
Tensor Uniform::entropy() const { return log(sub(high, low)); }
Tensor Uniform::mean() const { return div(add(high, low), 2.0); }
Tensor Uniform::variance() const { return div(pow(sub(high, low), 2.0), 12.0); }
Tensor Uniform::sample(const Shape& sample_shape) const {
  NoGradGuard ng;
  return rsample(sample_shape);
}
Tensor Uniform::rsample(const Shape& sample_shape) const {
  return add(low, mul(rand_like_shape(extended_shape(sample_shape), low), sub(high, low)));
}
Tensor Uniform::cdf(const Tensor& value) const { return clamp(div(sub(value, low), sub(high, low)), 0.0, 1.0); }
Tensor Uniform::icdf(const Tensor& value) const { return add(mul(value, sub(high, low)), low); }

// ---------------------------------------------------------------- Exponential

Exponential::Exponential(const Tensor& r) : rate(r) {
  KILN_CHECK(r.defined() && r.is_floating_point(), "Exponential: rate must be a floating-point tensor");
  check_positive("Exponential", "rate", rate);
  batch_shape_ = rate.shape();
}
Exponential::Exponential(double r) : Exponential(number(r)) {}
Tensor Exponential::log_prob(const Tensor& value) const { return sub(log(rate), mul(rate, value)); }
Tensor Exponential::entropy() const { return rsub(1.0, log(rate)); }
Tensor Exponential::mean() const { return reciprocal(rate); }
Tensor Exponential::variance() const { return pow(rate, -2.0); }
Tensor Exponential::sample(const Shape& sample_shape) const {
  NoGradGuard ng;
  return rsample(sample_shape);
}
Tensor Exponential::rsample(const Shape& sample_shape) const {
  const Tensor e = neg(log1p(neg(rand_like_shape(extended_shape(sample_shape), rate))));  // -log(1 - U)
  return div(e, rate);
}
Tensor Exponential::cdf(const Tensor& value) const { return rsub(1.0, exp(mul(neg(rate), value))); }
Tensor Exponential::icdf(const Tensor& value) const { return div(neg(log1p(neg(value))), rate); }

// ---------------------------------------------------------------- Laplace

Laplace::Laplace(const Tensor& l, const Tensor& s) {
  std::tie(loc, scale) = broadcast_all("Laplace", l, s);
  check_positive("Laplace", "scale", scale);
  batch_shape_ = loc.shape();
}
Laplace::Laplace(double l, double s) : Laplace(number(l), number(s)) {}
Tensor Laplace::log_prob(const Tensor& value) const {
  return sub(neg(log(mul(scale, 2.0))), div(abs(sub(value, loc)), scale));
}
Tensor Laplace::entropy() const { return add(log(mul(scale, 2.0)), 1.0); }
Tensor Laplace::variance() const { return mul(pow(scale, 2.0), 2.0); }
Tensor Laplace::sample(const Shape& sample_shape) const {
  NoGradGuard ng;
  return rsample(sample_shape);
}
Tensor Laplace::rsample(const Shape& sample_shape) const {
  const double eps = finfo_eps(loc.dtype());  // u in [eps - 1, 1), as PyTorch's
  const Tensor u = add(mul(rand_like_shape(extended_shape(sample_shape), loc), 2.0 - eps), eps - 1.0);
  return sub(loc, mul(mul(scale, sign(u)), log1p(neg(abs(u)))));
}
Tensor Laplace::cdf(const Tensor& value) const {
  const Tensor d = sub(value, loc);
  return rsub(0.5, mul(mul(sign(d), 0.5), expm1(div(neg(abs(d)), scale))));
}
Tensor Laplace::icdf(const Tensor& value) const {
  const Tensor term = sub(value, 0.5);
  return sub(loc, mul(mul(scale, sign(term)), log1p(mul(abs(term), -2.0))));
}

// ---------------------------------------------------------------- Bernoulli

namespace {
// PyTorch's probs_to_logits(probs, is_binary=True): log odds of probs clamped to [eps, 1 - eps]
Tensor binary_logits(const Tensor& p) {
  const double eps = finfo_eps(p.dtype());
  const Tensor c = clamp(p, eps, 1.0 - eps);
  return sub(log(c), log1p(neg(c)));
}
}  // namespace

Bernoulli Bernoulli::from_probs(const Tensor& p) {
  KILN_CHECK(p.defined() && p.is_floating_point(), "Bernoulli: probs must be a floating-point tensor");
  check_constraint("Bernoulli", "probs", logical_and(ge(p, 0.0), le(p, 1.0)), "in [0, 1]", p);
  Bernoulli b;
  b.probs = p;
  b.logits = binary_logits(p);
  b.batch_shape_ = p.shape();
  return b;
}
Bernoulli Bernoulli::from_logits(const Tensor& l) {
  KILN_CHECK(l.defined() && l.is_floating_point(), "Bernoulli: logits must be a floating-point tensor");
  Bernoulli b;
  b.logits = l;
  b.probs = sigmoid(l);
  b.batch_shape_ = l.shape();
  return b;
}
Tensor Bernoulli::log_prob(const Tensor& value) const {
  auto [l, v] = broadcast_all("Bernoulli.log_prob", logits, value.is_floating_point() ? value : value.to(logits.dtype()));
  return neg(binary_cross_entropy_with_logits(l, v, {.reduction = Reduction::none}));
}
Tensor Bernoulli::entropy() const {
  return binary_cross_entropy_with_logits(logits, probs, {.reduction = Reduction::none});
}
Tensor Bernoulli::variance() const { return mul(probs, rsub(1.0, probs)); }
Tensor Bernoulli::sample(const Shape& sample_shape) const {
  NoGradGuard ng;
  const Shape s = extended_shape(sample_shape);
  return lt(rand_like_shape(s, probs), probs.expand(s)).to(probs.dtype());
}

// ---------------------------------------------------------------- Categorical

Categorical Categorical::from_probs(const Tensor& p) {
  KILN_CHECK(p.defined() && p.is_floating_point() && p.dim() >= 1,
             "Categorical: probs must be a floating-point tensor of at least one dim, got ",
             p.defined() ? describe(p) : "undefined");
  check_constraint("Categorical", "probs", ge(p, 0.0), ">= 0", p);
  Categorical c;
  c.probs = div(p, sum(p, {-1}, true));
  const double eps = finfo_eps(p.dtype());
  c.logits = log(clamp(c.probs, eps, 1.0 - eps));  // PyTorch's probs_to_logits
  c.batch_shape_ = Shape(p.shape().begin(), p.shape().end() - 1);
  return c;
}
Categorical Categorical::from_logits(const Tensor& l) {
  KILN_CHECK(l.defined() && l.is_floating_point() && l.dim() >= 1,
             "Categorical: logits must be a floating-point tensor of at least one dim, got ",
             l.defined() ? describe(l) : "undefined");
  Categorical c;
  c.logits = sub(l, logsumexp(l, {-1}, true));
  c.probs = softmax(c.logits, -1);
  c.batch_shape_ = Shape(l.shape().begin(), l.shape().end() - 1);
  return c;
}
Tensor Categorical::log_prob(const Tensor& value) const {
  KILN_CHECK(value.defined(), "Categorical.log_prob: value is undefined");
  const Tensor v = value.to(DType::int64).unsqueeze(-1);
  const Shape s = broadcast_shapes(v.shape(), logits.shape(), "Categorical.log_prob");
  const Tensor idx = v.expand(s).narrow(-1, 0, 1).contiguous();
  return gather(logits.expand(s), -1, idx).squeeze(-1);
}
Tensor Categorical::entropy() const {
  const Tensor l = clamp(logits, finfo_min(logits.dtype()), std::nullopt);
  return neg(sum(mul(l, probs), {-1}));
}
Tensor Categorical::mean() const {
  return full(extended_shape({}), std::nan(""), {.dtype = probs.dtype(), .device = probs.device()});
}
Tensor Categorical::variance() const { return mean(); }
Tensor Categorical::sample(const Shape& sample_shape) const {
  NoGradGuard ng;
  int64_t n = 1;
  for (int64_t d : sample_shape) n *= d;
  const Shape out = extended_shape(sample_shape);
  if (n == 0) return Tensor::empty(out, DType::int64, probs.device());
  const Tensor p2 = probs.reshape({-1, num_events()});
  return multinomial(p2, n, true).transpose(0, 1).contiguous().reshape(out);
}

// ---------------------------------------------------------------- Gamma

Gamma::Gamma(const Tensor& c, const Tensor& r) {
  std::tie(concentration, rate) = broadcast_all("Gamma", c, r);
  check_positive("Gamma", "concentration", concentration);
  check_positive("Gamma", "rate", rate);
  batch_shape_ = rate.shape();
}
Gamma::Gamma(double c, double r) : Gamma(number(c), number(r)) {}
Tensor Gamma::log_prob(const Tensor& value) const {
  const Tensor v = value.to(rate.dtype()).to(rate.device());
  return sub(sub(add(xlogy(concentration, rate), xlogy(sub(concentration, 1.0), v)), mul(rate, v)),
             lgamma(concentration));
}
Tensor Gamma::entropy() const {
  return add(add(sub(concentration, log(rate)), lgamma(concentration)),
             mul(rsub(1.0, concentration), digamma(concentration)));
}
Tensor Gamma::mean() const { return div(concentration, rate); }
Tensor Gamma::variance() const { return div(concentration, pow(rate, 2.0)); }
Tensor Gamma::sample(const Shape& sample_shape) const {
  NoGradGuard ng;
  return rsample(sample_shape);
}
Tensor Gamma::rsample(const Shape& sample_shape) const {
  const Shape s = extended_shape(sample_shape);
  const Tensor a = concentration.expand(s);
  // PyTorch's _standard_gamma(concentration) / rate, clamped to the smallest normal number
  Tensor x = clamp(host_draws(concentration, s, [](ElementStream& st, double al) { return standard_gamma(st, al); }),
                   finfo_tiny(rate.dtype()), std::nullopt);
  const Tensor xs = x.detach();
  record(x, "Gamma.rsample", {a}, {a, xs}, [a, xs](const Tensor& g, const std::vector<bool>&) {
    const std::vector<double> av = host_values(a), xv = host_values(xs);
    std::vector<double> d(av.size());
    for (size_t i = 0; i < av.size(); ++i) d[i] = standard_gamma_grad(av[i], xv[i]);
    return std::vector<Tensor>{mul(g, from_vector<double>(d, xs.shape()).to(xs.dtype()).to(xs.device()))};
  });
  return div(x, rate.expand(s));
}

// ---------------------------------------------------------------- Dirichlet

namespace {
// d x / d alpha for x ~ Beta(alpha, total - alpha) with its CDF held fixed, scaled by 1 / (1 - x)
// (PyTorch's dirichlet_grad_one, Jankowiak and Obermeyer, 2018): Taylor series of the CDF near
// x = 0 and x = 1, Rice's saddle-point expansion when both parameters exceed 6, a rational
// correction to an analytic approximation elsewhere.
double beta_grad_alpha_small(double x, double alpha, double beta) {
  const double factor = math::digamma(alpha) - math::digamma(alpha + beta) - std::log(x);
  double numer = 1, series = numer / alpha * (factor + 1 / alpha);
  for (int i = 1; i <= 10; ++i) {
    numer *= (i - beta) * x / i;
    const double denom = alpha + i;
    series += numer / denom * (factor + 1 / denom);
  }
  const double r = x * std::pow(1 - x, -beta) * series;
  return std::isnan(r) ? 0.0 : r;
}
double beta_grad_beta_small(double x, double alpha, double beta) {
  const double factor = math::digamma(alpha + beta) - math::digamma(beta);
  double numer = 1, betas = 1, dbetas = 0, series = factor / alpha;
  for (int i = 1; i <= 8; ++i) {
    numer *= -x / i;
    dbetas = dbetas * (beta - i) + betas;
    betas = betas * (beta - i);
    series += numer / (alpha + i) * (dbetas + factor * betas);
  }
  const double r = -std::pow(1 - x, 1 - beta) * series;
  return std::isnan(r) ? 0.0 : r;
}
double beta_grad_alpha_mid(double x, double alpha, double beta) {
  const double total = alpha + beta, mean = alpha / total, sd = std::sqrt(alpha * beta / (total + 1)) / total;
  if (mean - 0.1 * sd <= x && x <= mean + 0.1 * sd) {  // avoid the singularity at x = mean
    const double poly = 47 * x * (beta * beta) * (beta * beta) +
                        alpha * ((43 + 20 * (16 + 27 * beta) * x) * (beta * beta) * beta +
                                 alpha * (3 * (59 + 180 * beta - 90 * x) * (beta * beta) +
                                          alpha * ((453 + 1620 * beta * (1 - x) - 455 * x) * beta +
                                                   alpha * (8 * (1 - x) * (135 * beta - 11)))));
    const double num = (1 + 12 * alpha) * (1 + 12 * beta) / (total * total);
    const double den = 12960 * alpha * alpha * alpha * beta * beta * (1 + 12 * total);
    return num / (1 - x) * poly / den;
  }
  const double prefactor = -x / std::sqrt(2 * alpha * beta / total);
  const double stirling = (1 + 1 / (12 * alpha) + 1 / (288 * alpha * alpha)) *
                          (1 + 1 / (12 * beta) + 1 / (288 * beta * beta)) /
                          (1 + 1 / (12 * total) + 1 / (288 * total * total));
  const double t1n = 2 * (alpha * alpha) * (x - 1) + alpha * beta * (x - 1) - x * (beta * beta);
  const double axbx = alpha * (x - 1) + beta * x;
  const double t1 = t1n / (std::sqrt(2 * alpha / beta) * std::pow(total, 1.5) * axbx * axbx);
  const double t2 = 0.5 * std::log(alpha / (total * x));
  const double t3 = std::sqrt(8 * alpha * beta / total) / (beta * x + alpha * (x - 1));
  const double t4 = std::pow(beta * std::log(beta / (total * (1 - x))) + alpha * std::log(alpha / (total * x)), -1.5);
  return stirling * prefactor * (t1 + t2 * (t3 + (x < mean ? t4 : -t4)));
}
double dirichlet_grad(double x, double alpha, double total) {
  const double beta = total - alpha, boundary = total * x * (1 - x);
  if (x <= 0.5 && boundary < 2.5) return beta_grad_alpha_small(x, alpha, beta);
  if (x >= 0.5 && boundary < 0.75) return -beta_grad_beta_small(1 - x, beta, alpha);
  if (alpha > 6 && beta > 6) return beta_grad_alpha_mid(x, alpha, beta);
  static constexpr double c[2][3][3][4] = {
      {{{1.003668233, -0.01061107488, -0.0657888334, 0.01201642863},
        {0.6336835991, -0.3557432599, 0.05486251648, -0.001465281033},
        {-0.03276231906, 0.004474107445, 0.002429354597, -0.0001557569013}},
       {{0.221950385, -0.3187676331, 0.01799915743, 0.01074823814},
        {-0.2951249643, 0.06219954479, 0.01535556598, 0.001550077057},
        {0.02155310298, 0.004170831599, 0.001292462449, 6.976601077e-05}},
       {{-0.05980841433, 0.008441916499, 0.01085618172, 0.002319392565},
        {0.02911413504, 0.01400243777, -0.002721828457, 0.000751041181},
        {0.005900514878, -0.001936558688, -9.495446725e-06, 5.385558597e-05}}},
      {{{1, -0.02924021934, -0.04438342661, 0.007285809825},
        {0.6357567472, -0.3473456711, 0.05454656494, -0.002407477521},
        {-0.03301322327, 0.004845219414, 0.00231480583, -0.0002307248149}},
       {{0.5925320577, -0.1757678135, 0.01505928619, 0.000564515273},
        {0.1014815858, -0.06589186703, 0.01272886114, -0.0007316646956},
        {-0.007258481865, 0.001096195486, 0.0003934994223, -4.12701925e-05}},
       {{0.06469649321, -0.0236701437, 0.002902096474, -5.896963079e-05},
        {0.001925008108, -0.002869809258, 0.0008000589141, -6.063713228e-05},
        {-0.0003477407336, 6.959756487e-05, 1.097287507e-05, -1.650964693e-06}}}};
  const double u = std::log(x), a = std::log(alpha) - u, b = std::log(total) - a;
  const double pu[3] = {1, u, u * u}, pa[3] = {1, a, a * a};
  double p = 0, q = 0;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      const double ua = pu[i] * pa[j];
      p += ua * (c[0][i][j][0] + b * (c[0][i][j][1] + b * (c[0][i][j][2] + b * c[0][i][j][3])));
      q += ua * (c[1][i][j][0] + b * (c[1][i][j][1] + b * (c[1][i][j][2] + b * c[1][i][j][3])));
    }
  return p / q * (x * (math::digamma(total) - math::digamma(alpha)) / beta);
}
}  // namespace


Dirichlet::Dirichlet(const Tensor& c) : concentration(c) {
  KILN_CHECK(c.defined() && c.is_floating_point() && c.dim() >= 1,
             "Dirichlet: concentration must be a floating-point tensor of at least one dim, got ",
             c.defined() ? describe(c) : "undefined");
  check_positive("Dirichlet", "concentration", c);
  batch_shape_ = Shape(c.shape().begin(), c.shape().end() - 1);
  event_shape_ = {c.size(-1)};
}
Tensor Dirichlet::log_prob(const Tensor& value) const {
  return sub(add(sum(mul(log(value), sub(concentration, 1.0)), {-1}), lgamma(sum(concentration, {-1}))),
             sum(lgamma(concentration), {-1}));
}
Tensor Dirichlet::entropy() const {
  const double k = double(concentration.size(-1));
  const Tensor a0 = sum(concentration, {-1});
  return sub(sub(sub(sum(lgamma(concentration), {-1}), lgamma(a0)), mul(rsub(k, a0), digamma(a0))),
             sum(mul(sub(concentration, 1.0), digamma(concentration)), {-1}));
}
Tensor Dirichlet::mean() const { return div(concentration, sum(concentration, {-1}, true)); }
Tensor Dirichlet::variance() const {
  const Tensor con0 = sum(concentration, {-1}, true);
  return div(mul(concentration, sub(con0, concentration)), mul(pow(con0, 2.0), add(con0, 1.0)));
}
Tensor Dirichlet::sample(const Shape& sample_shape) const {
  NoGradGuard ng;
  return rsample(sample_shape);
}
Tensor Dirichlet::rsample(const Shape& sample_shape) const {
  const Shape s = extended_shape(sample_shape);
  const Tensor a = concentration.expand(s);
  Tensor x;
  {
    NoGradGuard ng;  // PyTorch's _sample_dirichlet: normalised Gamma draws, clamped inside (0, 1)
    const Tensor g = host_draws(concentration, s, [](ElementStream& st, double al) { return standard_gamma(st, al); });
    x = clamp(div(g, sum(g, {-1}, true)), finfo_tiny(concentration.dtype()), 1.0 - finfo_eps(concentration.dtype()));
  }
  // PyTorch's _Dirichlet backward: dirichlet_grad(x, alpha, total) (g - sum(x g)) (first order)
  const Tensor xs = x.detach();
  record(x, "Dirichlet.rsample", {a}, {a, xs}, [a, xs](const Tensor& g, const std::vector<bool>&) {
    const std::vector<double> av = host_values(a), xv = host_values(xs);
    const std::vector<double> tv = host_values(sum(a.detach(), {-1}, true).expand(a.shape()));
    std::vector<double> d(av.size());
    for (size_t i = 0; i < av.size(); ++i) d[i] = dirichlet_grad(xv[i], av[i], tv[i]);
    const Tensor dg = from_vector<double>(d, xs.shape()).to(xs.dtype()).to(xs.device());
    return std::vector<Tensor>{mul(dg, sub(g, sum(mul(xs, g), {-1}, true)))};
  });
  return x;
}

// ---------------------------------------------------------------- Beta

namespace {
Dirichlet beta_dirichlet(const Tensor& c1, const Tensor& c0) {
  auto [a, b] = broadcast_all("Beta", c1, c0);
  return Dirichlet(stack({a, b}, -1));
}
}  // namespace
Beta::Beta(const Tensor& c1, const Tensor& c0) : dirichlet_(beta_dirichlet(c1, c0)) {
  std::tie(concentration1, concentration0) = broadcast_all("Beta", c1, c0);
  batch_shape_ = concentration1.shape();
}
Beta::Beta(double c1, double c0) : Beta(number(c1), number(c0)) {}
Tensor Beta::log_prob(const Tensor& value) const {
  const Tensor v = value.to(concentration1.dtype());
  return dirichlet_.log_prob(stack({v, rsub(1.0, v)}, -1));
}
Tensor Beta::entropy() const { return dirichlet_.entropy(); }
Tensor Beta::mean() const { return div(concentration1, add(concentration1, concentration0)); }
Tensor Beta::variance() const {
  const Tensor total = add(concentration1, concentration0);
  return div(mul(concentration1, concentration0), mul(pow(total, 2.0), add(total, 1.0)));
}
Tensor Beta::sample(const Shape& sample_shape) const { return dirichlet_.sample(sample_shape).select(-1, 0); }
Tensor Beta::rsample(const Shape& sample_shape) const { return dirichlet_.rsample(sample_shape).select(-1, 0); }

// ---------------------------------------------------------------- Poisson

Poisson::Poisson(const Tensor& r) : rate(r) {
  KILN_CHECK(r.defined() && r.is_floating_point(), "Poisson: rate must be a floating-point tensor");
  check_constraint("Poisson", "rate", ge(r, 0.0), ">= 0", r);
  batch_shape_ = rate.shape();
}
Poisson::Poisson(double r) : Poisson(number(r)) {}
Tensor Poisson::log_prob(const Tensor& value) const {
  auto [r, v] = broadcast_all("Poisson.log_prob", rate, value.is_floating_point() ? value : value.to(rate.dtype()));
  return sub(sub(xlogy(v, r), r), lgamma(add(v, 1.0)));
}
Tensor Poisson::entropy() const { KILN_FAIL("Poisson: entropy has no closed form (PyTorch has none either)"); }
Tensor Poisson::sample(const Shape& sample_shape) const {
  NoGradGuard ng;
  return host_draws(rate, extended_shape(sample_shape), [](ElementStream& st, double l) { return poisson_draw(st, l); });
}

// ---------------------------------------------------------------- MultivariateNormal

namespace {
// || L^-1 x ||^2 over the last dim (PyTorch's _batch_mahalanobis), L and x broadcast.
Tensor batch_mahalanobis(const Tensor& L, const Tensor& x) {
  return sum(pow(linalg::solve_triangular(L, x.unsqueeze(-1), /*upper=*/false).squeeze(-1), 2.0), {-1});
}
Tensor half_log_det(const Tensor& L) { return sum(log(linalg::diagonal(L)), {-1}); }
void check_mvn(const Tensor& loc, const Tensor& m, const char* what) {
  KILN_CHECK(loc.defined() && loc.is_floating_point() && loc.dim() >= 1,
             "MultivariateNormal: loc must be a floating-point tensor of at least one dim, got ",
             loc.defined() ? describe(loc) : "undefined");
  KILN_CHECK(m.defined() && m.dim() >= 2 && m.size(-1) == m.size(-2) && m.size(-1) == loc.size(-1),
             "MultivariateNormal: ", what, " must be (..., n, n) with n = loc.size(-1) = ", loc.size(-1), ", got ",
             m.defined() ? describe(m) : "undefined");
}
}  // namespace

MultivariateNormal::MultivariateNormal(const Tensor& l, const Tensor& L) : scale_tril(L) {
  const int64_t n = l.size(-1);
  const Shape batch = broadcast_shapes(Shape(L.shape().begin(), L.shape().end() - 2),
                                       Shape(l.shape().begin(), l.shape().end() - 1), "MultivariateNormal");
  Shape ls = batch;
  ls.push_back(n);
  loc = l.expand(ls);
  batch_shape_ = batch;
  event_shape_ = {n};
}
MultivariateNormal MultivariateNormal::from_covariance(const Tensor& loc, const Tensor& cov) {
  check_mvn(loc, cov, "covariance_matrix");
  return MultivariateNormal(loc, linalg::cholesky(cov));  // an error names a matrix that is not positive-definite
}
MultivariateNormal MultivariateNormal::from_precision(const Tensor& loc, const Tensor& P) {
  check_mvn(loc, P, "precision_matrix");
  // PyTorch's _precision_to_scale_tril: the Cholesky factor of P with rows and columns reversed
  const Tensor Lf = linalg::cholesky(flip(P, {-2, -1}));
  const Tensor L_inv = flip(Lf, {-2, -1}).transpose(-2, -1);
  const Tensor I = eye(P.size(-1), -1, {.dtype = P.dtype(), .device = P.device()});
  return MultivariateNormal(loc, linalg::solve_triangular(L_inv, I, /*upper=*/false));
}
MultivariateNormal MultivariateNormal::from_scale_tril(const Tensor& loc, const Tensor& L) {
  check_mvn(loc, L, "scale_tril");
  return MultivariateNormal(loc, L);
}
Tensor MultivariateNormal::log_prob(const Tensor& value) const {
  const Tensor diff = sub(value, loc);
  const Tensor M = batch_mahalanobis(scale_tril, diff);
  return sub(mul(add(M, double(event_shape_[0]) * std::log(2 * M_PI)), -0.5), half_log_det(scale_tril));
}
Tensor MultivariateNormal::entropy() const {
  const Tensor H = add(half_log_det(scale_tril), 0.5 * double(event_shape_[0]) * (1.0 + std::log(2 * M_PI)));
  return H.expand(batch_shape_);
}
Tensor MultivariateNormal::variance() const { return sum(pow(scale_tril, 2.0), {-1}).expand(loc.shape()); }
Tensor MultivariateNormal::covariance_matrix() const {
  return matmul(scale_tril, scale_tril.transpose(-2, -1)).expand(concat(batch_shape_, {event_shape_[0], event_shape_[0]}));
}
Tensor MultivariateNormal::sample(const Shape& sample_shape) const {
  NoGradGuard ng;
  return rsample(sample_shape);
}
Tensor MultivariateNormal::rsample(const Shape& sample_shape) const {
  const Tensor eps = randn(extended_shape(sample_shape), {.dtype = loc.dtype(), .device = loc.device()});
  return add(loc, matmul(scale_tril, eps.unsqueeze(-1)).squeeze(-1));  // PyTorch's _batch_mv
}

// ---------------------------------------------------------------- Cauchy

Cauchy::Cauchy(const Tensor& l, const Tensor& sc) {
  std::tie(loc, scale) = broadcast_all("Cauchy", l, sc);
  check_positive("Cauchy", "scale", scale);
  batch_shape_ = loc.shape();
}
Cauchy::Cauchy(double l, double sc) : Cauchy(number(l), number(sc)) {}
Tensor Cauchy::log_prob(const Tensor& value) const {
  return sub(rsub(-std::log(M_PI), log(scale)), log1p(pow(div(sub(value, loc), scale), 2.0)));
}
Tensor Cauchy::entropy() const { return add(log(scale), std::log(4 * M_PI)); }
Tensor Cauchy::mean() const {
  return full(batch_shape_, std::numeric_limits<double>::quiet_NaN(), {.dtype = loc.dtype(), .device = loc.device()});
}
Tensor Cauchy::variance() const {
  return full(batch_shape_, std::numeric_limits<double>::infinity(), {.dtype = loc.dtype(), .device = loc.device()});
}
Tensor Cauchy::sample(const Shape& sample_shape) const {
  NoGradGuard ng;
  return rsample(sample_shape);
}
Tensor Cauchy::rsample(const Shape& sample_shape) const {
  // a standard Cauchy draw tan(pi (U - 1/2)), as Tensor.cauchy_
  const Tensor eps = tan(mul(sub(rand_like_shape(extended_shape(sample_shape), loc), 0.5), M_PI));
  return add(loc, mul(eps, scale));
}
Tensor Cauchy::cdf(const Tensor& value) const { return add(div(atan(div(sub(value, loc), scale)), M_PI), 0.5); }
Tensor Cauchy::icdf(const Tensor& value) const { return add(mul(tan(mul(sub(value, 0.5), M_PI)), scale), loc); }

// ---------------------------------------------------------------- LogNormal

LogNormal::LogNormal(const Tensor& l, const Tensor& sc) : base_(l, sc) {
  loc = base_.loc;
  scale = base_.scale;
  batch_shape_ = loc.shape();
}
LogNormal::LogNormal(double l, double sc) : LogNormal(number(l), number(sc)) {}
Tensor LogNormal::log_prob(const Tensor& value) const {
  const Tensor x = log(value);  // ExpTransform's inverse; its log|det J| is x
  return add(neg(x), base_.log_prob(x));
}
Tensor LogNormal::entropy() const { return add(base_.entropy(), loc); }
Tensor LogNormal::mean() const { return exp(add(loc, div(pow(scale, 2.0), 2.0))); }
Tensor LogNormal::variance() const {
  const Tensor s2 = pow(scale, 2.0);
  return mul(expm1(s2), exp(add(mul(loc, 2.0), s2)));
}
Tensor LogNormal::sample(const Shape& sample_shape) const {
  NoGradGuard ng;
  return rsample(sample_shape);
}
Tensor LogNormal::rsample(const Shape& sample_shape) const { return exp(base_.rsample(sample_shape)); }
Tensor LogNormal::cdf(const Tensor& value) const { return base_.cdf(log(value)); }
Tensor LogNormal::icdf(const Tensor& value) const { return exp(base_.icdf(value)); }

// ---------------------------------------------------------------- HalfNormal

HalfNormal::HalfNormal(const Tensor& sc) : base_(zeros_like(sc), sc) {
  scale = base_.scale;
  batch_shape_ = scale.shape();
}
HalfNormal::HalfNormal(double sc) : HalfNormal(number(sc)) {}
Tensor HalfNormal::log_prob(const Tensor& value) const {
  const Tensor lp = add(base_.log_prob(value), std::log(2.0));
  return where(ge(value, 0.0), lp, -std::numeric_limits<double>::infinity());
}
Tensor HalfNormal::entropy() const { return sub(base_.entropy(), std::log(2.0)); }
Tensor HalfNormal::mean() const { return mul(scale, std::sqrt(2 / M_PI)); }
Tensor HalfNormal::variance() const { return mul(pow(scale, 2.0), 1 - 2 / M_PI); }
Tensor HalfNormal::sample(const Shape& sample_shape) const {
  NoGradGuard ng;
  return rsample(sample_shape);
}
Tensor HalfNormal::rsample(const Shape& sample_shape) const { return abs(base_.rsample(sample_shape)); }
Tensor HalfNormal::cdf(const Tensor& value) const { return sub(mul(base_.cdf(value), 2.0), 1.0); }
Tensor HalfNormal::icdf(const Tensor& value) const { return base_.icdf(div(add(value, 1.0), 2.0)); }

// ---------------------------------------------------------------- Gumbel

namespace {
// PyTorch's Gumbel is a transformed Uniform(tiny, 1 - eps) of the dtype
std::pair<double, double> gumbel_interval(DType dt) { return {finfo_tiny(dt), 1.0 - finfo_eps(dt)}; }
}  // namespace

Gumbel::Gumbel(const Tensor& l, const Tensor& sc) {
  std::tie(loc, scale) = broadcast_all("Gumbel", l, sc);
  check_positive("Gumbel", "scale", scale);
  batch_shape_ = loc.shape();
}
Gumbel::Gumbel(double l, double sc) : Gumbel(number(l), number(sc)) {}
Tensor Gumbel::log_prob(const Tensor& value) const {
  const Tensor y = div(sub(loc, value), scale);
  return sub(sub(y, exp(y)), log(scale));
}
Tensor Gumbel::entropy() const { return add(log(scale), 1.0 + 0.57721566490153286061); }
Tensor Gumbel::mean() const { return add(loc, mul(scale, 0.57721566490153286061)); }
Tensor Gumbel::variance() const { return pow(mul(scale, M_PI / std::sqrt(6.0)), 2.0); }
Tensor Gumbel::sample(const Shape& sample_shape) const {
  NoGradGuard ng;
  return rsample(sample_shape);
}
Tensor Gumbel::rsample(const Shape& sample_shape) const {
  const auto [lo, hi] = gumbel_interval(loc.dtype());
  const Tensor u = add(mul(rand_like_shape(extended_shape(sample_shape), loc), hi - lo), lo);
  return add(loc, mul(neg(scale), log(neg(log(u)))));  // the transforms: log, * -1, log, loc + (-scale) *
}
Tensor Gumbel::cdf(const Tensor& value) const {
  const auto [lo, hi] = gumbel_interval(loc.dtype());
  const Tensor u = exp(neg(exp(div(sub(value, loc), neg(scale)))));  // the transforms inverted
  return clamp(div(sub(u, lo), hi - lo), 0.0, 1.0);                   // Uniform(lo, hi).cdf
}
Tensor Gumbel::icdf(const Tensor& value) const {
  const auto [lo, hi] = gumbel_interval(loc.dtype());
  return add(loc, mul(neg(scale), log(neg(log(add(mul(value, hi - lo), lo))))));
}

// ---------------------------------------------------------------- Geometric

Geometric Geometric::from_probs(const Tensor& p) {
  KILN_CHECK(p.defined() && p.is_floating_point(), "Geometric: probs must be a floating-point tensor");
  check_constraint("Geometric", "probs", logical_and(gt(p, 0.0), le(p, 1.0)), "in (0, 1]", p);
  Geometric g;
  g.probs = p;
  g.logits = binary_logits(p);
  g.batch_shape_ = p.shape();
  return g;
}
Geometric Geometric::from_logits(const Tensor& l) {
  KILN_CHECK(l.defined() && l.is_floating_point(), "Geometric: logits must be a floating-point tensor");
  Geometric g;
  g.logits = l;
  g.probs = sigmoid(l);
  g.batch_shape_ = l.shape();
  return g;
}
Tensor Geometric::log_prob(const Tensor& value) const {
  auto [v, p] = broadcast_all("Geometric.log_prob", value.is_floating_point() ? value : value.to(probs.dtype()), probs);
  // PyTorch: probs taken as 0 where probs == 1 and value == 0, so 0 * log1p(-1) is 0, not NaN
  const Tensor pz = where(logical_and(eq(p, 1.0), eq(v, 0.0)), 0.0, p);
  return add(mul(v, log1p(neg(pz))), log(probs));
}
Tensor Geometric::entropy() const {
  return div(binary_cross_entropy_with_logits(logits, probs, {.reduction = Reduction::none}), probs);
}
Tensor Geometric::mean() const { return sub(reciprocal(probs), 1.0); }
Tensor Geometric::variance() const { return div(sub(reciprocal(probs), 1.0), probs); }
Tensor Geometric::sample(const Shape& sample_shape) const {
  NoGradGuard ng;
  const Shape s = extended_shape(sample_shape);
  const double tiny = finfo_tiny(probs.dtype());
  const Tensor u = add(mul(rand_like_shape(s, probs), 1.0 - tiny), tiny);  // uniform on [tiny, 1)
  return floor(div(log(u), log1p(neg(probs))));
}

// ---------------------------------------------------------------- Chi2, StudentT

Chi2::Chi2(const Tensor& d) : Gamma(mul(d, 0.5), full_like(d, 0.5)), df(d) {}
Chi2::Chi2(double d) : Chi2(number(d)) {}

namespace {
std::tuple<Tensor, Tensor, Tensor> broadcast_three(const char* who, const Tensor& a, const Tensor& b, const Tensor& c) {
  KILN_CHECK(a.defined() && b.defined() && c.defined(), who, ": a parameter is undefined");
  KILN_CHECK(a.is_floating_point() && b.is_floating_point() && c.is_floating_point(), who,
             ": parameters must be floating-point, got ", describe(a), ", ", describe(b), " and ", describe(c));
  const Shape s = broadcast_shapes(broadcast_shapes(a.shape(), b.shape(), who), c.shape(), who);
  return {a.expand(s), b.expand(s), c.expand(s)};
}
}  // namespace

StudentT::StudentT(const Tensor& d, const Tensor& l, const Tensor& sc) {
  std::tie(df, loc, scale) = broadcast_three("StudentT", d, l, sc);
  check_positive("StudentT", "df", df);
  check_positive("StudentT", "scale", scale);
  batch_shape_ = loc.shape();
}
StudentT::StudentT(double d, double l, double sc) : StudentT(number(d), number(l), number(sc)) {}
Tensor StudentT::log_prob(const Tensor& value) const {
  const Tensor y = div(sub(value, loc), scale);
  const Tensor Z = sub(add(add(add(log(scale), mul(log(df), 0.5)), 0.5 * std::log(M_PI)), lgamma(mul(df, 0.5))),
                       lgamma(mul(add(df, 1.0), 0.5)));
  return sub(mul(mul(add(df, 1.0), -0.5), log1p(div(pow(y, 2.0), df))), Z);
}
Tensor StudentT::entropy() const {
  const Tensor lbeta = sub(add(lgamma(mul(df, 0.5)), std::lgamma(0.5)), lgamma(mul(add(df, 1.0), 0.5)));
  return add(add(add(log(scale), mul(mul(add(df, 1.0), 0.5),
                                     sub(digamma(mul(add(df, 1.0), 0.5)), digamma(mul(df, 0.5))))),
                 mul(log(df), 0.5)),
             lbeta);
}
Tensor StudentT::mean() const { return where(le(df, 1.0), std::numeric_limits<double>::quiet_NaN(), loc); }
Tensor StudentT::variance() const {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  // scale^2 df / (df - 2) above 2 (computed where df > 2 only), inf in (1, 2], NaN at or below 1
  const Tensor big = gt(df, 2.0);
  const Tensor safe_df = where(big, df, 3.0);
  const Tensor v = div(mul(pow(scale, 2.0), safe_df), sub(safe_df, 2.0));
  return where(big, v, masked_fill(full_like(df, nan), gt(df, 1.0), inf));
}
Tensor StudentT::sample(const Shape& sample_shape) const {
  NoGradGuard ng;
  return rsample(sample_shape);
}
Tensor StudentT::rsample(const Shape& sample_shape) const {
  const Tensor X = randn(extended_shape(sample_shape), {.dtype = loc.dtype(), .device = loc.device()});
  const Tensor Z = Chi2(df).rsample(sample_shape);
  return add(loc, mul(scale, mul(X, rsqrt(div(Z, df)))));
}

// ---------------------------------------------------------------- KL divergences

Tensor kl_divergence(const Normal& p, const Normal& q) {
  const Tensor var_ratio = pow(div(p.scale, q.scale), 2.0);
  const Tensor t1 = pow(div(sub(p.loc, q.loc), q.scale), 2.0);
  return mul(sub(sub(add(var_ratio, t1), 1.0), log(var_ratio)), 0.5);
}
Tensor kl_divergence(const Uniform& p, const Uniform& q) {
  const Tensor result = log(div(sub(q.high, q.low), sub(p.high, p.low)));
  return where(logical_or(gt(q.low, p.low), lt(q.high, p.high)), std::numeric_limits<double>::infinity(), result);
}
Tensor kl_divergence(const Exponential& p, const Exponential& q) {
  const Tensor rate_ratio = div(q.rate, p.rate);
  return sub(add(neg(log(rate_ratio)), rate_ratio), 1.0);
}
Tensor kl_divergence(const Laplace& p, const Laplace& q) {
  const Tensor scale_ratio = div(p.scale, q.scale);
  const Tensor loc_abs_diff = abs(sub(p.loc, q.loc));
  const Tensor t1 = neg(log(scale_ratio)), t2 = div(loc_abs_diff, q.scale);
  const Tensor t3 = mul(scale_ratio, exp(div(neg(loc_abs_diff), p.scale)));
  return sub(add(add(t1, t2), t3), 1.0);
}
Tensor kl_divergence(const Bernoulli& p, const Bernoulli& q) {
  const double inf = std::numeric_limits<double>::infinity();
  Tensor t1 = mul(p.probs, sub(softplus(neg(q.logits)), softplus(neg(p.logits))));
  t1 = where(eq(p.probs, 0.0), 0.0, where(eq(q.probs, 0.0), inf, t1));
  Tensor t2 = mul(rsub(1.0, p.probs), sub(softplus(q.logits), softplus(p.logits)));
  t2 = where(eq(p.probs, 1.0), 0.0, where(eq(q.probs, 1.0), inf, t2));
  return add(t1, t2);
}
Tensor kl_divergence(const Categorical& p, const Categorical& q) {
  Tensor t = mul(p.probs, sub(p.logits, q.logits));
  t = where(eq(p.probs, 0.0), 0.0, where(eq(q.probs, 0.0), std::numeric_limits<double>::infinity(), t));
  return sum(t, {-1});
}
Tensor kl_divergence(const Gamma& p, const Gamma& q) {
  const Tensor t1 = mul(q.concentration, log(div(p.rate, q.rate)));
  const Tensor t2 = sub(lgamma(q.concentration), lgamma(p.concentration));
  const Tensor t3 = mul(sub(p.concentration, q.concentration), digamma(p.concentration));
  const Tensor t4 = mul(sub(q.rate, p.rate), div(p.concentration, p.rate));
  return add(add(add(t1, t2), t3), t4);
}
Tensor kl_divergence(const Beta& p, const Beta& q) {
  const Tensor sp = add(p.concentration1, p.concentration0), sq = add(q.concentration1, q.concentration0);
  const Tensor t1 = add(add(lgamma(q.concentration1), lgamma(q.concentration0)), lgamma(sp));
  const Tensor t2 = add(add(lgamma(p.concentration1), lgamma(p.concentration0)), lgamma(sq));
  const Tensor t3 = mul(sub(p.concentration1, q.concentration1), digamma(p.concentration1));
  const Tensor t4 = mul(sub(p.concentration0, q.concentration0), digamma(p.concentration0));
  const Tensor t5 = mul(sub(sq, sp), digamma(sp));
  return add(add(add(sub(t1, t2), t3), t4), t5);
}
Tensor kl_divergence(const Poisson& p, const Poisson& q) {
  return sub(mul(p.rate, sub(log(p.rate), log(q.rate))), sub(p.rate, q.rate));
}

}  // namespace kiln::distributions

namespace kiln::distributions {
Tensor kl_divergence(const MultivariateNormal& p, const MultivariateNormal& q) {
  KILN_CHECK(p.event_shape() == q.event_shape(), "kl_divergence(MultivariateNormal, MultivariateNormal): event shapes ",
             shape_str(p.event_shape()), " and ", shape_str(q.event_shape()), " differ");
  const int64_t n = p.event_shape()[0];
  const Tensor half_term1 = sub(half_log_det(q.scale_tril), half_log_det(p.scale_tril));
  const Shape batch = broadcast_shapes(Shape(q.scale_tril.shape().begin(), q.scale_tril.shape().end() - 2),
                                       Shape(p.scale_tril.shape().begin(), p.scale_tril.shape().end() - 2),
                                       "kl_divergence(MultivariateNormal, MultivariateNormal)");
  const Shape bnn = concat(batch, {n, n});
  const Tensor X = linalg::solve_triangular(q.scale_tril.expand(bnn), p.scale_tril.expand(bnn), /*upper=*/false);
  const Tensor term2 = sum(pow(X, 2.0), {-2, -1});  // PyTorch's _batch_trace_XXT
  const Tensor term3 = batch_mahalanobis(q.scale_tril, sub(q.loc, p.loc));
  return add(half_term1, mul(sub(add(term2, term3), double(n)), 0.5));
}
// KL pairs of the later distributions (torch/distributions/kl.py)
Tensor kl_divergence(const Cauchy& p, const Cauchy& q) {
  const Tensor t1 = log(add(pow(add(p.scale, q.scale), 2.0), pow(sub(p.loc, q.loc), 2.0)));
  const Tensor t2 = log(mul(mul(p.scale, 4.0), q.scale));
  return sub(t1, t2);
}
Tensor kl_divergence(const LogNormal& p, const LogNormal& q) { return kl_divergence(p.base_dist(), q.base_dist()); }
Tensor kl_divergence(const HalfNormal& p, const HalfNormal& q) { return kl_divergence(p.base_dist(), q.base_dist()); }
Tensor kl_divergence(const Gumbel& p, const Gumbel& q) {
  const double euler = 0.57721566490153286061;
  const Tensor ct1 = div(p.scale, q.scale), ct2 = div(q.loc, q.scale), ct3 = div(p.loc, q.scale);
  const Tensor t1 = add(sub(neg(log(ct1)), ct2), ct3);
  const Tensor t2 = mul(ct1, euler);
  const Tensor t3 = exp(sub(add(ct2, lgamma(add(ct1, 1.0))), ct3));
  return sub(add(add(t1, t2), t3), 1.0 + euler);
}
Tensor kl_divergence(const Geometric& p, const Geometric& q) {
  return sub(sub(neg(p.entropy()), div(log1p(neg(q.probs)), p.probs)), q.logits);
}

}  // namespace kiln::distributions
