// Probability distributions (torch.distributions): parameters as tensors broadcast
// together, log_prob / entropy / mean / variance / cdf written with PyTorch's formulas in
// recorded ops (so they are differentiable in the parameters and run on any device), sample
// (no gradient) and, where PyTorch has it, rsample (the reparameterised draw, differentiable in
// the parameters). Draws come from kiln's generator: manual_seed repeats them (they are not
// PyTorch's numbers). Parameters are checked at construction as PyTorch's validate_args does
// (a kiln::Error naming the distribution and the constraint; one read-back on a GPU);
// values passed to log_prob are not checked.
//   kiln::distributions::Normal pi(mu, sigma);
//   kiln::Tensor a = pi.rsample();                       // differentiable in mu and sigma
//   kiln::Tensor loss = kiln::neg(kiln::mean(pi.log_prob(a) * advantage));
//   kiln::Tensor kl = kiln::distributions::kl_divergence(pi, kiln::distributions::Normal(0.0, 1.0));
#pragma once
#include <optional>
#include "kiln/core/tensor.h"

namespace kiln::distributions {

/// The interface every distribution implements. batch_shape is the parameters' broadcast
/// shape (without Categorical's and Dirichlet's last dim); event_shape is () except for
/// Dirichlet's (K). A sample has shape sample_shape + batch_shape + event_shape.
class Distribution {
 public:
  virtual ~Distribution() = default;
  virtual Tensor log_prob(const Tensor& value) const = 0;
  virtual Tensor entropy() const = 0;
  virtual Tensor mean() const = 0;
  virtual Tensor variance() const = 0;
  Tensor stddev() const;
  /// A draw without gradient.
  virtual Tensor sample(const Shape& sample_shape = {}) const = 0;
  /// A reparameterised draw (gradients reach the parameters); an error where PyTorch has none.
  virtual Tensor rsample(const Shape& sample_shape = {}) const;
  virtual Tensor cdf(const Tensor& value) const;
  virtual Tensor icdf(const Tensor& value) const;
  virtual const char* name() const = 0;
  const Shape& batch_shape() const { return batch_shape_; }
  const Shape& event_shape() const { return event_shape_; }

 protected:
  Shape extended_shape(const Shape& sample_shape) const;
  Shape batch_shape_, event_shape_;
};

/// N(loc, scale^2), scale > 0.
class Normal : public Distribution {
 public:
  Normal(const Tensor& loc, const Tensor& scale);
  Normal(double loc, double scale);
  Tensor log_prob(const Tensor& value) const override;
  Tensor entropy() const override;
  Tensor mean() const override { return loc; }
  Tensor variance() const override;
  Tensor sample(const Shape& sample_shape = {}) const override;
  Tensor rsample(const Shape& sample_shape = {}) const override;
  Tensor cdf(const Tensor& value) const override;
  Tensor icdf(const Tensor& value) const override;
  const char* name() const override { return "Normal"; }
  Tensor loc, scale;
};

/// Uniform on [low, high), low < high.
class Uniform : public Distribution {
 public:
  Uniform(const Tensor& low, const Tensor& high);
  Uniform(double low, double high);
  Tensor log_prob(const Tensor& value) const override;
  Tensor entropy() const override;
  Tensor mean() const override;
  Tensor variance() const override;
  Tensor sample(const Shape& sample_shape = {}) const override;
  Tensor rsample(const Shape& sample_shape = {}) const override;
  Tensor cdf(const Tensor& value) const override;
  Tensor icdf(const Tensor& value) const override;
  const char* name() const override { return "Uniform"; }
  Tensor low, high;
};

/// rate e^(-rate x) on x >= 0, rate > 0.
class Exponential : public Distribution {
 public:
  explicit Exponential(const Tensor& rate);
  explicit Exponential(double rate);
  Tensor log_prob(const Tensor& value) const override;
  Tensor entropy() const override;
  Tensor mean() const override;
  Tensor variance() const override;
  Tensor sample(const Shape& sample_shape = {}) const override;
  Tensor rsample(const Shape& sample_shape = {}) const override;
  Tensor cdf(const Tensor& value) const override;
  Tensor icdf(const Tensor& value) const override;
  const char* name() const override { return "Exponential"; }
  Tensor rate;
};

/// e^(-|x - loc| / scale) / (2 scale), scale > 0.
class Laplace : public Distribution {
 public:
  Laplace(const Tensor& loc, const Tensor& scale);
  Laplace(double loc, double scale);
  Tensor log_prob(const Tensor& value) const override;
  Tensor entropy() const override;
  Tensor mean() const override { return loc; }
  Tensor variance() const override;
  Tensor sample(const Shape& sample_shape = {}) const override;
  Tensor rsample(const Shape& sample_shape = {}) const override;
  Tensor cdf(const Tensor& value) const override;
  Tensor icdf(const Tensor& value) const override;
  const char* name() const override { return "Laplace"; }
  Tensor loc, scale;
};

/// 1 with probability probs, 0 otherwise; made from probs in [0, 1] or from logits (log odds),
/// the other derived as PyTorch's (probs clamped to [eps, 1 - eps] before the log).
class Bernoulli : public Distribution {
 public:
  static Bernoulli from_probs(const Tensor& probs);
  static Bernoulli from_logits(const Tensor& logits);
  Tensor log_prob(const Tensor& value) const override;
  Tensor entropy() const override;
  Tensor mean() const override { return probs; }
  Tensor variance() const override;
  Tensor sample(const Shape& sample_shape = {}) const override;
  const char* name() const override { return "Bernoulli"; }
  Tensor probs, logits;

 private:
  Bernoulli() = default;
};

/// One of K categories (the last dim of probs or logits), probs normalised to sum to 1 and
/// logits to log-probabilities (logits - logsumexp), as PyTorch's.
class Categorical : public Distribution {
 public:
  static Categorical from_probs(const Tensor& probs);
  static Categorical from_logits(const Tensor& logits);
  /// value: category indices (any integer or float dtype), broadcast against batch_shape.
  Tensor log_prob(const Tensor& value) const override;
  Tensor entropy() const override;
  /// NaN, as PyTorch's (a category index has no mean).
  Tensor mean() const override;
  Tensor variance() const override;
  /// int64 indices of shape sample_shape + batch_shape.
  Tensor sample(const Shape& sample_shape = {}) const override;
  const char* name() const override { return "Categorical"; }
  int64_t num_events() const { return probs.size(-1); }
  Tensor probs, logits;

 private:
  Categorical() = default;
};

/// x^(concentration - 1) rate^concentration e^(-rate x) / Gamma(concentration), both > 0.
/// sample draws by Marsaglia and Tsang's method; rsample is the same draw with PyTorch's
/// implicit reparameterisation gradient (d x / d concentration at a fixed CDF; first order).
class Gamma : public Distribution {
 public:
  Gamma(const Tensor& concentration, const Tensor& rate);
  Gamma(double concentration, double rate);
  Tensor log_prob(const Tensor& value) const override;
  Tensor entropy() const override;
  Tensor mean() const override;
  Tensor variance() const override;
  Tensor sample(const Shape& sample_shape = {}) const override;
  Tensor rsample(const Shape& sample_shape = {}) const override;
  const char* name() const override { return "Gamma"; }
  Tensor concentration, rate;
};

/// Dirichlet(concentration) over the simplex of the last dim (event_shape (K)), all > 0.
/// sample normalises Gamma draws; rsample is the same draw with PyTorch's implicit
/// reparameterisation gradient (its dirichlet_grad approximations; first order).
class Dirichlet : public Distribution {
 public:
  explicit Dirichlet(const Tensor& concentration);
  Tensor log_prob(const Tensor& value) const override;
  Tensor entropy() const override;
  Tensor mean() const override;
  Tensor variance() const override;
  Tensor sample(const Shape& sample_shape = {}) const override;
  Tensor rsample(const Shape& sample_shape = {}) const override;
  const char* name() const override { return "Dirichlet"; }
  Tensor concentration;
};

/// Beta(concentration1, concentration0) on [0, 1] (PyTorch's argument order: the first is
/// alpha, the exponent of x), a two-category Dirichlet as PyTorch's (so rsample is the
/// Dirichlet's, differentiable in both concentrations).
class Beta : public Distribution {
 public:
  Beta(const Tensor& concentration1, const Tensor& concentration0);
  Beta(double concentration1, double concentration0);
  Tensor log_prob(const Tensor& value) const override;
  Tensor entropy() const override;
  Tensor mean() const override;
  Tensor variance() const override;
  Tensor sample(const Shape& sample_shape = {}) const override;
  Tensor rsample(const Shape& sample_shape = {}) const override;
  const char* name() const override { return "Beta"; }
  Tensor concentration1, concentration0;

 private:
  Dirichlet dirichlet_;
};

/// rate^k e^(-rate) / k!, rate >= 0 (sample: float counts in rate's dtype, as PyTorch's).
class Poisson : public Distribution {
 public:
  explicit Poisson(const Tensor& rate);
  explicit Poisson(double rate);
  Tensor log_prob(const Tensor& value) const override;
  /// Not in closed form (PyTorch has none either): an error.
  Tensor entropy() const override;
  Tensor mean() const override { return rate; }
  Tensor variance() const override { return rate; }
  Tensor sample(const Shape& sample_shape = {}) const override;
  const char* name() const override { return "Poisson"; }
  Tensor rate;
};

/// N(loc, Sigma) over the last dim (event_shape (n)), Sigma given as a covariance matrix
/// (factored by linalg::cholesky), a precision matrix, or its lower Cholesky factor
/// scale_tril; loc (..., n) and the matrix's batch dims broadcast.
class MultivariateNormal : public Distribution {
 public:
  static MultivariateNormal from_covariance(const Tensor& loc, const Tensor& covariance_matrix);
  static MultivariateNormal from_precision(const Tensor& loc, const Tensor& precision_matrix);
  static MultivariateNormal from_scale_tril(const Tensor& loc, const Tensor& scale_tril);
  Tensor log_prob(const Tensor& value) const override;
  Tensor entropy() const override;
  Tensor mean() const override { return loc; }
  /// The diagonal of Sigma (..., n).
  Tensor variance() const override;
  Tensor covariance_matrix() const;
  Tensor sample(const Shape& sample_shape = {}) const override;
  Tensor rsample(const Shape& sample_shape = {}) const override;
  const char* name() const override { return "MultivariateNormal"; }
  /// loc expanded to batch_shape + (n); scale_tril as given or computed (not expanded).
  Tensor loc, scale_tril;

 private:
  MultivariateNormal(const Tensor& loc, const Tensor& scale_tril);
};

/// loc + scale tan(pi (u - 1/2)), scale > 0: no mean (NaN) and no variance (inf), as PyTorch's.
class Cauchy : public Distribution {
 public:
  Cauchy(const Tensor& loc, const Tensor& scale);
  Cauchy(double loc, double scale);
  Tensor log_prob(const Tensor& value) const override;
  Tensor entropy() const override;
  Tensor mean() const override;
  Tensor variance() const override;
  Tensor sample(const Shape& sample_shape = {}) const override;
  Tensor rsample(const Shape& sample_shape = {}) const override;
  Tensor cdf(const Tensor& value) const override;
  Tensor icdf(const Tensor& value) const override;
  const char* name() const override { return "Cauchy"; }
  Tensor loc, scale;
};

/// exp(X) for X ~ N(loc, scale^2) (PyTorch's TransformedDistribution of a Normal by exp:
/// the same formulas, written out).
class LogNormal : public Distribution {
 public:
  LogNormal(const Tensor& loc, const Tensor& scale);
  LogNormal(double loc, double scale);
  Tensor log_prob(const Tensor& value) const override;
  Tensor entropy() const override;
  Tensor mean() const override;
  Tensor variance() const override;
  Tensor sample(const Shape& sample_shape = {}) const override;
  Tensor rsample(const Shape& sample_shape = {}) const override;
  Tensor cdf(const Tensor& value) const override;
  Tensor icdf(const Tensor& value) const override;
  const char* name() const override { return "LogNormal"; }
  /// The Normal whose exp this is (PyTorch's base_dist).
  const Normal& base_dist() const { return base_; }
  Tensor loc, scale;

 private:
  Normal base_;
};

/// |X| for X ~ N(0, scale^2), scale > 0 (log_prob -inf below 0).
class HalfNormal : public Distribution {
 public:
  explicit HalfNormal(const Tensor& scale);
  explicit HalfNormal(double scale);
  Tensor log_prob(const Tensor& value) const override;
  Tensor entropy() const override;
  Tensor mean() const override;
  Tensor variance() const override;
  Tensor sample(const Shape& sample_shape = {}) const override;
  Tensor rsample(const Shape& sample_shape = {}) const override;
  Tensor cdf(const Tensor& value) const override;
  Tensor icdf(const Tensor& value) const override;
  const char* name() const override { return "HalfNormal"; }
  /// The Normal(0, scale) whose absolute value this is (PyTorch's base_dist).
  const Normal& base_dist() const { return base_; }
  Tensor scale;

 private:
  Normal base_;
};

/// loc - scale log(-log U), scale > 0 (PyTorch's Gumbel: U on [tiny, 1 - eps] of the dtype,
/// so its cdf and icdf carry that interval's scaling as PyTorch's do).
class Gumbel : public Distribution {
 public:
  Gumbel(const Tensor& loc, const Tensor& scale);
  Gumbel(double loc, double scale);
  Tensor log_prob(const Tensor& value) const override;
  Tensor entropy() const override;
  Tensor mean() const override;
  Tensor variance() const override;
  Tensor sample(const Shape& sample_shape = {}) const override;
  Tensor rsample(const Shape& sample_shape = {}) const override;
  Tensor cdf(const Tensor& value) const override;
  Tensor icdf(const Tensor& value) const override;
  const char* name() const override { return "Gumbel"; }
  Tensor loc, scale;
};

/// The number of failures before the first success, P(k) = (1 - p)^k p, p in (0, 1]; made from
/// probs or logits as Bernoulli.
class Geometric : public Distribution {
 public:
  static Geometric from_probs(const Tensor& probs);
  static Geometric from_logits(const Tensor& logits);
  Tensor log_prob(const Tensor& value) const override;
  Tensor entropy() const override;
  Tensor mean() const override;
  Tensor variance() const override;
  Tensor sample(const Shape& sample_shape = {}) const override;
  const char* name() const override { return "Geometric"; }
  Tensor probs, logits;

 private:
  Geometric() = default;
};

/// Chi2(df) = Gamma(df / 2, 1 / 2), df > 0 (rsample is Gamma's).
class Chi2 : public Gamma {
 public:
  explicit Chi2(const Tensor& df);
  explicit Chi2(double df);
  const char* name() const override { return "Chi2"; }
  Tensor df;
};

/// Student's t with df > 0 degrees of freedom, loc + scale T (scale > 0): mean NaN for
/// df <= 1, variance inf for 1 < df <= 2 and NaN for df <= 1, as PyTorch's; rsample through
/// Chi2's reparameterised draw.
class StudentT : public Distribution {
 public:
  StudentT(const Tensor& df, const Tensor& loc, const Tensor& scale);
  StudentT(double df, double loc = 0.0, double scale = 1.0);
  Tensor log_prob(const Tensor& value) const override;
  Tensor entropy() const override;
  Tensor mean() const override;
  Tensor variance() const override;
  Tensor sample(const Shape& sample_shape = {}) const override;
  Tensor rsample(const Shape& sample_shape = {}) const override;
  const char* name() const override { return "StudentT"; }
  Tensor df, loc, scale;
};

/// KL(p || q) in closed form, PyTorch's formulas (inf where q is 0 and p is not).
Tensor kl_divergence(const Normal& p, const Normal& q);
Tensor kl_divergence(const Uniform& p, const Uniform& q);
Tensor kl_divergence(const Exponential& p, const Exponential& q);
Tensor kl_divergence(const Laplace& p, const Laplace& q);
Tensor kl_divergence(const Bernoulli& p, const Bernoulli& q);
Tensor kl_divergence(const Categorical& p, const Categorical& q);
Tensor kl_divergence(const Gamma& p, const Gamma& q);
Tensor kl_divergence(const Beta& p, const Beta& q);
Tensor kl_divergence(const Poisson& p, const Poisson& q);
Tensor kl_divergence(const Cauchy& p, const Cauchy& q);
Tensor kl_divergence(const LogNormal& p, const LogNormal& q);
Tensor kl_divergence(const HalfNormal& p, const HalfNormal& q);
Tensor kl_divergence(const Gumbel& p, const Gumbel& q);
Tensor kl_divergence(const Geometric& p, const Geometric& q);
Tensor kl_divergence(const MultivariateNormal& p, const MultivariateNormal& q);

}  // namespace kiln::distributions
